"""Preemption on a real preempting Slurm cluster of its own (``slurm_preempt``: partitions spot
(PreemptMode=REQUEUE, GraceTime=5), spotc (CANCEL) and urgent (PriorityTier=10); a job of
urgent that needs both nodes preempts what runs): a preemption never spends ``max_retries``,
a program's own failure still does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.infra.slurm import SlurmCluster, job_fields, preempt_nodes, requeue_hold
from torchx_nb import specs
from torchx_nb.runner import Runner, get_runner
from torchx_nb.schedulers.slurm import SlurmScheduler
from torchx_nb.specs.api import AppState, AppStatus
from torchx_nb.specs.exceptions import NotPreemptible
from torchx_nb.specs.log_line import Stream

# the first run waits to be preempted and ends at once on SIGTERM (as a program that saves a
# checkpoint does); a later run does what ``then`` says
_FIRST_RUN_PREEMPTED = (
    'echo "run ${{SLURM_RESTART_COUNT:-0}}"; echo "$TORCHX_NB_CHECKPOINT_URL" >> stores; '
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
    # both runs were given the same checkpoint store, in the job's folder
    workdir = Path.cwd()
    stores = (workdir / "stores").read_text().splitlines()
    assert len(stores) == 2 and stores[0] == stores[1], stores
    assert stores[0].startswith(f"file://{workdir}/.torchx-nb-outputs/checkpoints/spot-")
    # describe tells the preemption from Slurm's record, with when the next run started
    desc = SlurmScheduler("torchx").describe(_job(handle))
    assert desc is not None and not desc.ended_preempted
    (event,) = desc.preemptions
    assert event.why == "preempted by a job of higher priority"
    assert preempted_at < event.at < event.resumed_at < time.time()  # type: ignore[operator]


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
    # the requeue after the program's first failure is no preemption
    desc = SlurmScheduler("torchx").describe(_job(handle))
    assert desc is not None
    assert [e.why for e in desc.preemptions] == ["preempted by a job of higher priority"]


def test_under_preempt_mode_cancel_the_job_ends_preempted_and_is_sent_again(
    slurm_preempt_env: SlurmCluster,
) -> None:
    """PreemptMode=CANCEL: Slurm ends the job PREEMPTED; describe says so
    (``ended_preempted``: before, it was a plain FAILED) and the runner sends the kept script
    again (``submit_again``) as attempt 2 of the same handle, which succeeds."""
    cluster = slurm_preempt_env
    sched = SlurmScheduler("torchx")
    script = (
        "trap 'echo got SIGTERM; exit 143' TERM; echo started;"
        " while [ ! -e again ]; do sleep 0.2; done; echo second"
    )
    with get_runner() as runner:
        handle = runner.run(_app(script), "slurm", {"partition": "spotc"})
        first = _job(handle)
        _running(runner, handle)
        preempt_nodes(cluster)

        def ended() -> object:
            d = sched.describe(first)
            return d if d is not None and d.state == AppState.FAILED else None

        desc = wait_for(ended, timeout=90, interval=0.5)
        assert desc.ended_preempted, desc  # type: ignore[attr-defined]
        assert desc.msg == (  # type: ignore[attr-defined]
            "it was preempted by a job of higher priority (PreemptMode=CANCEL: Slurm does not"
            " requeue it)"
        )
        (event,) = desc.preemptions  # type: ignore[attr-defined]
        assert event.why == "preempted by a job of higher priority" and event.resumed_at is None
        (Path(desc.metadata["workdir"]) / "again").write_text("")  # type: ignore[attr-defined]
        status = runner.wait(handle, wait_interval=0.5, timeout=180)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        log = runner.jobstore.attempt_log(handle)
    assert [(a.n, a.ended_why) for a in log.attempts] == [(1, "preempted"), (2, "succeeded")]
    assert log.attempts[0].app_id == first and log.attempts[1].app_id != first
    assert log.preemptions == 1 and log.failures == 0
    second = log.attempts[1].app_id
    assert job_fields(cluster, second)["Partition"] == "spotc"


def test_torchx_nb_preempt_requeues_a_running_job(slurm_preempt_env: SlurmCluster) -> None:
    """``torchx-nb preempt --grace 5``: scontrol requeue (SIGTERM now, the cluster's KillWait,
    the hold), told as a preemption by torchx-nb; the grace asked, which Slurm does not take,
    is said to be ignored in one line; a job that is not running is one line."""
    from tests.conftest import cli

    cluster = slurm_preempt_env
    sched = SlurmScheduler("torchx")
    with get_runner() as runner:
        handle = runner.run(_app(_FIRST_RUN_PREEMPTED.format(then="exit 0")), "slurm", {})
        _running(runner, handle)
        code, _, err = cli("preempt", handle, "--grace", "5")
        assert code == 0, err
        assert err.splitlines()[0] == (
            "torchx-nb: the grace of 5 s is ignored on slurm: Slurm takes no grace of ours: it"
            " sends SIGKILL after the cluster's KillWait (scontrol show config | grep KillWait)"
        )
        _held_then_released(cluster, runner, handle, restarts=1)
        status = runner.wait(handle, wait_interval=0.5, timeout=180)
        assert status is not None and status.state == AppState.SUCCEEDED, status
    desc = sched.describe(_job(handle))
    assert desc is not None
    assert [e.why for e in desc.preemptions] == ["torchx-nb preempt"]
    with pytest.raises(
        NotPreemptible, match=f"^Slurm job {_job(handle)} cannot be preempted: it is not"
    ):
        sched.preempt(_job(handle))


def test_a_requeued_job_says_until_when_slurm_holds_it(slurm_preempt_env: SlurmCluster) -> None:
    cluster = slurm_preempt_env
    sched = SlurmScheduler("torchx")
    with get_runner() as runner:
        handle = runner.run(_app("sleep 300"), "slurm", {})
        _running(runner, handle)
        sched.preempt(_job(handle))

        def held() -> object:
            d = sched.describe(_job(handle))
            return d if d is not None and d.msg.startswith("requeued: ") else None

        desc = wait_for(held, timeout=60, interval=0.5)
        until = job_fields(cluster, _job(handle))["StartTime"].split("T")[1]
        assert desc.msg == (  # type: ignore[attr-defined]
            f"requeued: Slurm holds it until {until} (BeginTime, about 2 minutes after each"
            " requeue), then it starts again"
        )
        runner.cancel(handle)


def test_a_job_is_sent_again_once_whoever_sends_it(slurm_env: SlurmCluster) -> None:
    """A watcher killed after its sbatch and before the job store kept the new id leaves the
    job in the queue; the watcher that takes its claim over asks ``submit_again`` again and
    gets that job back, not a second copy. The user's comment is kept before the mark, and the
    next one names the job it follows."""
    sched = SlurmScheduler("torchx")
    with get_runner() as runner:
        handle = runner.run(_app("sleep 300"), "slurm", {"comment": "mine"})
    first = _job(handle)
    sent: list[str] = []
    try:
        second = sched.submit_again(first)
        sent.append(second)
        assert sched.submit_again(first) == second  # found in the queue: not sent twice
        third = sched.submit_again(second)
        sent.append(third)
        assert third != second
        comments = dict(
            line.split("|", 1)
            for line in slurm_env.run("squeue", "-h", "-o", "%i|%k").stdout.splitlines()
        )
        assert comments[second] == f"mine torchx-nb: again of {first}"
        assert comments[third] == f"mine torchx-nb: again of {second}"
        # one job follows the first (other tests' jobs may share the cluster)
        assert [j for j, c in comments.items() if c.endswith(f"again of {first}")] == [second]
    finally:
        slurm_env.run("scancel", first, *sent)
