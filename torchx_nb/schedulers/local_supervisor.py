"""The detached process that runs one local_cwd app: ``python -I -S local_supervisor.py STATE_DIR``.

It starts every replica in its own process group, copies each replica's stdout and stderr into
``stdout.log``, ``stderr.log`` and ``combined.log``, and records pids and exit codes in
``STATE_DIR/state.json`` (written atomically) so that any process can describe the app later.
SIGTERM cancels: replicas get SIGTERM, then SIGKILL after a grace period.

Standard library only, and no import of torchx_nb: it starts in a few milliseconds."""

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

GRACE_SECONDS = 10.0


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class Replica:
    def __init__(self, role: str, idx: int, spec: dict[str, Any]) -> None:
        self.role = role
        self.idx = idx
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.exitcode: int | None = None
        self.started: float | None = None
        self.ended: float | None = None
        self.error: str | None = None
        self.files: dict[str, IO[bytes]] = {}

    def start(self) -> None:
        spec = self.spec
        env = dict(os.environ)
        env.update(spec["env"])
        for name in ("stdout", "stderr", "combined"):
            os.makedirs(os.path.dirname(spec[name]), exist_ok=True)
            self.files[name] = open(spec[name], "ab", buffering=0)  # noqa: SIM115
        self.started = time.time()
        try:
            self.proc = subprocess.Popen(
                spec["args"],
                env=env,
                cwd=spec["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            self.error = f"could not start {spec['args'][0]!r}: {e.strerror or e}"
            msg = f"torchx_nb: {self.error}\n".encode()
            self.files["stderr"].write(msg)
            self.files["combined"].write(msg)
            self.exitcode = 127
            self.ended = time.time()

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.proc.pid if self.proc else None,
            "exitcode": self.exitcode,
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
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
        self.killed = False
        self.started = time.time()
        self.grace_seconds = float(self.request.get("grace_seconds", GRACE_SECONDS))

    def write_state(self, final_state: str | None = None) -> None:
        roles: dict[str, list[dict[str, Any]]] = {}
        for r in self.replicas:
            roles.setdefault(r.role, []).append(r.to_json())
        write_json(
            os.path.join(self.state_dir, "state.json"),
            {
                "app_id": self.request["app_id"],
                "supervisor_pid": os.getpid(),
                "started": self.started,
                "ended": time.time() if final_state else None,
                "cancelled": self.cancel_requested is not None,
                "final_state": final_state,
                "roles": roles,
            },
        )

    def cancel_marked(self) -> bool:
        """A ``cancel`` file is left by a canceller that came before the signal handler was
        installed (signalling then would have killed this process outright)."""
        return os.path.exists(os.path.join(self.state_dir, "cancel"))

    def on_signal(self, signum: int, frame: object) -> None:
        if self.cancel_requested is None:
            self.cancel_requested = time.time()
            self.signal_replicas(signal.SIGTERM)

    def wait_any(self, timeout: float) -> None:
        """Block until a live replica exits, for at most ``timeout`` seconds."""
        live = [r.proc for r in self.replicas if r.proc is not None and r.exitcode is None]
        if not live:
            time.sleep(timeout)
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            live[0].wait(timeout=timeout)

    def signal_replicas(self, sig: int) -> None:
        for r in self.replicas:
            if r.proc is not None and r.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(r.proc.pid, sig)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if self.cancel_marked():
            self.cancel_requested = time.time()
            self.write_state("CANCELLED")
            return
        sel = selectors.DefaultSelector()
        for r in self.replicas:
            r.start()
            if r.proc is not None:
                assert r.proc.stdout is not None and r.proc.stderr is not None
                sel.register(r.proc.stdout, selectors.EVENT_READ, (r, "stdout"))
                sel.register(r.proc.stderr, selectors.EVENT_READ, (r, "stderr"))
        self.write_state()
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
                    replica.files[stream].write(chunk)
                    replica.files["combined"].write(chunk)
            else:
                self.wait_any(0.05)
            if self.cancel_requested is None and self.cancel_marked():
                self.on_signal(signal.SIGTERM, None)
            changed = False
            for r in self.replicas:
                if r.proc is not None and r.exitcode is None:
                    code = r.proc.poll()
                    if code is not None:
                        r.exitcode, r.ended, changed = code, time.time(), True
            if (
                self.cancel_requested is not None
                and not self.killed
                and time.time() - self.cancel_requested > self.grace_seconds
            ):
                self.signal_replicas(signal.SIGKILL)
                self.killed = True
            done = all(r.exitcode is not None for r in self.replicas)
            if done:
                done_since = done_since or time.time()
                if not open_pipes or self.cancel_requested is not None:
                    break
                if time.time() - done_since > 2.0:
                    break  # a detached grandchild holds the pipes open; the replicas are gone
            if changed:
                self.write_state()
        for r in self.replicas:
            for f in r.files.values():
                f.close()
        if self.cancel_requested is not None:
            final = "CANCELLED"
        elif all(r.exitcode == 0 for r in self.replicas):
            final = "SUCCEEDED"
        else:
            final = "FAILED"
        self.write_state(final)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: local_supervisor.py STATE_DIR", file=sys.stderr)
        return 2
    Supervisor(argv[1]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
