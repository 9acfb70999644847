"""The supervisor itself: ``Replica`` (one replica's process and its logs) and ``Supervisor``
(attempts, preemption, cancel, the end hook, ``state.json``). Standard library only (see the
package's docstring)."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import IO, Any

from .processes import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    all_stats,
    child_pids,
    job_processes,
    prctl,
    proc_stat,
    signal_all,
    start_ticks,
    write_json,
)

GRACE_SECONDS = 10.0
ATTEMPT_VAR = "TORCHX_NB_LOCAL_ATTEMPT"  # the attempt every replica of it runs as, from 1
# the earlier attempts a replica was still running at when they were preempted, as the job's
# checkpoint ledger names attempts (``JOB/N``: the cell runner's ``checkpoint.RECLAIMED_ENV``;
# its JOB is the first of these set: a copy of ``checkpoint.JOB_ID_VARS``)
RECLAIMED_VAR = "TORCHX_NB_RECLAIMED"
JOB_ID_VARS = ("AWS_BATCH_JOB_ID", "SLURM_JOB_ID", "BATCH_JOB_UID")
LEFTOVER_GRACE_SECONDS = 1.0


class Replica:
    def __init__(self, role: str, idx: int, spec: dict[str, Any]) -> None:
        self.role = role
        self.idx = idx
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_ticks: int | None = None
        self.exitcode: int | None = None
        self.started: float | None = None
        self.ended: float | None = None
        self.error: str | None = None
        self.log_error: str | None = None
        self.files: dict[str, IO[bytes]] = {}
        self.times: dict[str, IO[bytes]] = {}
        # per log file: lines ended so far, and whether the next byte starts a line
        self.lines: dict[str, tuple[int, bool]] = {}
        self.preempted: list[int] = []  # the attempts it was running at when preempted

    def write(self, stream: str, chunk: bytes) -> bool:
        """Copy output to the log files; a full disk loses output, never the job (the pipe is
        still drained, so the replica does not block). True when a log file was just lost, so
        the state must say so.

        Beside each log, ``LOG.times`` gets a line ``N TIME`` for each chunk in which a line
        starts: line N (0-based) and the ones after it, up to the next entry, were written at
        TIME (seconds since the epoch). It is written before the chunk, so a reader that sees
        a line finds its time."""
        lost = False
        now = time.time()
        newlines = chunk.count(b"\n")
        for name in (stream, "combined"):
            f = self.files.get(name)
            if f is None:
                continue
            done, at_start = self.lines.get(name, (0, True))
            first = done if at_start else done + 1
            times = self.times.get(name)
            if times is not None and (at_start or newlines):
                try:
                    times.write(f"{first} {now:.6f}\n".encode())
                except OSError:
                    self.times.pop(name, None)  # times lost, never the log
            self.lines[name] = (done + newlines, chunk.endswith(b"\n"))
            try:
                f.write(chunk)
            except OSError as e:
                self.log_error = f"logs incomplete: {e.strerror or e}"
                self.files.pop(name, None)
                lost = True
        return lost

    def start(self, attempt: int = 1) -> None:
        """Start the replica's process as attempt ``attempt`` (every rank of one attempt
        reads the same number in ``$TORCHX_NB_LOCAL_ATTEMPT``)."""
        spec = self.spec
        env = dict(os.environ)
        env.update(spec["env"])
        env[ATTEMPT_VAR] = str(attempt)
        env.pop(RECLAIMED_VAR, None)  # ours alone (not one of the process that submitted it)
        if self.preempted:  # a replica that had ended before the preemption is not named
            job = next((env[v] for v in JOB_ID_VARS if env.get(v)), "")
            env[RECLAIMED_VAR] = ",".join(f"{job}/{n}" for n in self.preempted)
        for name in ("stdout", "stderr", "combined"):
            os.makedirs(os.path.dirname(spec[name]), mode=0o700, exist_ok=True)
            fd = os.open(spec[name], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self.files[name] = os.fdopen(fd, "ab", buffering=0)
            with contextlib.suppress(OSError):
                tfd = os.open(f"{spec[name]}.times", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self.times[name] = os.fdopen(tfd, "ab", buffering=0)
        self.started = time.time()
        parent = os.getpid()

        def die_with_supervisor() -> None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(137)

        try:
            self.proc = subprocess.Popen(
                spec["args"],
                env=env,
                cwd=spec["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=die_with_supervisor,
            )
            self.start_ticks = start_ticks(self.proc.pid)
        except OSError as e:
            self.error = f"could not start {spec['args'][0]!r}: {e.strerror or e}"
            msg = f"torchx_nb: {self.error}\n".encode()
            self.files["stderr"].write(msg)
            self.files["combined"].write(msg)
            self.exitcode = 127
            self.ended = time.time()

    def reset(self) -> None:
        """Ready to start again (a preempted attempt): the log files are closed (reopened for
        appending); the line counts of the ``.times`` files carry on."""
        for f in [*self.files.values(), *self.times.values()]:
            f.close()
        self.files, self.times = {}, {}
        self.proc = self.start_ticks = self.exitcode = None
        self.started = self.ended = None
        self.error = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.proc.pid if self.proc else None,
            "start_ticks": self.start_ticks,
            "exitcode": self.exitcode,
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
            "log_error": self.log_error,
            "stdout": self.spec["stdout"],
            "stderr": self.spec["stderr"],
            "combined": self.spec["combined"],
        }


class Supervisor:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        with open(os.path.join(state_dir, "request.json")) as f:
            self.request = json.load(f)
        self.replicas = [
            Replica(role, i, spec)
            for role, specs in self.request["role_params"].items()
            for i, spec in enumerate(specs)
        ]
        self.cancel_requested: float | None = None
        # who asked: what torchx_nb's canceller wrote into the marker; else the signal that
        # came from elsewhere (a kill of the supervisor, a Ctrl-C in its terminal)
        self.cancelled_by: str | None = None
        self.stop_signal: int | None = None
        self.killed = False
        self.started = time.time()
        self.start_ticks = start_ticks(os.getpid())
        self.grace_seconds = float(self.request.get("grace_seconds", GRACE_SECONDS))
        self._reaped_at = 0.0
        # a preemption in progress: when it was asked for, its grace, who asked
        self.preempt_requested: float | None = None
        self.preempt_grace = self.grace_seconds
        self.preempted_by = ""
        self.attempt = 1
        self.attempt_started = self.started
        self.attempts: list[dict[str, Any]] = []  # the attempts that were preempted

    def write_state(self, final_state: str | None = None) -> None:
        """Record the state; on a full disk keep running and try again at the next change (the
        final state is retried for a while)."""
        for attempt in range(50 if final_state else 1):
            try:
                self._write_state(final_state)
                return
            except OSError:
                if final_state:
                    time.sleep(min(0.1 * (attempt + 1), 2.0))

    def _write_state(self, final_state: str | None) -> None:
        roles: dict[str, list[dict[str, Any]]] = {}
        for r in self.replicas:
            roles.setdefault(r.role, []).append(r.to_json())
        write_json(
            os.path.join(self.state_dir, "state.json"),
            {
                "app_id": self.request["app_id"],
                "supervisor_pid": os.getpid(),
                "supervisor_start_ticks": self.start_ticks,
                "started": self.started,
                "ended": time.time() if final_state else None,
                "cancelled": self.cancel_requested is not None,
                "cancelled_by": self.cancelled_by,
                "stop_signal": self.stop_signal,
                "final_state": final_state,
                "roles": roles,
                "attempt": self.attempt,
                "attempt_started": self.attempt_started,
                "attempts": self.attempts,
                "preempting": self.preempt_requested,
            },
        )

    def cancel_marked(self) -> bool:
        """A ``cancel`` file is left by a canceller that came before the signal handler was
        installed (signalling then would have killed this process outright)."""
        return os.path.exists(os.path.join(self.state_dir, "cancel"))

    def marker_says(self) -> str:
        """Who cancelled, as the canceller wrote it into the marker ('' for an empty one)."""
        try:
            with open(os.path.join(self.state_dir, "cancel")) as f:
                said = json.load(f).get("by")
        except (OSError, ValueError, AttributeError):
            return ""
        return str(said)[:200] if said else ""

    def take_preempt_marker(self) -> dict[str, Any] | None:
        """The ``preempt`` marker's content, removing it (one marker is one preemption);
        None when there is none."""
        path = os.path.join(self.state_dir, "preempt")
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            return None
        with contextlib.suppress(OSError):
            os.remove(path)
        try:
            said = json.loads(text)
        except ValueError:
            said = {}
        return said if isinstance(said, dict) else {}

    def start_preempt(self, said: dict[str, Any]) -> None:
        """Stop the replicas as a preemption does: SIGTERM now, SIGKILL after the grace."""
        self.preempt_requested = time.time()
        grace = said.get("grace")
        if isinstance(grace, (int, float)) and not isinstance(grace, bool) and grace >= 0:
            self.preempt_grace = min(float(grace), 3600.0)
        else:
            self.preempt_grace = self.grace_seconds
        self.preempted_by = str(said.get("by") or "torchx_nb")[:200]
        for r in self.replicas:
            if r.exitcode is None:
                r.preempted.append(self.attempt)
        self.write_state()
        signal_all(self.processes(), signal.SIGTERM)

    def stop_deadline(self) -> float | None:
        """When what is left of the job gets SIGKILL: a cancel's or a preemption's grace."""
        if self.cancel_requested is not None:
            return self.cancel_requested + self.grace_seconds
        if self.preempt_requested is not None:
            return self.preempt_requested + self.preempt_grace
        return None

    def end_attempt(self) -> None:
        """The preempted attempt is recorded; the replicas are made ready to run again."""
        self.attempts.append(
            {
                "n": self.attempt,
                "started": self.attempt_started,
                "ended": time.time(),
                "why": "preempted",
                "preempted_at": self.preempt_requested,
                "grace": self.preempt_grace,
                "by": self.preempted_by,
                "exitcodes": {
                    role: [r.exitcode for r in self.replicas if r.role == role]
                    for role in self.request["role_params"]
                },
            }
        )
        for r in self.replicas:
            r.reset()
        self.preempt_requested = None
        self.killed = False
        self.attempt += 1
        self.attempt_started = time.time()

    def on_signal(self, signum: int, frame: object) -> None:
        if self.cancel_requested is None:
            self.cancel_requested = time.time()
            if self.cancel_marked():  # torchx_nb's cancel: marker first, then the signal
                self.cancelled_by = self.marker_says() or "torchx_nb"
            else:
                self.stop_signal = signum
            signal_all(self.processes(), signal.SIGTERM)

    def processes(self) -> list[int]:
        """Every live process of this job: the replicas' sessions and our descendants; none
        when we have no child: every process a replica left is our descendant (we are its
        subreaper), so the scan of every process is skipped at the end of most jobs."""
        if child_pids() == []:
            return []
        sessions = [
            (r.proc.pid, r.start_ticks)
            for r in self.replicas
            if r.proc is not None and r.start_ticks is not None
        ]
        return job_processes(sessions, root=os.getpid())

    def wait_any(self, timeout: float) -> None:
        """Block until a live replica exits, for at most ``timeout`` seconds."""
        live = [r.proc for r in self.replicas if r.proc is not None and r.exitcode is None]
        if not live:
            time.sleep(timeout)
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            live[0].wait(timeout=timeout)

    def reap_orphans(self, every: float = 0.5) -> None:
        """Collect exit statuses of re-parented descendants (we are their subreaper), at most
        once per ``every`` seconds."""
        if time.monotonic() - self._reaped_at < every:
            return
        self._reaped_at = time.monotonic()
        ours = {r.proc.pid for r in self.replicas if r.proc is not None}
        for pid in list(self._children()):
            if pid in ours:
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)

    @staticmethod
    def _children() -> list[int]:
        """Our children that are zombies."""
        kids = child_pids()
        if kids is None:
            me = os.getpid()
            return [pid for pid, st in all_stats().items() if st[1] == me and st[0] == "Z"]
        return [pid for pid in kids if (st := proc_stat(pid)) is not None and st[0] == "Z"]

    def run(self) -> None:
        os.umask(0o077)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        signal.signal(signal.SIGTERM, self.on_signal)
        # started with SIGINT blocked: one pending now was aimed at the process that started us
        # (a kernel interrupt reaching its group while we were spawned); ignoring it drops it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if self.cancel_marked():
            self.cancel_requested = time.time()
            self.cancelled_by = self.marker_says() or "torchx_nb"
            self.write_state("CANCELLED")
            return
        while True:
            self.run_attempt()
            self.end_leftovers()
            if self.preempt_requested is None or self.cancel_requested is not None:
                break
            self.end_attempt()
        for r in self.replicas:
            for f in [*r.files.values(), *r.times.values()]:
                f.close()
        if self.cancel_requested is not None:
            final = "CANCELLED"
        elif all(r.exitcode == 0 for r in self.replicas):
            final = "SUCCEEDED"
        else:
            final = "FAILED"
        self.preempt_requested = None
        self.write_state(final)
        self.run_end_hook()

    def run_attempt(self) -> None:
        """Start the replicas and copy their output until they have all exited (and, unless
        the job is being stopped, their pipes are closed)."""
        sel = selectors.DefaultSelector()
        for r in self.replicas:
            r.start(self.attempt)
            if r.proc is not None:
                assert r.proc.stdout is not None and r.proc.stderr is not None
                sel.register(r.proc.stdout, selectors.EVENT_READ, (r, "stdout"))
                sel.register(r.proc.stderr, selectors.EVENT_READ, (r, "stderr"))
        self.write_state()
        if self.cancel_requested is not None:  # a cancel that came between two attempts
            signal_all(self.processes(), signal.SIGTERM)
        open_pipes = len(sel.get_map())
        done_since: float | None = None
        while True:
            if open_pipes:
                for key, _ in sel.select(timeout=0.2):
                    replica, stream = key.data
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_pipes -= 1
                        continue
                    if replica.write(stream, chunk):
                        self.write_state()
            else:
                self.wait_any(0.05)
            if self.cancel_requested is None and self.cancel_marked():
                self.on_signal(signal.SIGTERM, None)
            changed = False
            # the exits first: a preemption asked as the program ends finds it ended (it is
            # not run again)
            for r in self.replicas:
                if r.proc is not None and r.exitcode is None:
                    code = r.proc.poll()
                    if code is not None:
                        r.exitcode, r.ended, changed = code, time.time(), True
            running = any(r.exitcode is None for r in self.replicas)
            if running and self.cancel_requested is None and self.preempt_requested is None:
                said = self.take_preempt_marker()
                if said is not None:
                    # a replica whose pipes closed is exiting (its exit lands just after):
                    # the program that ended meanwhile is not preempted, nor run again
                    piped = {key.data[0] for key in sel.get_map().values()}
                    for r in self.replicas:
                        if r.proc is not None and r.exitcode is None and r not in piped:
                            with contextlib.suppress(subprocess.TimeoutExpired):
                                r.exitcode, r.ended = r.proc.wait(timeout=0.5), time.time()
                                changed = True
                    if any(r.exitcode is None for r in self.replicas):
                        self.start_preempt(said)
            self.reap_orphans()
            deadline = self.stop_deadline()
            if deadline is not None and not self.killed and time.time() > deadline:
                signal_all(self.processes(), signal.SIGKILL)
                self.killed = True
            if all(r.exitcode is not None for r in self.replicas):
                done_since = done_since or time.time()
                if not open_pipes or self.cancel_requested is not None:
                    break
                if time.time() - done_since > 2.0:
                    break  # a leftover background process holds the pipes open
            if changed:
                self.write_state()
        sel.close()

    def run_end_hook(self) -> None:
        """The command the scheduler left beside the request (``on_end.json``): the job-end
        notice sent even when nothing else watches the job. Its failure is the hook's own."""
        try:
            with open(os.path.join(self.state_dir, "on_end.json")) as f:
                hook = json.load(f)
            subprocess.run(
                hook["argv"],
                cwd=hook.get("cwd") or None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
                check=False,
            )
        except (OSError, ValueError, KeyError, subprocess.SubprocessError):
            pass

    def end_leftovers(self) -> None:
        """The replicas have exited: SIGTERM what they left behind, SIGKILL it after a short
        grace (or at the cancel's deadline), and wait until nothing of the job is left."""
        leftovers = self.processes()
        if not leftovers:
            return
        deadline = self.stop_deadline()
        if deadline is None:
            signal_all(leftovers, signal.SIGTERM)
            deadline = time.time() + LEFTOVER_GRACE_SECONDS
        while leftovers:
            if time.time() >= deadline and not self.killed:
                signal_all(leftovers, signal.SIGKILL)
                self.killed = True
            time.sleep(0.02)
            self.reap_orphans(every=0)
            leftovers = self.processes()
            if self.killed and leftovers:
                signal_all(leftovers, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: local_supervisor STATE_DIR", file=sys.stderr)
        return 2
    Supervisor(argv[1]).run()
    return 0
