"""``python -m torchx_nb.apps.log_times LOG...``: when each line of log files that another
process writes was written, kept in ``LOG.times`` beside each (read back by
``schedulers/logs.LineTimes``).

Slurm's batch script runs it beside ``srun``: slurmstepd writes the replicas' ``--output`` and
``--error`` files itself, so no line ever waits in a pipe of ours that a SIGKILL or a cancel
could lose; this watcher only looks at the files grow (every ``POLL_S``, and once more when
told the step ended) and writes, for each look that found lines beginning, ``N TIME END``:
lines N to END-1 (0-based) began by TIME, at most one look after they were written. Lines past
the last entry's END have no time (the watcher was killed before it looked again). Whatever
happens to it, the job and its logs are not touched: it only reads them.

A log that shrinks or changes below what was read (a requeued job whose ``srun`` truncates its
files) starts its times again; one that grows on (``--open-mode=append``) keeps them.

It says ``ready`` on its standard output once it knows where the files stand, and the script
starts srun only then (or after 30 s), so no line is written before it looks. It ends when its
standard input closes (the batch script closes its end once ``srun``
returned): one more look, then exit. If the script itself went (a cancel: Slurm stops the
whole job), it looks on while the program may still write as it stops, until the logs stay
unchanged for ``IDLE_EXIT_S`` or Slurm kills it (a SIGTERM does not stop it).
Standard library only."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import IO

POLL_S = 0.2
IDLE_EXIT_S = 35.0  # Slurm's default KillWait is 30 s
BLOCK = 1 << 20
_CHECK = 64  # bytes below the read offset that must not change (else: truncated, rewritten)


class WatchedLog:
    """One log file and its ``.times`` file: what was read so far and where lines stand."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.times: IO[bytes] | None = None
        self.offset = 0
        self.lines = 0  # newlines read so far
        self.at_start = True  # the next byte begins a line
        self.below = b""  # the last bytes read, to notice a rewrite
        self._take_over()

    def _take_over(self) -> None:
        """A log already there (an earlier attempt's, kept by ``--open-mode=append``) was
        timed by the watcher of its time: go on after it."""
        try:
            with open(self.path, "rb") as f:
                while block := f.read(BLOCK):
                    self.lines += block.count(b"\n")
                    self.offset += len(block)
                    self.below = (self.below + block)[-_CHECK:]
        except OSError:
            return
        self.at_start = self.below.endswith(b"\n") or not self.below

    def _restart(self) -> None:
        self.offset, self.lines, self.at_start, self.below = 0, 0, True, b""
        if self.times is not None:
            self.times.close()
        self.times = self._open_times("wb")

    def _open_times(self, mode: str) -> IO[bytes] | None:
        try:
            return open(f"{self.path}.times", mode, buffering=0)
        except OSError:
            return None

    def look(self) -> None:
        """Read what was added since the last look and write its lines' time."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset or (self.below and self._changed(f)):
                    self._restart()
                f.seek(self.offset)
                now = time.time()
                while block := f.read(BLOCK):
                    self._add(block, now)
        except OSError:
            return  # not there yet, or unreadable for a moment: the next look sees it

    def _changed(self, f: IO[bytes]) -> bool:
        f.seek(self.offset - len(self.below))
        return f.read(len(self.below)) != self.below

    def _add(self, block: bytes, now: float) -> None:
        newlines = block.count(b"\n")
        ends_line = block.endswith(b"\n")
        first = self.lines if self.at_start else self.lines + 1
        began = (1 if self.at_start else 0) + newlines - (1 if ends_line else 0)
        if began > 0:
            if self.times is None:
                self.times = self._open_times("ab")
            if self.times is not None:
                with contextlib.suppress(OSError):  # a full disk loses times, never the job
                    self.times.write(f"{first} {now:.6f} {first + began}\n".encode())
        self.lines += newlines
        self.at_start = ends_line
        self.offset += len(block)
        self.below = (self.below + block)[-_CHECK:]


def watch(paths: list[str]) -> None:
    """Look at ``paths`` until standard input closes, then once more (see the module)."""
    import select

    logs = [WatchedLog(p) for p in paths]
    os.write(sys.stdout.fileno(), b"ready\n")  # the script waits for this before srun
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a cancel: look on
    parent = os.getppid()
    stdin = sys.stdin.fileno()
    told = False
    idle_since = time.monotonic()
    while True:
        seen = [log.offset for log in logs]
        for log in logs:
            log.look()
        if [log.offset for log in logs] != seen:
            idle_since = time.monotonic()
        if told:
            if os.getppid() == parent or time.monotonic() - idle_since > IDLE_EXIT_S:
                return  # the step ended and was looked at once more; or all is quiet
            time.sleep(POLL_S)
            continue
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready and not os.read(stdin, 4096):
            told = True  # closed: look once more (the loop's next look)


if __name__ == "__main__":
    watch(sys.argv[1:])
