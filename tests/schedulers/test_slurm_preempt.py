"""Preemption on a real preempting Slurm cluster of its own (``slurm_preempt``: partitions spot
(PreemptMode=REQUEUE, GraceTime=5), spotc (CANCEL) and urgent (PriorityTier=10); a job of
urgent that needs both nodes preempts what runs): a preemption never spends ``max_retries``,
a program's own failure still does."""

from __future__ import annotations

import time

from tests.conftest import wait_for
from tests.infra.slurm import SlurmCluster, job_fields, preempt_nodes, requeue_hold
from torchx_nb import specs
from torchx_nb.runner import Runner, get_runner
from torchx_nb.specs.api import AppState, AppStatus
from torchx_nb.specs.log_line import Stream

# the first run waits to be preempted and ends at once on SIGTERM (as a program that saves a
# checkpoint does); a later run does what ``then`` says
_FIRST_RUN_PREEMPTED = (
    'echo "run ${{SLURM_RESTART_COUNT:-0}}"; '
    'if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then {then}; fi; '
    "trap 'echo got SIGTERM; exit 143' TERM; "
    "while :; do sleep 0.2; done"
)


def _app(script: str, retries: int = 0) -> specs.AppDef:
    return specs.AppDef(
        "spot",
        roles=[
            specs.Role(
                name="r",
                image="",
                entrypoint="bash",
                args=["-c", script],
                max_retries=retries,
                resource=specs.Resource(cpu=1, gpu=0, memMB=200),
            )
        ],
    )


def _job(handle: str) -> str:
    return handle.rsplit("/", 1)[1]


def _running(runner: Runner, handle: str) -> None:
    wait_for(lambda: (s := runner.status(handle)) and s.state == AppState.RUNNING, timeout=90)


def _held_then_released(cluster: SlurmCluster, runner: Runner, handle: str, restarts: int) -> None:
    """Wait until Slurm requeued the job (``restarts`` times), check it holds it ~2 minutes
    (BeginTime), then let it start now rather than wait the hold out."""

    def requeued() -> AppStatus | None:
        s = runner.status(handle)
        ok = s is not None and s.state == AppState.PENDING and s.num_restarts == restarts
        return s if ok and job_fields(cluster, _job(handle)).get("Reason") == "BeginTime" else None

    wait_for(requeued, timeout=120, interval=0.5)
    hold = requeue_hold(cluster, _job(handle))
    assert 100 <= hold <= 150, hold  # measured: 121 s on Slurm 22.05
    cluster.run("scontrol", "update", f"JobId={_job(handle)}", "StartTime=now")


def _sacct_runs(cluster: SlurmCluster, job: str) -> list[str]:
    """The job's own state per run, oldest first (``sacct --duplicates``)."""
    out = cluster.run("sacct", "-n", "-P", "--duplicates", "-X", "-o", "State", "-j", job).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_a_preempted_job_with_no_retries_is_requeued_and_succeeds(
    slurm_preempt_env: SlurmCluster,
) -> None:
    """max_retries=0: the preemption is no failure. Before, the script took the SIGTERM'd
    program's exit 143 (during GraceTime) as the job's and the job ended FAILED."""
    cluster = slurm_preempt_env
    with get_runner() as runner:
        handle = runner.run(
            _app(_FIRST_RUN_PREEMPTED.format(then="echo resumed; exit 0")), "slurm", {}
        )
        _running(runner, handle)
        preempted_at = time.time()
        preempt_nodes(cluster)
        _held_then_released(cluster, runner, handle, restarts=1)
        status = runner.wait(handle, wait_interval=0.5, timeout=180)
        logs = list(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
    assert status is not None and status.state == AppState.SUCCEEDED, (status, logs)
    assert status.num_restarts == 1
    assert logs == ["run 1\n", "resumed\n"]  # a requeued run's log starts afresh
    assert _sacct_runs(cluster, _job(handle)) == ["PREEMPTED", "COMPLETED"]
    assert time.time() - preempted_at < 170


def test_program_failures_still_spend_retries_after_a_preemption(
    slurm_preempt_env: SlurmCluster,
) -> None:
    """max_retries=1: preempted once (not counted), then the program fails twice: it ran
    three times and ended FAILED. Before, the preemption spent the retry (two runs)."""
    cluster = slurm_preempt_env
    with get_runner() as runner:
        script = _FIRST_RUN_PREEMPTED.format(then="echo boom >&2; exit 3")
        handle = runner.run(_app(script, retries=1), "slurm", {})
        _running(runner, handle)
        preempt_nodes(cluster)
        _held_then_released(cluster, runner, handle, restarts=1)
        _held_then_released(cluster, runner, handle, restarts=2)
        status = runner.wait(handle, wait_interval=0.5, timeout=180)
        logs = list(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
    assert status is not None and status.state == AppState.FAILED, (status, logs)
    assert "exit code 3" in status.msg
    assert logs == ["run 2\n"]
    assert _sacct_runs(cluster, _job(handle)) == ["PREEMPTED", "REQUEUED", "FAILED"]
