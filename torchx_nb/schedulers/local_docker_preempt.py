"""local_docker's ``preempt``, carried out by a worker of its own, so that what happens to the
caller (Ctrl-C, SIGTERM or SIGKILL of ``torchx-nb preempt``, an interrupted kernel) never turns
a preemption into a stop.

``start`` leaves a mark beside the app's cancel mark (``preempting_<app>``: who asked, when,
the grace, the attempt preempted, then the worker's pid), 0600 and made exclusively — a
second preempt meanwhile is one line. The mark is locked (``flock``) before it appears and the
lock passes to the worker: a child in its own session, SIGINT ignored, using the standard
library and the docker SDK. The worker stops the attempt's running containers (``docker
stop``: SIGTERM, SIGKILL after the grace), runs each replica again
(``local_docker_attempts.rerun``) unless the app was cancelled meanwhile, and removes the mark.
While the mark is there, describe says the app is being preempted.

A mark that nobody holds locked is a worker that died midway (the lock dies with it: no pid is
trusted): describe, list and preempt call ``take_over``, which starts a new worker on the mark
to do what is left (a replica is never renamed or run again twice); after ``MAX_RESTARTS``
such restarts, or when the worker fails, the app is FAILED with one line, once the
preempted attempt's replicas still running are killed (a FAILED job runs nothing)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.local_docker_attempts import (
    LABEL_APP_ID,
    attempt_of,
    newest,
    rerun,
    stop_running,
)
from torchx_nb.schedulers.outputs import cancel_mark
from torchx_nb.specs.api import AppState
from torchx_nb.specs.exceptions import TorchxNbError
from torchx_nb.specs.preemption import preempting_already, stopping_line

MAX_RESTARTS = 3  # workers started on one mark after the first died
_PREFIX = "preempting_"


def preempt_mark(app_id: str) -> Path:
    """The file saying ``app_id`` is being preempted, beside its cancel mark."""
    return cancel_mark("local_docker", _PREFIX + app_id)


def _cancelled(app_id: str) -> bool:
    return cancel_mark("local_docker", app_id).exists()


def _parse(text: str) -> dict[str, Any]:
    try:
        said = json.loads(text or "{}")
    except ValueError:
        return {}
    return said if isinstance(said, dict) else {}


def _read(fd: int) -> dict[str, Any]:
    return _parse(os.pread(fd, 1 << 16, 0).decode(errors="replace"))


def _write(fd: int, said: dict[str, Any]) -> None:
    """One write over the mark, padded to its old size (JSON ends in blanks): a reader never
    sees it half written."""
    data = json.dumps(said).encode()
    os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)


def read_mark(app_id: str) -> dict[str, Any] | None:
    """What the mark of ``app_id`` says; None when it is not being preempted."""
    try:
        return _parse(preempt_mark(app_id).read_text())
    except FileNotFoundError:
        return None
    except OSError:
        return {}


def marks() -> dict[str, dict[str, Any]]:
    """Every app being preempted (by the name its marks use), and what its mark says."""
    folder = preempt_mark("x").parent
    if not folder.is_dir():
        return {}
    out = {}
    for path in folder.glob(_PREFIX + "*"):
        if path.suffix != ".log":
            said = read_mark(path.name[len(_PREFIX) :])
            if said is not None:
                out[path.name[len(_PREFIX) :]] = said
    return out


def start(app_id: str, attempt: int, grace: float, by: str) -> None:
    """Leave the mark (refused in one line when one is there) and start its worker."""
    from torchx_nb.paths import private_dir

    mark = preempt_mark(app_id)
    private_dir(mark.parent)
    tmp = mark.with_name(f".{mark.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # locked before it is seen, so it is never taken for a dead worker's
        fcntl.flock(fd, fcntl.LOCK_EX)
        _write(fd, {"by": by, "at": time.time(), "grace": grace, "attempt": attempt})
        try:
            os.link(tmp, mark)  # as O_EXCL: the one preemption under way
        except FileExistsError:
            raise preempting_already(app_id) from None
        finally:
            os.unlink(tmp)
        try:
            _spawn(app_id, fd)
        except BaseException:
            mark.unlink(missing_ok=True)
            raise
    finally:
        os.close(fd)


def _spawn(app_id: str, fd: int) -> None:
    """The worker, holding the mark's lock through ``fd``; its output goes to ``<mark>.log``."""
    import torchx_nb

    mark = preempt_mark(app_id)
    # this process's torchx_nb, wherever it was imported from
    here = str(Path(torchx_nb.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    log = os.open(f"{mark}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", __name__, app_id, str(fd)],
            pass_fds=(fd,),
            start_new_session=True,  # no Ctrl-C, hangup or process-group kill of the caller's
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=mark.parent,
            env=env,
        )
    finally:
        os.close(log)
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped if this process lives on


def take_over(app_id: str) -> bool:
    """Start a new worker on a mark whose worker died midway (nobody holds its lock); a mark
    that outlived ``MAX_RESTARTS`` workers is marked failed instead. Whether one started."""
    mark = preempt_mark(app_id)
    try:
        fd = os.open(mark, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its worker is at work
        try:
            if os.stat(mark).st_ino != os.fstat(fd).st_ino:
                return False  # done and removed meanwhile (or a new one)
        except FileNotFoundError:
            return False
        said = _read(fd)
        if said.get("failed"):
            return False
        restarts = int(said.get("restarts") or 0)
        if restarts >= MAX_RESTARTS:
            said["failed"] = f"its preemption's worker stopped {restarts + 1} times: see {mark}.log"
            _write(fd, said)
            _end_stop(app_id, said)
            return False
        said["restarts"] = restarts + 1
        _write(fd, said)
        _spawn(app_id, fd)
        return True
    finally:
        os.close(fd)


def _end_stop(app_id: str, said: dict[str, Any], client: Any = None) -> None:
    """A preemption given up ends the stop it began: the preempted attempt's replicas still
    running are killed (their grace is long over), so the job read FAILED runs nothing — a
    FAILED job is never cancelled again. Best effort: a daemon that cannot be reached here
    leaves them, and describe then still shows them running (``during``)."""
    n = int(said.get("attempt") or 1)
    with contextlib.suppress(Exception):
        if client is None:
            from torchx_nb.workspace.daemon import docker_client

            client = docker_client()
        for c in newest(_containers(client, app_id)):
            if attempt_of(c) == n and c.status in ("running", "restarting"):
                c.kill()


def wait(app_id: str) -> None:
    """Until the preemption of ``app_id`` is done (the next attempt runs, or the app was
    cancelled meanwhile), starting a new worker if one dies; a failure as its one line."""
    while True:
        said = read_mark(app_id)
        if said is None:
            return
        if said.get("failed"):
            raise TorchxNbError(_failed_line(app_id, said))
        take_over(app_id)
        time.sleep(0.1)


def _failed_line(app_id: str, said: dict[str, Any]) -> str:
    n = int(said.get("attempt") or 1) + 1
    return f"{app_id} was preempted but attempt {n} could not be started: {said['failed']}"


def during(app_id: str, said: dict[str, Any] | None, resp: DescribeAppResponse) -> None:
    """Describe's answer while ``app_id`` is being preempted (``said``: its mark, read before
    the containers were): RUNNING, its replicas stopping to run again — unless it was
    cancelled meanwhile (the containers tell) or the preemption failed (FAILED, one line). A
    dead worker's mark is taken over."""
    if said is None or _cancelled(app_id):
        return
    if said.get("failed"):
        resp.msg = _failed_line(app_id, said)
        # FAILED once nothing runs: a replica left running stays one to cancel
        if not any(r.state == AppState.RUNNING for ro in resp.roles_statuses for r in ro.replicas):
            resp.state = AppState.FAILED
        return
    take_over(app_id)
    resp.state, resp.ended = AppState.RUNNING, None
    resp.msg = stopping_line(
        float(said.get("at") or time.time()), int(said.get("attempt") or 1) + 1
    )
    for role in resp.roles_statuses:
        for rep in role.replicas:
            rep.state, rep.exit_code, rep.ending = AppState.RUNNING, None, ""


def state_during(app_id: str, said: dict[str, Any] | None, state: AppState) -> AppState:
    """``list``'s state of an app while it is being preempted (as ``during``)."""
    if said is None or _cancelled(app_id):
        return state
    if said.get("failed"):
        return AppState.FAILED
    take_over(app_id)
    return AppState.RUNNING


def carry_out(client: Any, app_id: str, said: dict[str, Any], save: Any) -> None:
    """The worker's work, from wherever a dead worker left it: the attempt's running
    containers stopped (those being stopped are kept in the mark: ``save()``; the grace counts
    from the first stop), then each run again unless the app was cancelled meanwhile."""
    n = int(said.get("attempt") or 1)
    grace = float(said.get("grace") or 0)
    now = newest(_containers(client, app_id))
    ids = said.get("stopping")
    if not isinstance(ids, list):
        ids = [c.id for c in now if attempt_of(c) == n and c.status in ("running", "restarting")]
        said["stopping"], said["stopping_at"] = ids, time.time()
        save()
    stopping = [c for c in now if c.id in ids]
    stop_running(stopping, max(0.0, float(said["stopping_at"]) + grace - time.time()))
    for c in stopping:  # a stop that failed: the kill
        c.reload()
        if c.status in ("running", "restarting"):
            c.kill()
    if _cancelled(app_id):
        return  # cancelled meanwhile: nothing runs again
    started = []
    for c in newest(_containers(client, app_id)):
        if c.id in ids:  # not run again yet
            started.append(rerun(client, c))
        elif attempt_of(c) == n + 1 and c.status == "created":  # made, not started
            c.start()
            started.append(c.id)
    if _cancelled(app_id):  # a cancel that came as they started: they stop as well
        for cid in started:
            client.containers.get(cid).stop(timeout=10)


def _containers(client: Any, app_id: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{LABEL_APP_ID}={app_id}"}))


def main(argv: list[str]) -> int:
    """The worker: ``python -m torchx_nb.schedulers.local_docker_preempt APP_ID FD``, ``FD``
    the mark, locked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    app_id, fd = argv[0], int(argv[1])
    mark = preempt_mark(app_id)
    said = _read(fd)
    said["pid"] = os.getpid()
    _write(fd, said)
    try:
        from torchx_nb.workspace.daemon import docker_client

        carry_out(docker_client(), app_id, said, lambda: _write(fd, said))
    except Exception as e:
        traceback.print_exc()
        line = (str(getattr(e, "explanation", "") or e).strip().splitlines() or [""])[0]
        said["failed"] = f"{type(e).__name__}: {line[:300]}"
        _write(fd, said)
        _end_stop(app_id, said)
        return 1
    mark.unlink(missing_ok=True)  # still holding the lock: no one takes it for a dead worker's
    with contextlib.suppress(OSError):
        os.unlink(f"{mark}.log")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
