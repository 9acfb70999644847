"""aws_batch past Batch's cap (``attempts`` ≤ 10 in total, every reclaim spends one), against
moto_server: moto does not preempt, so describe is shown the first Batch job ended FAILED with
its last attempt's EC2 host terminated (a fake on top of moto's real job); torchx_nb submits it
again as ``NAME-a2`` under the same handle, and it runs in moto's container to SUCCEEDED."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import shell_app
from tests.infra.dockerd import DockerDaemon
from tests.infra.moto import MotoServer, make_queue
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.aws_batch import AwsBatchScheduler
from torchx_nb.schedulers.aws_batch_spot import (
    AGAIN_OF_TAG,
    PREEMPTIONS_TAG,
    RETRIES_TAG,
    ended_reclaimed,
    next_name,
)
from torchx_nb.specs import AppState, InvalidRunConfigException

_queues = itertools.count()
RECLAIM = "Host EC2 (instance i-0abc) terminated."


@pytest.fixture
def queue(aws_env: MotoServer) -> str:
    aws_env.use_docker(True)
    return make_queue(aws_env, f"spotq{next(_queues)}")


@pytest.fixture
def reclaimed_first(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """DescribeJobs as Batch says it of a job reclaimed on its last allowed attempt: the first
    native job of each handle (a name with no ``-aN``) reads FAILED, its one attempt's host
    terminated. Returns the names of the jobs DescribeJobs was asked about."""
    return reclaimed_after(monkeypatch, 0)


@pytest.fixture
def failed_then_reclaimed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """As ``reclaimed_first``, the program having failed on the attempt before."""
    return reclaimed_after(monkeypatch, 1)


def reclaimed_after(
    monkeypatch: pytest.MonkeyPatch, failed: int, only: str = "", name: str = ""
) -> list[str]:
    """The first native job of each handle (with ``only``, each whose id ends with it; with
    ``name``, the jobs of that name) reads FAILED after ``failed`` attempts of the program's
    failure, then one whose host was terminated."""
    asked: list[str] = []
    real = AwsBatchScheduler._describe_jobs

    def describe(self: AwsBatchScheduler, job_ids: list[str]) -> list[dict[str, Any]]:
        jobs = real(self, job_ids)
        out = []
        for job in jobs:
            asked.append(str(job["jobName"]))
            first = job["jobName"] == name if name else not re.search(r"-a\d+$", job["jobName"])
            if first and str(job["jobId"]).endswith(only):
                started = job.get("startedAt") or job.get("createdAt") or 1_000_000
                attempts = [
                    {
                        "startedAt": started + 1000 * i,
                        "stoppedAt": started + 1000 * i + 500,
                        "statusReason": "Essential container in task exited",
                        "container": {"exitCode": 3},
                    }
                    for i in range(failed)
                ]
                at = started + 1000 * failed
                attempts.append({"startedAt": at, "stoppedAt": at + 500, "statusReason": RECLAIM})
                job = {
                    **job,
                    "status": "FAILED",
                    "statusReason": RECLAIM,
                    "startedAt": started,
                    "stoppedAt": at + 500,
                    "attempts": attempts,
                }
            out.append(job)
        return out

    monkeypatch.setattr(AwsBatchScheduler, "_describe_jobs", describe)
    return asked


def test_a_job_reclaimed_past_batch_s_attempts_is_submitted_again_under_its_handle(
    queue: str,
    reclaimed_first: list[str],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
) -> None:
    app = shell_app("echo resumed", base_images["busybox"], mem_mb=128, retries=1)
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", {"queue": queue})
        first = runner.jobstore.get(handle)
        assert first is not None
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        assert ended.msg.startswith("preempted at ") and "EC2 host was terminated" in ended.msg
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.state == "SUCCEEDED"
        # one preemption counted, max_retries (1) unspent, the handle kept
        assert (rec.attempt, rec.preemptions, rec.failures) == (2, 1, 0)
        assert rec.app_id == next_name(first.app_id) == f"{first.app_id}-a2"
        assert rec.outputs == first.outputs  # the job definition's: kept across attempts
        log = runner.attempt_log(handle)
        assert [(a.n, a.ended_why, a.app_id) for a in log.attempts] == [
            (1, "preempted", first.app_id),
            (2, "succeeded", rec.app_id),
        ]
        assert any(n.endswith("-a2") for n in reclaimed_first)


def test_a_job_reclaimed_past_its_limit_fails_and_is_not_submitted_again(
    queue: str,
    reclaimed_first: list[str],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
) -> None:
    app = shell_app("echo resumed", base_images["busybox"], mem_mb=128)
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", {"queue": queue, "max_preemptions": 0})
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.FAILED, ended
        assert ended.msg.startswith("preempted 1 times (limit 0): preempted at ")
        assert "raise the limit with -cfg max_preemptions=N" in ended.msg
        rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.attempt) == ("FAILED", 1)
        assert not any(n.endswith("-a2") for n in reclaimed_first)


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The SubmitJob requests the scheduler sends (botocore checks them against the API's
    shapes before moto_server gets them)."""
    sent: list[dict[str, Any]] = []
    real = AwsBatchScheduler._call

    def spy(self: AwsBatchScheduler, what: str, fn: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", "") == "submit_job":
            sent.append(kwargs)
        return real(self, what, fn, **kwargs)

    monkeypatch.setattr(AwsBatchScheduler, "_call", spy)
    return sent


def test_a_job_submitted_again_keeps_what_is_left_of_max_retries(
    queue: str,
    failed_then_reclaimed: list[str],
    submitted: list[dict[str, Any]],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
) -> None:
    """With no ledger (no output_path) a Batch job's attempts are max_retries + 1, a reclaim
    spending one as a failure does. The program failed once (max_retries 1: spent), then the
    host was reclaimed on the last attempt: the job sent again has no retry left — only its
    reclaims are retried (before, it got Batch's attempts of the job definition again)."""
    app = shell_app("echo resumed", base_images["busybox"], mem_mb=128, retries=1)
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", {"queue": queue})
        first = runner.jobstore.get(handle)
        assert first is not None
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.app_id == f"{first.app_id}-a2"
    assert submitted[0]["tags"][RETRIES_TAG] == "1" and "retryStrategy" not in submitted[0]
    again = submitted[-1]
    assert again["jobName"].endswith("-a2") and len(submitted) == 2
    assert again["retryStrategy"] == {
        "attempts": 10,  # 1 + max_preemptions (20), within Batch's cap
        "evaluateOnExit": [
            {"onStatusReason": "Host EC2*", "action": "RETRY"},
            {"onStatusReason": "Your Spot Task was interrupted*", "action": "RETRY"},
            {"onExitCode": "171", "action": "EXIT"},
            {"onExitCode": "0", "action": "EXIT"},
            {"onStatusReason": "*", "action": "EXIT"},  # no retry of the program left
        ],
    }
    batch = boto3.client("batch")
    job = batch.describe_jobs(jobs=[jobs_named(batch, queue, again["jobName"])[0]])["jobs"][0]
    assert job["tags"][RETRIES_TAG] == "0" and job["tags"][PREEMPTIONS_TAG] == "20"


class Killed(BaseException):
    """The watcher's process dies here."""


def jobs_named(batch: Any, queue: str, name: str) -> list[str]:
    """The ids of the Batch jobs of ``queue`` named ``name``."""
    pages = batch.get_paginator("list_jobs").paginate(
        jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [name]}]
    )
    return [j["jobId"] for page in pages for j in page["jobSummaryList"] if j["jobName"] == name]


def test_a_job_submitted_again_by_a_watcher_that_died_before_keeping_it_is_not_sent_twice(
    queue: str,
    reclaimed_first: list[str],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watcher submits ``NAME-a2`` and dies before the job store keeps it; the watcher that
    takes its stale claim over finds ``NAME-a2`` in the queue and follows it (before, it
    submitted a second ``NAME-a2``: two copies running)."""
    from torchx_nb import attempt_store
    from torchx_nb.jobstore import JobStore

    real = JobStore.start_attempt

    def dies(*args: object, **kwargs: object) -> bool:
        raise Killed

    app = shell_app("echo resumed", base_images["busybox"], mem_mb=128)
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", {"queue": queue})
        first = runner.jobstore.get(handle)
        assert first is not None
        monkeypatch.setattr(JobStore, "start_attempt", dies)
        with pytest.raises(Killed):
            runner.wait(handle, wait_interval=0.3, timeout=60)
    batch = boto3.client("batch")
    name = next_name(first.app_id.partition(":")[2])
    assert len(jobs_named(batch, queue, name)) == 1  # sent, and not kept
    monkeypatch.setattr(JobStore, "start_attempt", real)
    monkeypatch.setattr(attempt_store, "CLAIM_SECONDS", 0.0)  # the claim is stale at once
    with get_runner() as runner:
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.app_id, rec.attempt) == (f"{queue}:{name}", 2)
    assert len(jobs_named(batch, queue, name)) == 1


def test_the_next_name_and_when_batch_will_not_run_it_again() -> None:
    assert next_name("train-x1") == "train-x1-a2"
    assert next_name("train-x1-a2") == "train-x1-a3"
    assert next_name("t" * 128) == "t" * 125 + "-a2" and len(next_name("t" * 128)) == 128
    reclaimed = {"startedAt": 1, "stoppedAt": 2, "statusReason": RECLAIM}
    failed = {"startedAt": 3, "stoppedAt": 4, "statusReason": "Essential container in task exited"}
    assert ended_reclaimed({"status": "FAILED", "attempts": [failed, reclaimed]})
    assert not ended_reclaimed({"status": "FAILED", "attempts": [reclaimed, failed]})
    assert not ended_reclaimed({"status": "SUCCEEDED", "attempts": [reclaimed]})
    assert not ended_reclaimed({"status": "RUNNING", "attempts": [reclaimed]})


def test_a_sweep_trial_reclaimed_past_the_cap_runs_again_with_its_own_values(
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
    submitted: list[dict[str, Any]],
    python_in_registry: str,
    registry: Any,
    docker_env: DockerDaemon,
    aws_env: MotoServer,
    tmp_path: Path,
) -> None:
    """A sweep's trials are children of one array job (``QUEUE:NAME:INDEX``); trial 1's host
    is reclaimed on its last allowed attempt: it is sent again as a job of its own,
    ``NAME-t1-a2``, with its index in ``TORCHX_NB_TRIAL_INDEX``, and resumes with its own
    values and result (before, it was sent as ``NAME-a2`` with no index: 'this array task has
    no index', and two trials' jobs would have had one name)."""
    reclaimed_after(monkeypatch, failed=0, only=":1")
    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.components.cell import cell
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    ws = tmp_path / "ws"
    ws.mkdir()
    mounts, path = host_python_mounts()
    source = "import os\nprint('trial lr', os.environ['TORCHX_PARAM_LR'], flush=True)\nlr * 10\n"
    cfg = [
        f"queue={queue},image_repo={registry.host}/batch/spot-sweeps,builder=registry,quiet=True"
    ]  # no output_path: moto never really preempts trial 1's first job, whose checkpoint
    # ledger would then call it lost (a failure), not preempted
    env = {"PATH": path, **aws_env.env}
    app = cell(source=source, image=python_in_registry, memMB=256, mounts=mounts, env=env)
    with get_runner() as runner:
        request = SweepRequest(
            RunRequest(app=app, scheduler="aws_batch", cfg=cfg, workspace=str(ws)),
            {"lr": [0.1, 0.2]},
        )
        sw = start(runner, request)
        assert sw.array
        statuses = sw.wait(timeout=240)
        assert [s.state if s else None for s in statuses] == [AppState.SUCCEEDED] * 2, [
            (
                h,
                [(a.n, a.app_id, a.ended_why) for a in runner.jobstore.attempts(h)],
                "".join(runner.log_lines(h, "cell", 0)),
            )
            for h in sw.handles
            if h
        ]
        handle = sw.handles[1]
        assert handle is not None
        rec = runner.jobstore.get(handle)
        array = handle.rsplit("/", 1)[1].rsplit(":", 1)[0]
        assert rec is not None and (rec.app_id, rec.attempt) == (f"{array}-t1-a2", 2)
        assert "trial lr 0.2" in "".join(runner.log_lines(handle, "cell", 0))
        first = runner.jobstore.get(sw.handles[0])  # type: ignore[arg-type]
        assert first is not None and first.attempt == 1  # not reclaimed: not sent again
    (again,) = [s for s in submitted if "arrayProperties" not in s]
    assert again["jobName"] == f"{array.partition(':')[2]}-t1-a2"
    child = jobs_named(boto3.client("batch"), queue, array.partition(":")[2])[0] + ":1"
    assert again["containerOverrides"]["environment"] == [
        {"name": "TORCHX_NB_TRIAL_INDEX", "value": "1"},
        {"name": "TORCHX_NB_TRIAL_FROM", "value": "TORCHX_NB_TRIAL_INDEX"},
        {"name": "TORCHX_NB_RECLAIMED", "value": f"{child}/1,{child}"},
    ]
    # the array's tags (a child has none of its own in moto): ours, the budget, the job before
    assert (
        again["tags"][AGAIN_OF_TAG].endswith(":1") and "torchx.pytorch.org/version" in again["tags"]
    )
    assert again["retryStrategy"]["attempts"] == 10 and again["tags"][RETRIES_TAG] == "0"


def test_a_reclaim_that_killed_the_container_without_sigterm_spends_no_retry(
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
    submitted: list[dict[str, Any]],
    python_in_registry: str,
    registry: Any,
    docker_env: DockerDaemon,
    aws_env: MotoServer,
    tmp_path: Path,
) -> None:
    """An EC2 host reclaimed without ECS stopping its container first: the program gets no
    SIGTERM, so its ledger entry still says ``running`` when the next attempt begins. The
    first job (max_retries 0) is killed (SIGKILL, in dockerd) once its ledger has its entry,
    and Batch's record says its host was terminated: the job sent again counts it a
    preemption, since with max_retries 0 nothing but a reclaim is run again (before: the
    program's failure — the next attempt exited 171, FAILED 'the program failed 1 times').
    The job sent again also names the reclaimed attempts (``TORCHX_NB_RECLAIMED``, in the
    multi-node job's ``nodeOverrides``: botocore checks the shape; moto does not apply node
    overrides, so what the runner does with it is tested in tests/apps/test_checkpoint.py)."""
    import json

    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.components.cell import cell

    killed: set[str] = set()
    real = AwsBatchScheduler._describe_jobs

    def describe(self: AwsBatchScheduler, job_ids: list[str]) -> list[dict[str, Any]]:
        out = []
        for job in real(self, job_ids):
            if job["jobId"] in killed and job["status"] == "FAILED":
                attempts = [{**a, "statusReason": RECLAIM} for a in job.get("attempts") or []]
                job = {**job, "statusReason": RECLAIM, "attempts": attempts}
            out.append(job)
        return out

    monkeypatch.setattr(AwsBatchScheduler, "_describe_jobs", describe)
    s3 = aws_env.client("s3")
    s3.create_bucket(
        Bucket="batch-reclaims", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    mounts, path = host_python_mounts()
    source = (
        "import os, time\n"
        "n, p = os.environ['TORCHX_NB_ATTEMPT'], os.environ['TORCHX_NB_PREEMPTIONS']\n"
        "print(f'attempt {n} preemptions {p}', flush=True)\n"
        "if n == '1':\n    time.sleep(600)\n"
        "int(n) * 10\n"
    )
    cfg = {
        "queue": queue,
        "image_repo": f"{registry.host}/batch/reclaims",
        "builder": "registry",
        "quiet": True,
        "output_path": "s3://batch-reclaims/runs",
    }
    env = {"PATH": path, **aws_env.env}
    app = cell(source=source, image=python_in_registry, memMB=256, mounts=mounts, env=env)
    batch = boto3.client("batch")
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", cfg, workspace=str(ws))
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.outputs
        key = f"{rec.outputs.removeprefix('s3://batch-reclaims/').rstrip('/')}"
        key += "/.torchx-nb/checkpoints/attempts.json"

        def ledger() -> list[dict[str, Any]]:
            try:
                body = s3.get_object(Bucket="batch-reclaims", Key=key)["Body"]
            except s3.exceptions.NoSuchKey:
                return []
            return list(json.loads(body.read()))

        (job_id,) = jobs_named(batch, queue, rec.app_id.partition(":")[2])
        deadline = time.monotonic() + 180
        while not ledger() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [e["why"] for e in ledger()] == ["running"]
        # moto names a job's container NAME-JOBID-NODE
        (container,) = [c for c in docker_env.client().containers.list() if job_id in c.name]
        killed.add(job_id)
        container.kill()  # SIGKILL: no SIGTERM reaches the program
        ended = runner.wait(handle, wait_interval=0.3, timeout=240)
        log = "".join(runner.log_lines(handle, "cell", 0))
        assert ended is not None and ended.state == AppState.SUCCEEDED, (ended, log)
        assert "attempt 2 preemptions 1" in log and "program failed" not in log, log
        assert [e["why"] for e in ledger()] == ["reclaimed", "ok"]
        rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.attempt, rec.preemptions, rec.failures) == (2, 1, 0)
    (again,) = [s for s in submitted if s["jobName"].endswith("-a2")]
    (node,) = again["nodeOverrides"]["nodePropertyOverrides"]
    assert node["targetNodes"] == "0:"
    assert node["containerOverrides"]["environment"] == [
        {"name": "TORCHX_NB_RECLAIMED", "value": f"{job_id}/1,{job_id}"}
    ]


#: SubmitJob's retryStrategy for a job with no program retry left: its reclaims only
RECLAIMS_ONLY = [
    {"onStatusReason": "Host EC2*", "action": "RETRY"},
    {"onStatusReason": "Your Spot Task was interrupted*", "action": "RETRY"},
    {"onExitCode": "171", "action": "EXIT"},
    {"onExitCode": "0", "action": "EXIT"},
    {"onStatusReason": "*", "action": "EXIT"},
]


def job_of(batch: Any, queue: str, name: str) -> dict[str, Any]:
    """DescribeJobs of the one job of ``queue`` named ``name``."""
    (job_id,) = jobs_named(batch, queue, name)
    return dict(batch.describe_jobs(jobs=[job_id])["jobs"][0])


@pytest.mark.parametrize(
    ("edit", "drop", "strategy"),
    [
        # the user's odd value, the other tag removed: what is left is unknown, so none is
        ({RETRIES_TAG: "lots"}, PREEMPTIONS_TAG, {"attempts": 1, "evaluateOnExit": RECLAIMS_ONLY}),
        # a number in another script: isdigit() said yes and int() failed, nothing was sent
        ({PREEMPTIONS_TAG: "²"}, "", {"attempts": 2, "evaluateOnExit": RECLAIMS_ONLY[:4]}),
    ],
)
def test_a_job_whose_budget_tags_were_edited_is_sent_again_with_no_more_than_it_had(
    queue: str,
    reclaimed_first: list[str],
    submitted: list[dict[str, Any]],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
    edit: dict[str, str],
    drop: str,
    strategy: dict[str, Any],
) -> None:
    """A job with no ledger whose tag ``torchx-nb/retries-left`` or ``max-preemptions`` the
    user edited or removed (``aws batch tag-resource``) is sent again with a retryStrategy of
    its own: a tag that is not a whole number counts 0 (before, the job definition's full
    max_retries came back when one tag was off, and a '²' failed the resubmission)."""
    app = shell_app("echo resumed", base_images["busybox"], mem_mb=128, retries=1)
    batch = boto3.client("batch")
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", {"queue": queue})
        first = runner.jobstore.get(handle)
        assert first is not None
        arn = job_of(batch, queue, first.app_id.partition(":")[2])["jobArn"]
        batch.tag_resource(resourceArn=arn, tags=edit)
        if drop:
            batch.untag_resource(resourceArn=arn, tagKeys=[drop])
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.app_id == f"{first.app_id}-a2"
    again = submitted[-1]
    assert len(submitted) == 2 and again["retryStrategy"] == strategy
    tags = job_of(batch, queue, again["jobName"])["tags"]
    left = strategy["attempts"] - 1
    assert (tags[RETRIES_TAG], tags[PREEMPTIONS_TAG]) == (str(left), "0")


@pytest.fixture
def still_queue(aws_env: MotoServer) -> Any:
    """A queue whose jobs moto ends SUCCEEDED without running them (for requests only)."""
    aws_env.use_docker(False)
    yield make_queue(aws_env, f"stillq{next(_queues)}")
    aws_env.use_docker(True)


def test_our_tags_are_not_the_user_s_to_give_and_a_ledger_job_ignores_them(
    still_queue: str, monkeypatch: pytest.MonkeyPatch, submitted: list[dict[str, Any]]
) -> None:
    """A user's tag (the AppDef's metadata) named like ours is refused in one line before
    anything is built or sent; one tagged on a job with a ledger (output_path) afterwards is
    ignored when it is sent again — the ledger counts its failures (before, it was taken
    in, and the tags' retries replaced the job definition's retryStrategy)."""
    reclaimed_after(monkeypatch, failed=0)
    app = shell_app("echo resumed", "busybox", mem_mb=128, retries=2)
    cfg = {"queue": still_queue, "output_path": "s3://spot-ledger/runs"}
    app.metadata = {"team": "ml", RETRIES_TAG: "9", PREEMPTIONS_TAG: "9"}
    with get_runner() as runner, pytest.raises(InvalidRunConfigException) as e:
        runner.run(app, "aws_batch", cfg)
    assert str(e.value) == (
        f"metadata '{PREEMPTIONS_TAG}', '{RETRIES_TAG}': tags starting with 'torchx-nb/' are"
        " torchx_nb's own on AWS Batch (a job's retry budget, the job it follows): rename them"
    )
    assert not submitted
    app.metadata = {"team": "ml"}
    sched = AwsBatchScheduler("torchx")
    app_id = sched.schedule(sched.submit_dryrun(app, cfg))
    batch = boto3.client("batch")
    first = job_of(batch, still_queue, app_id.partition(":")[2])
    batch.tag_resource(resourceArn=first["jobArn"], tags={RETRIES_TAG: "9", PREEMPTIONS_TAG: "9"})
    assert sched.submit_again(app_id) == f"{app_id}-a2"
    again = submitted[-1]
    assert "retryStrategy" not in again  # the job definition's: the ledger's budget
    assert again["tags"]["team"] == "ml" and again["tags"][AGAIN_OF_TAG] == first["jobId"]


def test_a_job_of_the_next_name_that_is_not_ours_is_passed_over(
    queue: str,
    reclaimed_first: list[str],
    submitted: list[dict[str, Any]],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
) -> None:
    """The user's own job named ``NAME-a2`` is in the queue when ``NAME`` is reclaimed past
    Batch's cap: it is not taken for the next attempt (it follows no job of ours); the next
    attempt is sent as ``NAME-a3`` and the handle follows it (before, the user's job was
    adopted and nothing was sent)."""
    app = shell_app("echo resumed", base_images["busybox"], mem_mb=128)
    batch = boto3.client("batch")
    with get_runner() as runner:
        handle = runner.run(app, "aws_batch", {"queue": queue})
        first = runner.jobstore.get(handle)
        assert first is not None
        name = first.app_id.partition(":")[2]
        mine = batch.register_job_definition(
            jobDefinitionName="users-own",
            type="container",
            containerProperties={
                "image": base_images["busybox"],
                "command": ["sh", "-c", "echo mine"],
                "resourceRequirements": [
                    {"type": "VCPU", "value": "1"},
                    {"type": "MEMORY", "value": "128"},
                ],
            },
        )
        users = batch.submit_job(
            jobName=f"{name}-a2", jobQueue=queue, jobDefinition=mine["jobDefinitionArn"]
        )["jobId"]
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.app_id, rec.attempt) == (f"{first.app_id}-a3", 2)
    (again,) = submitted[1:]
    assert again["jobName"] == f"{name}-a3"
    ours = job_of(batch, queue, f"{name}-a3")
    assert ours["tags"][AGAIN_OF_TAG] == job_of(batch, queue, name)["jobId"]
    assert jobs_named(batch, queue, f"{name}-a2") == [users]  # left as it was


def test_names_past_a9_near_128_characters_and_a_user_s_own_a5(
    still_queue: str, monkeypatch: pytest.MonkeyPatch, submitted: list[dict[str, Any]]
) -> None:
    """``-a9`` goes on as ``-a10``, within Batch's 128 characters, each name of a chain its
    own; a name of the user's that ends in ``-a5`` is not taken for our attempt 5
    (``mine-a5-a2``; before, ``mine-a6``), nor is an app named so (its job name ends with its
    random id); and five names taken by other jobs in a row are refused in one line."""
    chain = ["t" * 128]
    for _ in range(10):
        chain.append(next_name(chain[-1]))
    assert chain[1] == "t" * 125 + "-a2" and chain[9] == "t" * 124 + "-a10"
    assert chain[10] == "t" * 124 + "-a11"
    assert all(len(n) == 128 for n in chain) and len(set(chain)) == len(chain)
    assert next_name("x-a9") == "x-a10" and next_name("mine-a5", again=False) == "mine-a5-a2"
    batch = boto3.client("batch")
    sched = AwsBatchScheduler("torchx")
    app = shell_app("echo x", "busybox", name="train-a5", mem_mb=128)
    app_id = sched.schedule(sched.submit_dryrun(app, {"queue": still_queue}))
    definition = job_of(batch, still_queue, app_id.partition(":")[2])["jobDefinition"]
    batch.submit_job(jobName="mine-a5", jobQueue=still_queue, jobDefinition=definition)
    reclaimed_after(monkeypatch, failed=0, name="mine-a5")
    assert sched.submit_again(f"{still_queue}:mine-a5") == f"{still_queue}:mine-a5-a2"
    reclaimed_after(monkeypatch, failed=0)
    assert sched.submit_again(app_id) == f"{app_id}-a2"  # train-a5-<id>-a2
    assert app_id.partition(":")[2].startswith("train-a5-")
    for n in range(3, 8):
        batch.submit_job(
            jobName=f"{app_id.partition(':')[2]}-a{n}",
            jobQueue=still_queue,
            jobDefinition=definition,
        )
    reclaimed_after(monkeypatch, failed=0, name=f"{app_id.partition(':')[2]}-a2")
    sent = len(submitted)
    with pytest.raises(Exception) as refused:
        sched.submit_again(f"{app_id}-a2")
    names = ", ".join(f"{app_id.partition(':')[2]}-a{n}" for n in range(3, 8))
    # one line that names the way out: Batch cannot delete a job (before: "remove them")
    assert str(refused.value) == (
        f"queue '{still_queue}' already has jobs named {names} that do not follow"
        f" {app_id}-a2 (Batch cannot delete jobs): run the job again"
    )
    assert len(submitted) == sent


def test_a_store_of_the_user_s_own_keeps_the_budget_in_the_tags(
    still_queue: str, monkeypatch: pytest.MonkeyPatch, submitted: list[dict[str, Any]]
) -> None:
    """No output_path, the checkpoint store the user's own (``--env
    TORCHX_NB_CHECKPOINT_URL=s3://…``, as docs/spot.md says to): the runner keeps a ledger
    there, but without the job's max_retries it counts nothing against them, so the job's
    budget stays in its tags. max_retries 1, spent by a failure before the last attempt's host
    was reclaimed: the job sent again has no program retry left (before, the store's variable
    was taken for a ledger of ours, the tags were ignored, and the job definition's max_retries
    came back)."""
    reclaimed_after(monkeypatch, failed=1)
    app = shell_app("echo resumed", "busybox", mem_mb=128, retries=1)
    app.roles[0].env["TORCHX_NB_CHECKPOINT_URL"] = "s3://users-own/ckpt/run-1"
    sched = AwsBatchScheduler("torchx")
    app_id = sched.schedule(sched.submit_dryrun(app, {"queue": still_queue}))
    assert submitted[0]["tags"][RETRIES_TAG] == "1"
    assert sched.submit_again(app_id) == f"{app_id}-a2"
    again = submitted[-1]
    assert again["retryStrategy"] == {"attempts": 10, "evaluateOnExit": RECLAIMS_ONLY}
    assert (again["tags"][RETRIES_TAG], again["tags"][PREEMPTIONS_TAG]) == ("0", "20")
