"""Checkpoints through real local_cwd jobs: a cell (and a notebook) that trains in steps is
preempted (local_cwd's preempt: SIGTERM, then its replicas run again) and resumes from the
checkpoint saved on SIGTERM; a program whose failures are past its max_retries is not run
again (exit 171) — local_cwd retries nothing, so that replica is run again here as a
backend's retry runs it (its own command and environment, from the job's request)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import wait_for
from torchx_nb.apps.cell_runner import checkpoint as ck
from torchx_nb.components.cell import cell
from torchx_nb.results import LocalStore, load_result
from torchx_nb.runner import get_runner
from torchx_nb.specs import AppState, AppStatus, parse_app_handle

TRAIN = """
import time
import torchx_nb

ckpt = torchx_nb.checkpoint()
state = ckpt.path / "step.txt"
step = int(state.read_text()) if state.exists() else 0
print(f"attempt {ckpt.attempt} ({ckpt.preemptions} preemptions) resumes at step {step}"
      f" restored={ckpt.restored_from is not None}", flush=True)
while step < 8:
    step += 1
    state.write_text(str(step))
    if step % 2 == 0:
        ckpt.save()
    print(f"step {step}", flush=True)
    time.sleep(0.8)
(step, ckpt.attempt, ckpt.preemptions)
"""


def app_dir(handle: str) -> Path:
    _, _, app_id = parse_app_handle(handle)
    return Path(os.environ["TORCHX_NB_DATA_DIR"]) / "local_cwd" / "torchx" / app_id


def combined_log(handle: str) -> Path:
    return next(app_dir(handle).rglob("combined.log"))


def rerun(handle: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The job's replica run again as the backend reruns it: its own command, environment
    (with ``env`` added: what another backend would set) and folder, from the request
    local_cwd kept."""
    request = json.loads((app_dir(handle) / "request.json").read_text())
    replica = next(iter(request["role_params"].values()))[0]
    return subprocess.run(
        replica["args"],
        env={**replica["env"], **(env or {})},
        cwd=replica["cwd"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_preempted_cell_resumes_from_its_checkpoint(isolated: Path, tmp_path: Path) -> None:
    """local_cwd's preempt (SIGTERM, then the replicas run again): the runner saves the step
    the cell had reached on SIGTERM; the second attempt restores it, says so, does no step
    twice, and its result is the job's."""
    from torchx_nb.notebook.handle import JobHandle
    from torchx_nb.schedulers.local_cwd import create_scheduler

    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(cell(source=TRAIN), "local_cwd", {}, workspace=str(ws))
        log = combined_log_when_there(handle)
        wait_for(lambda: "step 5" in log.read_text(), 60)
        create_scheduler("torchx").preempt(parse_app_handle(handle)[2], grace=10)
        assert JobHandle(handle, runner).result(timeout=120) == (8, 2, 1)
        assert runner.status(handle).state == AppState.SUCCEEDED  # type: ignore[union-attr]
    text = log.read_text()
    first, _, second = text.partition("torchx_nb: attempt 2: ")
    assert "attempt 1 (0 preemptions) resumes at step 0 restored=False" in first
    ledger = json.loads((app_dir(handle) / "checkpoints" / ck.LEDGER).read_text())
    assert [(e["n"], e["why"]) for e in ledger] == [(1, "sigterm"), (2, "ok")]
    saved_at = ledger[0]["ckpt_generation"]
    assert f"torchx_nb: SIGTERM: checkpoint saved (generation {saved_at})" in first
    # the SIGTERM's save holds the step the cell had reached, not only its last save()
    stopped_at = int(re.findall(r"^step (\d+)$", first, re.M)[-1])
    assert second.startswith(
        f"checkpoint generation {saved_at} restored into {app_dir(handle) / 'checkpoint'}"
        f"/rank-0\nattempt 2 (1 preemptions) resumes at step {stopped_at} restored=True\n"
    )
    steps = [int(n) for n in re.findall(r"^step (\d+)$", text, re.M)]
    assert steps == list(range(1, 9))  # no step done twice, none skipped
    # the second attempt saved at steps 6 and 8, and at its end
    assert ledger[1]["ckpt_generation"] == saved_at + 3
    latest = app_dir(handle) / "checkpoints" / "rank-0" / "LATEST"
    assert latest.read_text() == str(saved_at + 3)


def combined_log_when_there(handle: str) -> Path:
    return wait_for(lambda: next(app_dir(handle).rglob("combined.log"), None), 60)  # type: ignore[no-any-return]


def test_failures_past_max_retries_end_the_attempt_at_once(isolated: Path, tmp_path: Path) -> None:
    """With max_retries 1 the program runs twice; a third attempt (the backend's counter
    also holds preemptions) ends with 171 and one line before the cell runs, and the result
    read back is still the last real failure's exception."""
    ws = tmp_path / "ws"
    ws.mkdir()
    source = "print('running', flush=True)\nraise ValueError('bad data')"
    with get_runner() as runner:
        app = cell(source=source, max_retries=1)
        handle = runner.run(app, "local_cwd", {}, workspace=str(ws))
        wait_for(lambda: runner.status(handle).is_terminal(), 60)  # type: ignore[union-attr]
    second = rerun(handle)
    assert second.returncode == 1 and second.stdout == "running\n"
    third = rerun(handle)
    assert third.returncode == ck.RETRIES_SPENT_EXIT
    assert third.stdout == ""
    assert third.stderr.strip().splitlines()[-1] == (
        "torchx_nb: the program failed 2 times (max_retries 1): not run again"
        " (attempt 3, 0 preemptions)"
    )
    outputs = LocalStore(f"file://{app_dir(handle) / 'outputs'}")
    with pytest.raises(ValueError, match="bad data"):
        load_result(outputs, AppStatus(AppState.FAILED), handle)
    ledger = json.loads((app_dir(handle) / "checkpoints" / ck.LEDGER).read_text())
    assert [e["why"] for e in ledger] == ["exit 1", "exit 1", "exit 171"]


def test_a_retry_that_succeeds_reads_back_its_result_not_the_earlier_error(
    isolated: Path, tmp_path: Path
) -> None:
    """An attempt that failed left its error; the rerun that succeeds is the result."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "flag").write_text("fail")
    source = (
        "import pathlib\n"
        "flag = pathlib.Path('flag')\n"
        "if flag.read_text() == 'fail':\n"
        "    flag.write_text('ok')\n"
        "    raise RuntimeError('first time')\n"
        "41 + 1"
    )
    with get_runner() as runner:
        app = cell(source=source, max_retries=1)
        handle = runner.run(app, "local_cwd", {}, workspace=str(ws))
        wait_for(lambda: runner.status(handle).is_terminal(), 60)  # type: ignore[union-attr]
    outputs = LocalStore(f"file://{app_dir(handle) / 'outputs'}")
    assert ".torchx-nb/error-0.pkl" in {f.path for f in outputs.list()}
    done = rerun(handle)
    assert done.returncode == 0, done.stderr
    assert load_result(outputs, AppStatus(AppState.SUCCEEDED), handle) == 42


def test_a_notebook_job_saves_on_sigterm_and_restarts_from_its_first_cell_restored(
    isolated: Path, tmp_path: Path
) -> None:
    """The notebook's kernel writes into torchx_nb.checkpoint(); a preemption's SIGTERM
    stops the kernel and the runner saves the folder; the next attempt starts again at the
    first cell, the folder restored, and the executed notebook is the finished attempt's."""
    import nbformat

    from tests.conftest import cli
    from tests.test_run_notebook import notebook
    from torchx_nb.schedulers.local_cwd import create_scheduler

    notebook(
        isolated / "train.ipynb",
        "import time, torchx_nb\n"
        "ckpt = torchx_nb.checkpoint()\n"
        "state = ckpt.path / 'step.txt'\n"
        "step = int(state.read_text()) if state.exists() else 0\n"
        "print('attempt', ckpt.attempt, 'starts at step', step, flush=True)",
        "while step < 6:\n"
        "    step += 1\n"
        "    state.write_text(str(step))\n"
        "    print('step', step, flush=True)\n"
        "    time.sleep(0.8)",
        "step",
    )
    code, out, err = cli("run-notebook", "train.ipynb", timeout=120)
    assert code == 0, err
    handle = out.splitlines()[0]
    log = combined_log_when_there(handle)
    wait_for(lambda: "step 3" in log.read_text(), 90)
    create_scheduler("torchx").preempt(parse_app_handle(handle)[2], grace=10)
    with get_runner() as runner:
        wait_for(lambda: runner.status(handle).is_terminal(), 90)  # type: ignore[union-attr]
        assert runner.status(handle).state == AppState.SUCCEEDED  # type: ignore[union-attr]
        nb = nbformat.read(runner.executed_notebook(handle, tmp_path / "nb"), as_version=4)
    first, _, second = log.read_text().partition("[torchx_nb] cell 2: import time, torchx_nb\n")
    first, _, second = second.partition("[torchx_nb] cell 2: import time, torchx_nb\n")
    stopped_at = int(re.findall(r"^step (\d+)$", first, re.M)[-1])
    assert "torchx_nb: SIGTERM: checkpoint saved (generation 1)" in first, first
    # from the first code cell again (cell 1 is the notebook's title), the folder restored
    assert second.startswith(f"attempt 2 starts at step {stopped_at}\n"), second
    assert nb.cells[-1].outputs[0]["data"]["text/plain"] == "6"
    ledger = json.loads((app_dir(handle) / "checkpoints" / ck.LEDGER).read_text())
    assert [(e["n"], e["why"], e["ckpt_generation"]) for e in ledger] == [
        (1, "sigterm", 1),
        (2, "ok", 2),
    ]


def test_a_sweep_trial_keeps_its_own_checkpoint_and_ends_as_sigterm_would(
    tmp_path: Path,
) -> None:
    """An array task (a trial) saves under ``trial-<i>/`` of the store and of the folder; on
    SIGTERM the runner saves, then dies of the signal itself (the backend sees a SIGTERM
    death, as without checkpoints)."""
    import subprocess
    import sys

    from tests.apps.test_cell_main import job_folder
    from torchx_nb.components.cell import RUNNER

    source = (
        "import os, time\n"
        "d = os.environ['TORCHX_NB_CHECKPOINT_DIR']\n"
        "open(os.path.join(d, 'lr.txt'), 'w').write(str(lr))\n"
        "print('ready', d, flush=True)\n"
        "time.sleep(60)\n"
    )
    folder, script = job_folder(tmp_path, source)
    env = {
        "PATH": "/usr/bin:/bin",
        "TORCHX_OUTPUT_DIR": str(tmp_path / "out"),
        "TORCHX_NB_GRID": json.dumps({"names": ["lr"], "lists": [[0.1, 0.2]], "zip": False}),
        "TORCHX_NB_TRIAL_FROM": "TASK_INDEX",
        "TASK_INDEX": "1",
        ck.URL_ENV: f"file://{tmp_path / 'store'}",
        ck.DIR_ENV: str(tmp_path / "local"),
        ck.GRACE_ENV: "10",
    }
    proc = subprocess.Popen(
        [sys.executable, str(folder / RUNNER), str(folder / script)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert line == f"ready {tmp_path / 'local' / 'trial-1' / 'rank-0'}\n"
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "torchx_nb: SIGTERM: checkpoint saved (generation 1)" in stderr
    trial = tmp_path / "store" / "trial-1"
    assert (trial / "rank-0" / "gen-000001" / "lr.txt").read_text() == "0.2"
    ledger = json.loads((trial / ck.LEDGER).read_text())
    assert [(e["n"], e["why"], e["ckpt_generation"]) for e in ledger] == [(1, "sigterm", 1)]


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_the_cell_runner_restores_from_an_object_store(
    tmp_path: Path, scheme: str, request: pytest.FixtureRequest
) -> None:
    """``$TORCHX_NB_CHECKPOINT_URL`` on S3 (moto) or GCS (the emulator), as a user sets it on
    any backend: the second run of the cell (a new machine: an empty local folder) finds
    what the first one saved at its end."""
    import sys

    from tests.apps.test_cell_main import run_cell

    if scheme == "s3":
        aws = request.getfixturevalue("aws_env")
        aws.client("s3").create_bucket(
            Bucket="ckpt-jobs", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        creds = aws.env
    else:
        gcs = request.getfixturevalue("gcs_env")
        gcs.bucket("ckpt-jobs")
        creds = gcs.env
    source = (
        "import os, pathlib\n"
        "p = pathlib.Path(os.environ['TORCHX_NB_CHECKPOINT_DIR']) / 'n.txt'\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "(n, os.environ['TORCHX_NB_ATTEMPT'])"
    )
    seen = []
    for machine in ("first", "second"):
        env = {
            **creds,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            ck.URL_ENV: f"{scheme}://ckpt-jobs/runs/job-1",
            ck.DIR_ENV: str(tmp_path / machine / "ckpt"),
        }
        done, store = run_cell(tmp_path / machine, source, env=env)
        assert done.returncode == 0, done.stderr
        seen.append(load_result(store, AppStatus(AppState.SUCCEEDED), "h"))
    assert seen == [(1, "1"), (2, "2")]


def test_an_attempt_killed_without_sigterm_is_a_failure_not_a_preemption(
    isolated: Path, tmp_path: Path
) -> None:
    """An attempt SIGKILLed (as the OOM killer or a lost node ends it: no SIGTERM, so the
    ledger never hears how it ended) is a failure of the program, not a preemption: the next
    attempt says 0 preemptions, and with max_retries 1 the third is not run."""
    ws = tmp_path / "ws"
    ws.mkdir()
    source = (
        "import os, signal, torchx_nb\n"
        "ckpt = torchx_nb.checkpoint()\n"
        "print(f'attempt {ckpt.attempt} ({ckpt.preemptions} preemptions)', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    with get_runner() as runner:
        handle = runner.run(cell(source=source, max_retries=1), "local_cwd", {}, workspace=str(ws))
        wait_for(lambda: runner.status(handle).is_terminal(), 60)  # type: ignore[union-attr]
    assert "attempt 1 (0 preemptions)" in combined_log(handle).read_text()
    second = rerun(handle)
    assert second.returncode == -signal.SIGKILL and second.stdout == "attempt 2 (0 preemptions)\n"
    third = rerun(handle)
    assert third.returncode == ck.RETRIES_SPENT_EXIT, third.stdout
    assert third.stderr.strip().splitlines()[-1] == (
        "torchx_nb: the program failed 2 times (max_retries 1): not run again"
        " (attempt 3, 0 preemptions)"
    )
    ledger = json.loads((app_dir(handle) / "checkpoints" / ck.LEDGER).read_text())
    assert [e["why"] for e in ledger] == ["lost", "lost", "exit 171"]


def test_each_replica_keeps_its_own_checkpoint_folder(isolated: Path, tmp_path: Path) -> None:
    """A cell job of two replicas without torchrun (so no $RANK) on local_cwd: each replica is
    its own rank, by the TORCHX_REPLICA_ID local_cwd sets, and saves into its own folder —
    before, both read as rank 0 and wrote one folder's generations over each other."""
    source = (
        "import os, torchx_nb\n"
        "ckpt = torchx_nb.checkpoint()\n"
        "(ckpt.path / 'who').write_text(os.environ['TORCHX_REPLICA_ID'])\n"
        "ckpt.save()\n"
    )
    app = cell(source=source)
    app.roles[0].num_replicas = 2
    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd", {}, workspace=str(ws))
        ended = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
    store = app_dir(handle) / "checkpoints"
    for rank in ("0", "1"):  # a generation holds only what changed since the one before
        saved = sorted((store / f"rank-{rank}").glob("gen-*/who"))
        assert [f.read_text() for f in saved] == [rank]


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({"RANK": "3", "TORCHX_REPLICA_ID": "1"}, 3),  # torchrun's global rank first
        ({"TORCHX_REPLICA_ID": "1"}, 1),  # local_cwd, local_docker, Slurm, Kubernetes, SageMaker
        ({"AWS_BATCH_JOB_NODE_INDEX": "2"}, 2),  # an AWS Batch multi-node job's node
        ({"TORCHX_REPLICA_IDX": "4"}, 4),  # a GCP Batch task, as TorchX names its index
        ({}, 0),
    ],
)
def test_a_replicas_rank_comes_from_its_backend(
    env: dict[str, str], rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchx_nb.apps.cell_runner import common

    for name in ("RANK", "TORCHX_REPLICA_ID", "AWS_BATCH_JOB_NODE_INDEX", "TORCHX_REPLICA_IDX"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert common.rank() == rank


def test_a_failure_before_an_attempt_reclaimed_before_it_began_is_still_a_failure(
    isolated: Path, tmp_path: Path
) -> None:
    """AWS Batch (a multi-node job: each node's ``AWS_BATCH_JOB_ID`` is ``JOB#NODE``), max_retries
    1: attempts 1 and 2 are killed without a SIGTERM (the OOM killer), attempt 3's host is
    reclaimed before its runner began (a long image pull), so attempt 2's entry still says
    ``running`` when the job sent again past Batch's cap begins. Batch's record names attempt 3
    alone as reclaimed: attempt 2 stays the program's failure, and the job sent again is not
    run (the program failed twice, max_retries 1) — before, the job's id in
    ``TORCHX_NB_RECLAIMED`` made its last ledger entry, attempt 2, a reclaim, and the program
    ran a third time."""
    from torchx_nb.schedulers.aws_batch_spot import reclaimed_tokens

    ws = tmp_path / "ws"
    ws.mkdir()
    source = (
        "import os, signal, torchx_nb\n"
        "ckpt = torchx_nb.checkpoint()\n"
        "print(f'attempt {ckpt.attempt} ({ckpt.preemptions} preemptions)', flush=True)\n"
        "if os.environ['AWS_BATCH_JOB_ID'].startswith('first'):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    with get_runner() as runner:
        handle = runner.run(cell(source=source, max_retries=1), "local_cwd", {}, workspace=str(ws))
        wait_for(lambda: runner.status(handle).is_terminal(), 60)  # type: ignore[union-attr]
    batch = {ck.ATTEMPT_ENV_ENV: "AWS_BATCH_JOB_ATTEMPT", "AWS_BATCH_JOB_ID": "first#0"}
    # the local run above had no Batch ids: its ledger is started afresh as Batch's would be
    (app_dir(handle) / "checkpoints" / ck.LEDGER).unlink()
    for n in ("1", "2"):
        killed = rerun(handle, {**batch, "AWS_BATCH_JOB_ATTEMPT": n})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    described = {  # DescribeJobs of the first job, as Batch gives it once it ended reclaimed
        "jobId": "first",
        "status": "FAILED",
        "attempts": [
            {"statusReason": "OutOfMemoryError: Container killed due to memory usage"},
            {"statusReason": "OutOfMemoryError: Container killed due to memory usage"},
            {"statusReason": "Host EC2 (instance i-0abc) terminated."},
        ],
    }
    again = {
        ck.ATTEMPT_ENV_ENV: "AWS_BATCH_JOB_ATTEMPT",
        "AWS_BATCH_JOB_ID": "second#0",
        "AWS_BATCH_JOB_ATTEMPT": "1",
        ck.RECLAIMED_ENV: reclaimed_tokens(described),
    }
    third = rerun(handle, again)
    ledger = json.loads((app_dir(handle) / "checkpoints" / ck.LEDGER).read_text())
    assert [e["why"] for e in ledger] == ["lost", "lost", "exit 171"], third.stdout
    assert third.returncode == ck.RETRIES_SPENT_EXIT and third.stdout == ""
    assert third.stderr.strip().splitlines()[-1] == (
        "torchx_nb: the program failed 2 times (max_retries 1): not run again"
        " (attempt 3, 0 preemptions)"
    )


def test_local_cwd_s_preemption_names_the_replicas_it_stopped(
    isolated: Path, tmp_path: Path
) -> None:
    """local_cwd's preempt runs every replica again, even one that had already ended. With
    max_retries 0, rank 0 SIGKILLed (the OOM killer) while rank 1 still ran, then preempted:
    rank 0's next attempt is the program's failure run again — it ends at once (171) and the
    job FAILED (before: the kill read as a reclaim, since max_retries 0, and the job
    SUCCEEDED). And a program that ignores SIGTERM, killed at the grace's end, was preempted
    all the same: with max_retries 1 its next attempt reads 1 preemption, 0 failures (before:
    a failure of the program's)."""
    from torchx_nb.schedulers.local_cwd import create_scheduler

    def logs(handle: str) -> str:
        return "".join(p.read_text() for p in sorted(app_dir(handle).rglob("combined.log")))

    source = (
        "import os, signal, time, torchx_nb\n"
        "ckpt = torchx_nb.checkpoint()\n"
        "r = os.environ['TORCHX_REPLICA_ID']\n"
        "print(f'rank {r} attempt {ckpt.attempt} ({ckpt.preemptions} preemptions)', flush=True)\n"
        "if r == '0' and ckpt.attempt == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "if r == '1' and ckpt.attempt == 1:\n"
        "    time.sleep(120)\n"
    )
    app = cell(source=source, max_retries=0)
    app.roles[0].num_replicas = 2
    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd", {}, workspace=str(ws))
        wait_for(lambda: "rank 1 attempt 1" in logs(handle), 60)
        ledger = app_dir(handle) / "checkpoints" / ck.LEDGER
        state = app_dir(handle) / "state.json"

        def rank0_killed() -> bool:
            replicas = json.loads(state.read_text())["roles"]["cell"]
            return bool(replicas[0]["exitcode"] == -signal.SIGKILL)

        wait_for(rank0_killed, 60)
        create_scheduler("torchx").preempt(parse_app_handle(handle)[2], grace=5)
        ended = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.FAILED, (ended, logs(handle))
        assert "rank 0 attempt 2" not in logs(handle)
        assert (
            "torchx_nb: the program failed 1 times (max_retries 0): not run again"
            " (attempt 2, 0 preemptions)"
        ) in logs(handle)
        assert [e["why"] for e in json.loads(ledger.read_text())] == ["lost", "exit 171"]

        stubborn = (
            "import signal, time, torchx_nb\n"
            "ckpt = torchx_nb.checkpoint()\n"
            "print(f'attempt {ckpt.attempt} ({ckpt.preemptions} preemptions)', flush=True)\n"
            "if ckpt.attempt == 1:\n"
            "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "    time.sleep(120)\n"
        )
        handle = runner.run(
            cell(source=stubborn, max_retries=1), "local_cwd", {}, workspace=str(ws)
        )
        wait_for(lambda: "attempt 1 (0 preemptions)" in logs(handle), 60)
        create_scheduler("torchx").preempt(parse_app_handle(handle)[2], grace=1)
        ended = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, (ended, logs(handle))
        assert "attempt 2 (1 preemptions)" in logs(handle)
        ledger = app_dir(handle) / "checkpoints" / ck.LEDGER
        assert [e["why"] for e in json.loads(ledger.read_text())] == ["reclaimed", "ok"]
