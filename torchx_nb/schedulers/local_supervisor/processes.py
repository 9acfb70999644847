"""Processes by pid *and* start time, for the supervisor and for whoever describes or cancels
its job: ``/proc`` stats, a job's processes (its sessions and the supervisor's descendants),
signalling them, killing what a dead supervisor left, ``prctl``, and atomic private writes.
Standard library only."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path: str, data: dict[str, Any]) -> None:
    write_private(path, json.dumps(data))


def proc_stat(pid: int) -> tuple[str, int, int, int, int] | None:
    """(state, ppid, pgid, session id, start time in clock ticks since boot) of ``pid``, or
    None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot); None if it is gone or a zombie."""
    st = proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return None
    return st[4]


def is_same_process(pid: int | None, ticks: int | None) -> bool:
    """True while the process ``pid`` that started at ``ticks`` is alive (not a zombie). With
    ``ticks`` None, any live process with that pid counts."""
    if not pid:
        return False
    now = start_ticks(pid)
    if now is None:
        if not os.path.isdir("/proc/self"):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        return False
    return ticks is None or now == ticks


def all_stats() -> dict[int, tuple[str, int, int, int, int]]:
    out: dict[int, tuple[str, int, int, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def child_pids() -> list[int] | None:
    """This process's children (of every thread), read from ``/proc``; None where it cannot
    say. Cheap: the supervisor asks it where a scan of every process took milliseconds."""
    try:
        pids: list[int] = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(pid) for pid in f.read().split()]
    except (OSError, ValueError):
        return None
    return pids


def job_processes(sessions: list[tuple[int, int]], root: int | None = None) -> list[int]:
    """Live pids that belong to a job: members of the replicas' sessions ``(sid, leader start
    ticks)`` that started no earlier than the leader, and descendants of ``root`` (the
    supervisor). Zombies and ``root`` itself are left out."""
    stats = all_stats()
    found: set[int] = set()
    for sid, ticks in sessions:
        for pid, (state, _ppid, _pgid, psid, pstart) in stats.items():
            if psid == sid and pstart >= ticks and state not in ("Z", "X"):
                found.add(pid)
    if root is not None:
        children: dict[int, list[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st[1], []).append(pid)
        stack = list(children.get(root, []))
        while stack:
            pid = stack.pop()
            if stats[pid][0] not in ("Z", "X"):
                found.add(pid)
            stack.extend(children.get(pid, []))
    found.discard(os.getpid())
    if root is not None:
        found.discard(root)
    return sorted(found)


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_orphans(state: dict[str, Any]) -> int:
    """SIGKILL whatever is left of a job whose supervisor is gone (from its ``state.json``);
    returns how many processes were signalled."""
    sessions = [
        (rep["pid"], rep["start_ticks"])
        for reps in state.get("roles", {}).values()
        for rep in reps
        if rep.get("pid") and rep.get("start_ticks") is not None
    ]
    pids = job_processes(sessions)
    signal_all(pids, signal.SIGKILL)
    return len(pids)


_LIBC: Any = None


def prctl(option: int, arg: int) -> None:
    """Linux ``prctl``; a no-op elsewhere. Load libc before forking (``preexec_fn`` calls it)."""
    global _LIBC
    with contextlib.suppress(Exception):
        if _LIBC is None:
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.prctl(option, arg, 0, 0, 0)
