"""gcp_batch past GCP Batch's cap (a task's ``maxRetryCount`` ≤ 10, and a Spot preemption
spends one), against the loopback GCP Batch: a task preempted past its maxRetryCount fails the
job, and torchx_nb creates it again as ``ID-a2`` under the same handle."""

from __future__ import annotations

from tests.conftest import shell_app, wait_for
from tests.infra.gcp import GcpFake
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.gcp_batch import parse_app_id
from torchx_nb.schedulers.gcp_batch.spot import next_job_id
from torchx_nb.specs import AppState, parse_app_handle


def preempt_when_running(runner: object, gcp_env: GcpFake, handle: str) -> None:
    """Preempt task 0 of the handle's current GCP job once it runs."""
    from torchx_nb.runner import Runner

    assert isinstance(runner, Runner)

    def running() -> bool:
        status = runner.status(handle)
        return status is not None and status.state == AppState.RUNNING

    wait_for(running, 60)
    app_id = parse_app_handle(handle).app_id
    gcp_env.preempt_task("projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id)), 0)


def preemptions(runner: object, handle: str) -> int:
    """The job's preemptions once a status call kept what GCP Batch lists."""
    from torchx_nb.runner import Runner

    assert isinstance(runner, Runner)
    runner.status(handle)
    rec = runner.jobstore.get(handle)
    return rec.preemptions if rec is not None else 0


def test_a_job_preempted_past_max_retry_count_is_created_again_under_its_handle(
    gcp_env: GcpFake,
) -> None:
    """GCP's cap is met early here: max_preemptions=1 makes the task's maxRetryCount 1, and
    the job's limit is then raised to 20 in the store — as a job with the default limit of
    20 meets GCP's cap of 10, in 2 preemptions instead of 11."""
    project = "spot-again"
    gcp_env.timed_projects[project] = 3.0
    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 1}
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        first = runner.jobstore.get(handle)
        assert first is not None
        runner.jobstore.set_max_preemptions(handle, 20)
        preempt_when_running(runner, gcp_env, handle)  # retried by GCP (maxRetryCount 1)
        wait_for(lambda: preemptions(runner, handle) >= 1, 60)
        preempt_when_running(runner, gcp_env, handle)  # past maxRetryCount: the job FAILS
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        assert ended.msg.startswith("preempted at ") and "(Spot VM preempted)" in ended.msg
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.state == "SUCCEEDED"
        assert (rec.attempt, rec.preemptions, rec.failures) == (3, 2, 0)
        assert rec.app_id == f"{first.app_id}-a2"
        log = runner.attempt_log(handle)
        assert [(a.ended_why, a.app_id) for a in log.attempts] == [
            ("preempted", first.app_id),
            ("preempted", first.app_id),
            ("succeeded", rec.app_id),
        ]


def test_past_the_limit_the_job_is_not_created_again(gcp_env: GcpFake) -> None:
    project = "spot-limit"
    gcp_env.timed_projects[project] = 3.0
    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 1}
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        preempt_when_running(runner, gcp_env, handle)
        wait_for(lambda: preemptions(runner, handle) >= 1, 60)
        preempt_when_running(runner, gcp_env, handle)
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.FAILED, ended
        assert ended.msg.startswith("preempted 2 times (limit 1): preempted at ")
        rec = runner.jobstore.get(handle)
        assert rec is not None and not rec.app_id.endswith("-a2")


def test_the_next_job_id_keeps_gcp_s_rules() -> None:
    assert next_job_id("train-x1") == "train-x1-a2"
    assert next_job_id("train-x1-a9") == "train-x1-a10"
    long = next_job_id("t" * 62 + "-")
    assert len(long) <= 63 and long.endswith("-a2") and "--" not in long
