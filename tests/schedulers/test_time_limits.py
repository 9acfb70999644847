"""A job that hits its time limit is explained: its card names the limit and how to raise it.
(Slurm's TIMEOUT is in test_slurm_endings.py, on the real cluster.) Against the loopback GCP
Batch server, which ends a task past its maxRunDuration as GCP does (exit code 50005), and the
loopback Kubernetes cluster, whose kubelet stops a pod at its activeDeadlineSeconds; moto
stops a Batch attempt at its timeout; SageMaker's MaxRuntimeExceeded is a recorded answer."""

from __future__ import annotations

import time

from tests.conftest import shell_app
from tests.infra.gcp import GcpFake
from tests.infra.kube import KubeFake
from tests.infra.moto import make_queue
from torchx_nb.runner import get_runner
from torchx_nb.specs.api import AppState


def test_a_gcp_batch_task_past_its_max_run_duration(
    gcp_env: GcpFake, base_images: dict[str, str]
) -> None:
    with get_runner() as runner:
        handle = runner.run(
            shell_app("echo started; sleep 300", base_images["busybox"]),
            "gcp_batch",
            {"max_run_duration": "3s"},
        )
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.FAILED, status
        (card,) = runner.failure_cards(handle, status)
    assert card.headline() == (
        "r/0 was stopped at its time limit of 0:03 (maxRunDuration) (exit code 50005)"
    )
    assert card.next_step == "raise the limit with -cfg max_run_duration (e.g. 2h, 90m)"
    assert "next: raise the limit with -cfg max_run_duration" in card.text()


def test_a_gcp_time_limit_of_a_day_or_more_is_said_whole() -> None:
    """google-cloud-batch gives ``maxRunDuration`` as a ``timedelta``, whose ``.seconds`` is
    the part within one day: a 25 h limit was said as "of 1:00:00", a 2-day one not at all.
    A job as the library builds it, with GCP's own exit code for it."""
    from datetime import timedelta

    from google.cloud import batch_v1

    from torchx_nb.schedulers.gcp_batch.describe import MAX_RUN_EXIT, explain_exit
    from torchx_nb.specs.api import ReplicaStatus

    for limit, said in ((timedelta(hours=25), "25:00:00"), (timedelta(days=2), "48:00:00")):
        job = batch_v1.Job(
            task_groups=[batch_v1.TaskGroup(task_spec=batch_v1.TaskSpec(max_run_duration=limit))]
        )
        rep = ReplicaStatus(0, AppState.FAILED, "r", "task-0", exit_code=MAX_RUN_EXIT)
        explain_exit(rep, job)
        assert rep.ending == f"was stopped at its time limit of {said} (maxRunDuration)"


def test_a_kubernetes_pod_past_its_active_deadline(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    """A cluster policy puts ``activeDeadlineSeconds`` on every pod (torchx_nb sets none): the
    kubelet stops the pod there (phase Failed, reason DeadlineExceeded)."""
    kube_env.active_deadline = 3
    try:
        with get_runner() as runner:
            handle = runner.run(
                shell_app("echo started; sleep 300", base_images["busybox"]),
                "kubernetes",
                {"api": "indexed"},
            )
            status = runner.wait(handle, wait_interval=0.5, timeout=120)
            assert status is not None and status.state == AppState.FAILED, status
            (card,) = runner.failure_cards(handle, status)
    finally:
        kube_env.active_deadline = None
    assert card.headline() == (
        "r/0 was stopped at its time limit of 0:03 (the pod's activeDeadlineSeconds)"
        " (exit code 137, SIGKILL)"
    )
    assert card.next_step.startswith("the limit is set on the pods by the cluster's policy")


class _Recorded:
    """A SageMaker client answering DescribeTrainingJob with a recorded answer (moto keeps
    every job's SecondaryStatus at Completed, so a stop at MaxRuntimeInSeconds is written out
    as SageMaker gives it)."""

    meta = type("Meta", (), {"region_name": "us-west-2"})()

    def __init__(self, answer: dict[str, object]) -> None:
        self.answer = answer

    def describe_training_job(self, TrainingJobName: str) -> dict[str, object]:
        return {"TrainingJobName": TrainingJobName, **self.answer}


def test_a_sagemaker_job_stopped_at_its_max_runtime_failed() -> None:
    from datetime import datetime, timezone

    from torchx_nb.schedulers.aws_sagemaker import AwsSageMakerScheduler

    answer = {
        "TrainingJobStatus": "Stopped",
        "SecondaryStatus": "MaxRuntimeExceeded",
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "ResourceConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large"},
        "AlgorithmSpecification": {"TrainingImage": "img"},
        "TrainingStartTime": datetime(2026, 11, 28, 1, tzinfo=timezone.utc),
        "TrainingEndTime": datetime(2026, 11, 28, 2, tzinfo=timezone.utc),
    }
    sched = AwsSageMakerScheduler("torchx", client=_Recorded(answer))
    desc = sched.describe("train-1")
    assert desc is not None and desc.state == AppState.FAILED  # not CANCELLED: nobody stopped it
    (replica,) = desc.roles_statuses[0].replicas
    assert replica.ending == "was stopped at its time limit of 1:00:00 (MaxRuntimeInSeconds)"
    assert replica.next_step == "raise the limit with -cfg max_run=SECONDS (up to 28 days)"


def test_an_aws_batch_attempt_past_its_timeout(
    base_images: dict[str, str], docker_env: object, aws_env: object
) -> None:
    """``-cfg timeout=60`` (Batch's attemptDurationSeconds; 60 s is its least) reaches Batch:
    moto stops the container there, as Batch does. moto gives no statusReason then, so the
    card's words are checked on Batch's own answer (recorded) below."""
    from tests.infra.moto import MotoServer
    from torchx_nb.schedulers.aws_batch_status import time_limit

    assert isinstance(aws_env, MotoServer)
    aws_env.use_docker(True)
    queue = make_queue(aws_env, "q-timeout")
    started = time.monotonic()
    with get_runner() as runner:
        handle = runner.run(
            shell_app("echo started; sleep 300", base_images["busybox"], mem_mb=128),
            "aws_batch",
            {"queue": queue, "timeout": 60},
        )
        status = runner.wait(handle, wait_interval=1, timeout=240)
    assert status is not None and status.state == AppState.FAILED, status
    assert 60 <= time.monotonic() - started < 200
    recorded = {
        "status": "FAILED",
        "statusReason": "Job attempt duration exceeded timeout",
        "timeout": {"attemptDurationSeconds": 3600},
    }
    assert time_limit(recorded) == (
        "was stopped at its time limit of 1:00:00 (attemptDurationSeconds)",
        "raise the limit with -cfg timeout=SECONDS",
    )
    assert time_limit({"status": "FAILED", "statusReason": "Essential container exited"}) is None


def test_an_aws_batch_timeout_under_a_minute_is_one_line_before_anything() -> None:
    import pytest

    from torchx_nb.schedulers.aws_batch import AwsBatchScheduler
    from torchx_nb.specs.api import InvalidRunConfigException

    sched = AwsBatchScheduler("torchx")
    app = shell_app("true", "busybox")
    with pytest.raises(InvalidRunConfigException, match=r"^timeout=30: AWS Batch stops"):
        # the Runner resolves once: _validate gets the typed options
        sched._validate(app, "aws_batch", sched.resolve_opts({"queue": "q", "timeout": 30}))
    job = sched.submit_dryrun(app, {"queue": "q", "timeout": 90}).request  # type: ignore[arg-type]
    assert job.submit_args()["timeout"] == {"attemptDurationSeconds": 90}
