"""local_cwd under faults: killed supervisors and replicas, replicas that ignore SIGTERM or
escape their process group, reused pids, leftover background processes, a full log disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI, wait_for
from tests.schedulers.test_local_cwd import app, run, wait_terminal
from torchx_nb.schedulers.local_cwd import LocalCwdScheduler, create_scheduler
from torchx_nb.schedulers.local_supervisor import start_ticks
from torchx_nb.specs import AppState


def alive(pid: int) -> bool:
    return start_ticks(pid) is not None


def read_pids(*files: Path) -> list[int]:
    wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files))
    return [int(f.read_text()) for f in files]


@pytest.fixture
def sched() -> Iterator[LocalCwdScheduler]:
    s = create_scheduler("torchx", grace_seconds=1.0)
    yield s
    root = s.state_root / s.session_name
    for app_dir in root.iterdir() if root.is_dir() else []:
        s.cancel(app_dir.name)


def test_killed_supervisor_takes_its_processes_with_it(
    sched: LocalCwdScheduler, isolated: Path
) -> None:
    child, leader = isolated / "child.pid", isolated / "leader.pid"
    app_id = run(sched, app("-c", f"echo $$$$ > {leader}; sleep 300 & echo $! > {child}; wait"))
    leader_pid, child_pid = read_pids(leader, child)
    state = json.loads((sched._app_dir(app_id) / "state.json").read_text())
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not alive(leader_pid), 5)  # PR_SET_PDEATHSIG
    desc = sched.describe(app_id)
    assert desc is not None and desc.state == AppState.FAILED
    assert "supervisor was killed" in desc.msg
    wait_for(lambda: not alive(child_pid), 5)


def test_cancel_after_the_supervisor_died_still_stops_the_job(
    sched: LocalCwdScheduler, isolated: Path
) -> None:
    child = isolated / "child.pid"
    # the grandchild leaves the process group; it stays in the replica's session
    app_id = run(sched, app("-c", f"sh -c 'set -m; sleep 300 & echo $! > {child}; wait' ; wait"))
    (child_pid,) = read_pids(child)
    state = json.loads((sched._app_dir(app_id) / "state.json").read_text())
    leader = state["roles"]["r"][0]["pid"]
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    sched.cancel(app_id)
    assert wait_terminal(sched, app_id) == AppState.CANCELLED
    wait_for(lambda: not alive(child_pid) and not alive(leader), 5)


def test_cancel_reports_cancelled_only_when_every_process_is_gone(
    sched: LocalCwdScheduler, isolated: Path
) -> None:
    pids = isolated / "pids"
    script = (
        "trap '' TERM; "
        f"setsid sh -c 'trap \"\" TERM; echo $$$$ >> {pids}; while :; do sleep 0.1; done' & "
        f"echo $$$$ >> {pids}; echo ready; while :; do sleep 0.1; done"
    )
    app_id = run(sched, app("-c", script))
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2)
    procs = [int(p) for p in pids.read_text().split()]
    t0 = time.monotonic()
    sched.cancel(app_id)
    assert wait_terminal(sched, app_id) == AppState.CANCELLED
    assert time.monotonic() - t0 < 1.0 + 5.0
    assert not any(alive(p) for p in procs), "a process outlived CANCELLED"


def test_background_child_of_a_finished_job_is_stopped(
    sched: LocalCwdScheduler, isolated: Path
) -> None:
    child = isolated / "child.pid"
    app_id = run(sched, app("-c", f"nohup sleep 300 >/dev/null 2>&1 & echo $! > {child}; exit 0"))
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    (child_pid,) = read_pids(child)
    assert not alive(child_pid)


def test_a_reused_supervisor_pid_is_not_mistaken_for_the_job(
    sched: LocalCwdScheduler, isolated: Path
) -> None:
    app_id = run(sched, app("-c", "sleep 300"))
    wait_for(lambda: sched.describe(app_id).state == AppState.RUNNING)  # type: ignore[union-attr]
    state_file = sched._app_dir(app_id) / "state.json"
    state = json.loads(state_file.read_text())
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: sched.describe(app_id).state == AppState.FAILED)  # type: ignore[union-attr]
    # an unrelated process now has the supervisor's pid (same pid, another start time)
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        state["supervisor_pid"] = stranger.pid
        state_file.write_text(json.dumps(state))
        (sched._app_dir(app_id) / "supervisor.pid").write_text(
            f"{stranger.pid} {state['supervisor_start_ticks']}"
        )
        desc = sched.describe(app_id)
        assert desc is not None and desc.state == AppState.FAILED
        sched.cancel(app_id)
        time.sleep(0.3)
        assert stranger.poll() is None, "cancel signalled an unrelated process"
    finally:
        stranger.kill()
        stranger.wait()


def test_state_on_disk_is_private(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app("-c", "echo hi"), log_dir="rel-logs")
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    app_dir = sched._app_dir(app_id)
    for folder in (sched.state_root, app_dir.parent, app_dir):
        assert folder.stat().st_mode & 0o077 == 0, folder
    for f in app_dir.iterdir():
        assert f.stat().st_mode & 0o077 == 0, f
    request = json.loads((app_dir / "request.json").read_text())
    assert Path(request["log_dir"]).is_absolute()
    logs = Path(request["log_dir"])
    assert all(f.stat().st_mode & 0o077 == 0 for f in logs.rglob("*.log"))


def test_relative_log_dir_is_readable_from_another_folder(
    sched: LocalCwdScheduler, isolated: Path, tmp_path: Path
) -> None:
    app_id = run(sched, app("-c", "echo from-the-job"), log_dir="logs")
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chdir(elsewhere)
    assert list(sched.log_iter(app_id, "r")) == ["from-the-job\n"]


def test_hostile_handles_stay_inside_the_state_folder(sched: LocalCwdScheduler) -> None:
    for app_id in ("../../etc", "..", "a/../../b", "/etc/passwd", "x\0y"):
        with pytest.raises(ValueError, match="not a local_cwd app id"):
            sched.describe(app_id)
        with pytest.raises(ValueError):
            sched.cancel(app_id)


@pytest.fixture
def full_disk(tmp_path: Path) -> object:
    """A 256 KiB tmpfs: a log folder on a disk that fills up."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
    )
    if proc.returncode != 0:
        reason = f"cannot mount a tmpfs: {proc.stderr.decode().strip()}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_log_disk_loses_output_not_the_job(
    sched: LocalCwdScheduler, full_disk: Path
) -> None:
    script = "head -c 2000000 /dev/zero | tr '\\0' x; echo; echo done"
    app_id = run(sched, app("-c", script), log_dir=str(full_disk))
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    desc = sched.describe(app_id)
    assert desc is not None and "logs incomplete: No space left on device" in desc.msg


def test_a_killed_replica_fails_the_job_and_says_how(
    sched: LocalCwdScheduler, isolated: Path
) -> None:
    leader = isolated / "leader.pid"
    app_id = run(sched, app("-c", f"echo $$$$ > {leader}; sleep 300"))
    (pid,) = read_pids(leader)
    os.kill(pid, signal.SIGKILL)
    assert wait_terminal(sched, app_id) == AppState.FAILED
    desc = sched.describe(app_id)
    assert desc is not None and "r/0 exited with code -9" in desc.msg
