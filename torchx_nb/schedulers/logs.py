"""Reading and following logs, shared by every backend: lines split from chunks as they come,
a file's tail read from its end, a regex filter (RE2), and the stop signal a follower waits
on (``TailStop``: a follow ends when its reader is closed)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from torchx_nb.specs.log_line import LogLine


def tail_lines(path: Path, n: int, pattern: Any = None, block: int = 1 << 16) -> list[str]:
    """The last ``n`` lines of ``path`` (those ``pattern`` finds, when given), newlines kept,
    read backwards a block at a time: the cost follows what is returned, not the file's size
    (a filter that matches nothing still reads it all)."""
    found: list[str] = []
    with open(path, "rb") as f:
        pos = f.seek(0, 2)
        rest = b""
        last_block = True
        while pos > 0 and len(found) < n:
            size = min(block, pos)
            pos -= size
            f.seek(pos)
            data = f.read(size) + rest
            parts = data.split(b"\n")
            rest = parts[0] if pos > 0 else b""
            complete = parts[1:] if pos > 0 else parts
            if last_block and complete and complete[-1] == b"":
                complete = complete[:-1]  # the file's final newline ends a line, starts none
            last_block = False
            for raw in reversed(complete):
                line = raw.decode("utf-8", errors="replace")
                if pattern is None or pattern.search(line):
                    found.append(line + "\n")
                    if len(found) >= n:
                        break
            if len(rest) > (1 << 20):
                rest = rest[-(1 << 20) :]  # a line over 1 MB keeps its end, as a terminal shows
    found.reverse()
    return found


def filter_regex(regex: str, data: Iterable[str]) -> Iterator[str]:
    """The lines of ``data`` in which ``regex`` is found (RE2: linear time, whatever the
    pattern)."""
    from torchx_nb.user_regex import compile_regex

    pattern = compile_regex(regex)
    return (line for line in data if pattern.search(line))


def split_lines(text: str) -> list[str]:
    """Split keeping the trailing newline on each line."""
    return text.splitlines(keepends=True)


class LineSplitter:
    """Cuts a stream of text (or UTF-8 bytes, decoded incrementally so a character split across
    chunks survives) into whole lines, newline kept, in time linear in the input.

    A pending line longer than ``max_pending`` characters that holds a carriage return keeps only
    what follows the last one, as a terminal shows it: progress bars that redraw with ``\\r``
    for hours cost bounded memory."""

    def __init__(self, max_pending: int = 1 << 20) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._size = 0
        self.max_pending = max_pending

    def feed(self, chunk: str | bytes) -> Iterator[str]:
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        start = 0
        while True:
            end = text.find("\n", start)
            if end < 0:
                break
            self._pending.append(text[start : end + 1])
            yield "".join(self._pending)
            self._pending.clear()
            self._size = 0
            start = end + 1
        if start < len(text):
            rest = text[start:]
            self._pending.append(rest)
            self._size += len(rest)
            if self._size > self.max_pending and "\r" in rest:
                line = "".join(self._pending)
                line = line[line.rindex("\r") + 1 :]
                self._pending = [line]
                self._size = len(line)

    def flush(self) -> Iterator[str]:
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._pending.append(tail)
        if self._pending:
            yield "".join(self._pending)
        self._pending.clear()
        self._size = 0


class LineTimes:
    """When each line of a log file was written, from the ``LOG.times`` file a writer keeps
    beside it: lines ``N TIME`` (local_cwd's supervisor, which writes each before the output it
    times), N rising, each saying that line N and those after it up to the next entry were
    written at TIME; or ``N TIME END`` (``apps/log_times``, which times what it saw written:
    lines N to END-1, those past END have no time until a later entry says). Asked in line
    order (``time_of(i)`` with i rising), it reads the file as it grows; None when there is
    none."""

    def __init__(self, log: Path) -> None:
        self._path = Path(f"{log}.times")
        self._file: Any = None
        self._pending = b""
        self._current: tuple[int, float, int | None] | None = None
        self._next: tuple[int, float, int | None] | None = None

    def _entry(self) -> tuple[int, float, int | None] | None:
        if self._file is None:
            try:
                self._file = open(self._path, "rb")  # noqa: SIM115 - closed in close()
            except OSError:
                return None
        while True:
            while b"\n" not in self._pending:
                more = self._file.read(65536)
                if not more:
                    return None
                self._pending += more
            line, _, self._pending = self._pending.partition(b"\n")
            fields = line.split()
            try:
                if len(fields) in (2, 3):
                    end = int(fields[2]) if len(fields) == 3 else None
                    return int(fields[0]), float(fields[1]), end
            except ValueError:
                pass  # a damaged entry: the next one says more

    def _known(self, index: int) -> float | None:
        if self._current is None:
            return None
        _, when, end = self._current
        return None if end is not None and index >= end else when

    def time_of(self, index: int) -> float | None:
        """The time line ``index`` (0-based) was written, or None if not known."""
        while True:
            if self._next is None:
                self._next = self._entry()
                if self._next is None:
                    return self._known(index)
            if self._next[0] > index:
                return self._known(index)
            self._current = self._next
            self._next = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def split_lines_iterator(chunks: Iterable[str | bytes]) -> Iterator[str]:
    """Re-chunk a stream of text (or UTF-8 byte) pieces into whole lines (newline kept)."""
    lines = LineSplitter()
    for chunk in chunks:
        yield from lines.feed(chunk)
    yield from lines.flush()


_TAIL = threading.local()


class TailStop:
    """Lets another thread end a log tail that is waiting for new lines.

    A reader thread iterates ``log_iter(..., should_tail=True)`` inside ``with stop:``; the
    schedulers' tails wait with ``tail_wait`` (and register blocking streams with
    ``on_tail_stop``), so ``stop.stop()`` from any thread makes the tail return at once instead
    of when the job ends. Outside such a block ``tail_wait`` is ``time.sleep``."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._closers: list[Any] = []
        self._lock = threading.Lock()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        self.event.set()
        with self._lock:
            closers, self._closers = self._closers, []
        for close in closers:
            with contextlib.suppress(Exception):
                close()

    def add_closer(self, close: Any) -> None:
        with self._lock:
            if not self.event.is_set():
                self._closers.append(close)
                return
        with contextlib.suppress(Exception):
            close()

    def __enter__(self) -> TailStop:
        _TAIL.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        _TAIL.current = None


def tail_wait(seconds: float) -> bool:
    """Sleep ``seconds`` between looks at a growing log; True when the tail was stopped."""
    stop: TailStop | None = getattr(_TAIL, "current", None)
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.event.wait(seconds)


def on_tail_stop(close: Any) -> None:
    """Call ``close()`` (e.g. a blocking stream's) when the current thread's tail is stopped."""
    stop: TailStop | None = getattr(_TAIL, "current", None)
    if stop is not None:
        stop.add_closer(close)


def timed_lines(path: Path, lines: Iterable[str]) -> Iterator[str]:
    """``lines`` of the log at ``path``, each a ``LogLine`` with the time the ``.times`` file
    beside it gives (None where it has none): the one reader for local_cwd's and Slurm's logs."""
    times = LineTimes(path)
    try:
        for i, line in enumerate(lines):
            yield LogLine(line, times.time_of(i))
    finally:
        times.close()
