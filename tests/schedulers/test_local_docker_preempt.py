"""local_docker's ``preempt`` is carried out by a worker of its own, against a real dockerd: an
interrupted or killed ``torchx-nb preempt`` still runs the job's next attempt, a worker killed
midway is taken over, a second preempt meanwhile is one line and a cancel meanwhile wins."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import cli, shell_app, wait_for
from tests.infra.dockerd import DockerDaemon
from torchx_nb.runner import Runner, get_runner
from torchx_nb.schedulers.local_docker import LocalDockerScheduler, container_name
from torchx_nb.schedulers.local_docker_preempt import preempt_mark, read_mark
from torchx_nb.specs import AppState
from torchx_nb.specs.log_line import Stream

# the runs are counted in the output folder; the first ignores SIGTERM (so the grace lasts
# to its end, then SIGKILL), a later one ends at once
SCRIPT = (
    'n=$(( $(cat "$TORCHX_OUTPUT_DIR/runs" 2>/dev/null || echo 0) + 1 )); '
    'echo $n > "$TORCHX_OUTPUT_DIR/runs"; echo "run $n"; '
    "if [ $n -ge 2 ]; then echo resumed; exit 0; fi; "
    "trap '' TERM; while :; do sleep 0.1; done"
)
GRACE = "3"


@pytest.fixture
def runner(docker_env: DockerDaemon) -> Iterator[Runner]:
    with get_runner() as r:
        yield r


def _submit(runner: Runner, base_images: dict[str, str]) -> tuple[str, str]:
    """A running job (its first run under way): its handle and app id."""
    handle = runner.run(shell_app(SCRIPT, base_images["busybox"]), "local_docker", {})
    app_id = handle.rsplit("/", 1)[1]
    wait_for(lambda: _log(runner, app_id) == ["run 1\n"], timeout=60)
    return handle, app_id


def _sched(runner: Runner) -> LocalDockerScheduler:
    return runner.get_scheduler("local_docker")  # type: ignore[return-value]


def _log(runner: Runner, app_id: str) -> list[str]:
    return list(_sched(runner).log_iter(app_id, "r", 0, streams=Stream.STDOUT))


def _preempt_cli(handle: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "torchx_nb.cli", "preempt", handle, "--grace", GRACE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stopping(runner: Runner, app_id: str, proc: subprocess.Popen[str]) -> Any:
    """Wait for the preemption's replicas to be stopping: the worker is at work."""

    def seen() -> Any:
        assert proc.poll() is None, proc.communicate()
        said = read_mark(app_id)
        return said if said and said.get("pid") and "stopping" in said else None

    said = wait_for(seen, timeout=30)
    desc = _sched(runner).describe(app_id)
    assert desc is not None and desc.state == AppState.RUNNING
    assert desc.msg.startswith("preempted at ") and desc.msg.endswith(
        ": its replicas are stopping, then it runs again (attempt 2)"
    ), desc.msg
    return said


def _ends_resumed(runner: Runner, handle: str, app_id: str) -> None:
    """The job ran its next attempt under the same handle: SUCCEEDED, one preemption, each
    run once, one container per attempt."""
    end = runner.wait(handle, wait_interval=0.2, timeout=90)
    assert end is not None and end.state == AppState.SUCCEEDED, end
    assert _log(runner, app_id) == ["run 1\n", "run 2\n", "resumed\n"]
    code, out, _ = cli("status", handle)
    assert code == 0 and "Attempts: 2 (1 preemption, 0 failures)" in out.splitlines(), out
    name = container_name(app_id, "r", 0)
    names = sorted(c.name for c in _sched(runner)._containers(app_id))
    assert names == [name, f"{name}-attempt1"]
    assert read_mark(app_id) is None and not os.path.exists(f"{preempt_mark(app_id)}.log")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_or_killed_preempt_still_runs_the_next_attempt(
    runner: Runner, base_images: dict[str, str], sig: signal.Signals
) -> None:
    """``torchx-nb preempt`` interrupted (Ctrl-C) or killed during the grace: the preemption
    carries on — before, the containers stayed stopped and the job read CANCELLED."""
    handle, app_id = _submit(runner, base_images)
    proc = _preempt_cli(handle)
    said = _stopping(runner, app_id, proc)
    assert said["grace"] == float(GRACE) and said["attempt"] == 1 and said["by"]
    assert said["pid"] != proc.pid
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == (130 if sig == signal.SIGINT else -9), err
    _ends_resumed(runner, handle, app_id)


def test_a_worker_killed_midway_is_taken_over_by_the_next_describe(
    runner: Runner, base_images: dict[str, str]
) -> None:
    """The preemption's worker SIGKILLed during the grace (its ``torchx-nb preempt`` too):
    the next describe finds its mark unlocked and starts another, which does the rest."""
    handle, app_id = _submit(runner, base_images)
    proc = _preempt_cli(handle)
    said = _stopping(runner, app_id, proc)
    proc.kill()
    proc.wait(timeout=30)
    os.kill(said["pid"], signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{said['pid']}"), timeout=10)
    mark = read_mark(app_id)
    assert mark is not None and mark["pid"] == said["pid"]  # left as it was
    desc = _sched(runner).describe(app_id)  # the next describe takes it over
    assert desc is not None and desc.state == AppState.RUNNING, desc
    assert desc.msg.endswith("its replicas are stopping, then it runs again (attempt 2)")
    taken = read_mark(app_id)
    assert taken is not None and taken["restarts"] == 1 and taken["stopping"] == said["stopping"]
    _ends_resumed(runner, handle, app_id)


def test_a_worker_dead_after_the_rename_does_not_rename_or_run_twice(
    runner: Runner, base_images: dict[str, str], docker_env: DockerDaemon
) -> None:
    """A worker that died after stopping the replica and keeping it as ``-attempt1``, before
    making the next one (its mark left unlocked): describe's takeover runs the replica
    again once, under its own name."""
    import json

    from torchx_nb.paths import private_dir, write_private

    handle, app_id = _submit(runner, base_images)
    name = container_name(app_id, "r", 0)
    c = docker_env.client().containers.get(name)
    c.stop(timeout=0)
    c.rename(f"{name}-attempt1")
    mark = preempt_mark(app_id)
    private_dir(mark.parent)
    said = {"by": "me", "at": time.time(), "grace": 0, "attempt": 1, "pid": 1}
    write_private(mark, json.dumps({**said, "stopping": [c.id], "stopping_at": time.time()}))
    desc = _sched(runner).describe(app_id)
    assert desc is not None and desc.state == AppState.RUNNING, desc
    _ends_resumed(runner, handle, app_id)


def test_a_second_preempt_meanwhile_is_one_line(
    runner: Runner, base_images: dict[str, str]
) -> None:
    handle, app_id = _submit(runner, base_images)
    proc = _preempt_cli(handle)
    _stopping(runner, app_id, proc)
    code, _, err = cli("preempt", handle, "--grace", "1")
    assert code == 1 and err.splitlines() == [
        f"torchx-nb: error: {app_id} is being preempted already: preempt it again once it"
        " runs again"
    ], err
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    _ends_resumed(runner, handle, app_id)


def test_a_cancel_during_a_preemption_wins(runner: Runner, base_images: dict[str, str]) -> None:
    handle, app_id = _submit(runner, base_images)
    proc = _preempt_cli(handle)
    _stopping(runner, app_id, proc)
    code, _, err = cli("cancel", handle)
    assert code == 0, err
    proc.communicate(timeout=60)
    end = runner.wait(handle, wait_interval=0.2, timeout=60)
    assert end is not None and end.state == AppState.CANCELLED, end
    assert end.msg.startswith("it was cancelled by "), end.msg
    time.sleep(1)  # nothing runs again, now or a moment later
    assert _log(runner, app_id) == ["run 1\n"]
    assert [c.name for c in _sched(runner)._containers(app_id)] == [container_name(app_id, "r", 0)]
    assert read_mark(app_id) is None


def test_a_preemption_whose_workers_keep_dying_fails_the_job_in_one_line(
    runner: Runner, base_images: dict[str, str], docker_env: DockerDaemon
) -> None:
    """A mark that outlived its workers three times over (each died midway, the replica left
    stopped): the next describe does not start a fourth, the job is FAILED with one line."""
    import json

    from torchx_nb.paths import private_dir, write_private

    handle, app_id = _submit(runner, base_images)
    c = docker_env.client().containers.get(container_name(app_id, "r", 0))
    c.stop(timeout=0)
    mark = preempt_mark(app_id)
    private_dir(mark.parent)
    said = {"at": time.time(), "grace": 0, "attempt": 1, "restarts": 3, "stopping": [c.id]}
    write_private(mark, json.dumps({**said, "stopping_at": time.time()}))
    end = runner.wait(handle, wait_interval=0.2, timeout=30)
    assert end is not None and end.state == AppState.FAILED, end
    assert end.msg == (
        f"{app_id} was preempted but attempt 2 could not be started: its preemption's worker"
        f" stopped 4 times: see {mark}.log"
    )
    assert _log(runner, app_id) == ["run 1\n"]
    code, _, err = cli("preempt", handle)
    assert code == 1 and "is FAILED, not running" in err, err


# the job-side runner's checkpoint start (as a cell's runner does it), then a step kept in
# the checkpoint folder; the first attempt waits for its preemption, saved on SIGTERM
RESUMING = """
import os, sys, time
from cell_runner import checkpoint as ck
ck.begin_run(None)
folder = os.environ.get("TORCHX_NB_CHECKPOINT_DIR", "/tmp/no-checkpoint")
os.makedirs(folder, exist_ok=True)
state = os.path.join(folder, "step")
step = int(open(state).read()) if os.path.exists(state) else 0
runs = os.path.join(os.environ["TORCHX_OUTPUT_DIR"], "runs")
n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
open(runs, "w").write(str(n))
print(f"run {n}: attempt {os.environ.get('TORCHX_NB_ATTEMPT', '1')}, resuming at {step}", flush=True)
if n >= 2:
    sys.exit(0)
open(state, "w").write("7")
while True:
    time.sleep(0.1)
"""


def test_a_preempted_job_resumes_from_its_checkpoint(
    runner: Runner, base_images: dict[str, str]
) -> None:
    """local_docker keeps every job's checkpoint store in its output folder (the local app
    folder, as local_cwd): the next attempt restores what the first saved on SIGTERM, and
    status says which checkpoint it resumed from. Before, no store was given: the rerun
    started over at step 0 as attempt 1, and status said only 'up to … of work lost'."""
    from pathlib import Path

    import torchx_nb
    from torchx_nb import specs

    runner_dir = Path(torchx_nb.__file__).parent / "apps" / "cell_runner"
    app = specs.AppDef(
        "ckpt",
        roles=[
            specs.Role(
                "r",
                base_images["python"],
                entrypoint="python3",
                args=["-c", RESUMING],
                env={"PYTHONPATH": "/runner"},
                mounts=[specs.BindMount(str(runner_dir), "/runner/cell_runner", True)],
                resource=specs.Resource(cpu=1, gpu=0, memMB=256),
            )
        ],
    )
    handle = runner.run(app, "local_docker", {})
    app_id = handle.rsplit("/", 1)[1]
    first = ["run 1: attempt 1, resuming at 0\n"]
    wait_for(lambda: _log(runner, app_id) == first, timeout=60)
    code, _, err = cli("preempt", handle, "--grace", "5")
    assert code == 0, err
    end = runner.wait(handle, wait_interval=0.2, timeout=90)
    assert end is not None and end.state == AppState.SUCCEEDED, end
    assert _log(runner, app_id) == [*first, "run 2: attempt 2, resuming at 7\n"]
    code, out, _ = cli("status", handle)
    lines = out.splitlines()
    assert "Attempts: 2 (1 preemption, 0 failures)" in lines, out
    story = next(line.strip() for line in lines if line.strip().startswith("preempted at "))
    assert " from the checkpoint of " in story and "up to" not in story, out


def test_a_preemption_given_up_before_it_stopped_anything_leaves_nothing_running(
    runner: Runner, base_images: dict[str, str], docker_env: DockerDaemon
) -> None:
    """Workers that died before they stopped a replica, three times over: the job is FAILED
    with the preemption's line only once its replica is stopped. Before, it read FAILED with
    the replica still running, and `torchx-nb cancel` said 'cancel requested' and stopped
    nothing (a FAILED job is not cancelled): a container running on that nothing tracked."""
    import json

    from torchx_nb.paths import private_dir, write_private

    handle, app_id = _submit(runner, base_images)
    mark = preempt_mark(app_id)
    private_dir(mark.parent)
    write_private(mark, json.dumps({"at": time.time(), "grace": 0, "attempt": 1, "restarts": 3}))
    end = runner.wait(handle, wait_interval=0.2, timeout=30)
    assert end is not None and end.state == AppState.FAILED, end
    assert end.msg.startswith(f"{app_id} was preempted but attempt 2 could not be started: ")
    c = docker_env.client().containers.get(container_name(app_id, "r", 0))
    assert c.status == "exited", c.status
    code, out, _ = cli("status", handle)
    assert code == 0 and "State: FAILED" in out and "r[0]:RUNNING" not in out, out
    assert _log(runner, app_id) == ["run 1\n"]


STUBBORN = """
import os, signal, sys, time
from cell_runner import checkpoint as ck
ck.begin_run(None)
print(f"attempt {os.environ['TORCHX_NB_ATTEMPT']} ({os.environ['TORCHX_NB_PREEMPTIONS']} preemptions)", flush=True)
if os.environ["TORCHX_NB_ATTEMPT"] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the grace ends in SIGKILL
    while True:
        time.sleep(0.1)
"""


def test_a_preempted_program_that_ignored_sigterm_was_preempted_not_failed(
    runner: Runner, base_images: dict[str, str]
) -> None:
    """A program that ignores SIGTERM is killed when local_docker's preemption grace ends, so
    its ledger entry never says how it ended: the preemption names the containers it stopped,
    and the next attempt reads it as a preemption — with max_retries 1, before, it was the
    program's failure ('attempt 2 (0 preemptions)', ledger 'lost')."""
    import json
    from pathlib import Path

    import torchx_nb
    from torchx_nb import specs
    from torchx_nb.paths import data_dir

    runner_dir = Path(torchx_nb.__file__).parent / "apps" / "cell_runner"
    app = specs.AppDef(
        "stubborn",
        roles=[
            specs.Role(
                "r",
                base_images["python"],
                entrypoint="python3",
                args=["-c", STUBBORN],
                env={"PYTHONPATH": "/runner"},
                max_retries=1,
                mounts=[specs.BindMount(str(runner_dir), "/runner/cell_runner", True)],
                resource=specs.Resource(cpu=1, gpu=0, memMB=256),
            )
        ],
    )
    handle = runner.run(app, "local_docker", {})
    app_id = handle.rsplit("/", 1)[1]
    wait_for(lambda: _log(runner, app_id) == ["attempt 1 (0 preemptions)\n"], timeout=60)
    code, _, err = cli("preempt", handle, "--grace", "1")
    assert code == 0, err
    end = runner.wait(handle, wait_interval=0.2, timeout=90)
    assert end is not None and end.state == AppState.SUCCEEDED, end
    assert _log(runner, app_id)[1:] == ["attempt 2 (1 preemptions)\n"]
    ledger = data_dir() / "local_docker" / app_id / "outputs" / ".torchx-nb" / "checkpoints"
    entries = json.loads((ledger / "attempts.json").read_text())
    # (this program does not end through the cell runner: its own attempt says no more)
    assert [e["why"] for e in entries] == ["reclaimed", "running"]
