"""aws_batch against moto_server, whose Batch runs each node as a real container on our dockerd."""

from __future__ import annotations

import getpass
import itertools
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shell_app, wait_for
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.moto import MotoServer, make_queue
from torchx_nb import specs
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.aws_batch import AwsBatchScheduler
from torchx_nb.specs import AppState
from torchx_nb.specs.log_line import Stream

_queues = itertools.count()


def validate(client: Any, operation: str, params: dict[str, Any]) -> None:
    """Check a request against botocore's service model, as boto3 would before sending it."""
    from botocore.validate import validate_parameters

    model = client.meta.service_model.operation_model(operation)
    validate_parameters(params, model.input_shape)


def app(image: str = "img", roles: int = 1, n: int = 2, **kw: Any) -> specs.AppDef:
    return specs.AppDef(
        "bt",
        metadata={"team": "ml"},
        roles=[
            specs.Role(
                f"r{i}",
                image,
                entrypoint="python",
                args=["-c", "print(1)"],
                num_replicas=n,
                resource=kw.get("resource", specs.Resource(cpu=2, gpu=1, memMB=2048)),
                env={"RANK0": specs.macros.rank0_env, "IDX": specs.macros.replica_id},
                max_retries=2,
                mounts=kw.get("mounts", []),
            )
            for i in range(roles)
        ],
    )


def test_dryrun_request_shape_and_validity() -> None:
    import boto3

    sched = AwsBatchScheduler("torchx", client=boto3.client("batch", region_name="us-west-2"))
    mounts = specs.parse_mounts(
        [
            "type=bind",
            "src=/data",
            "dst=/data",
            "readonly",
            "type=volume",
            "src=fs-123",
            "dst=/efs",
            "type=device",
            "src=/dev/fuse",
        ]
    )
    a = app(roles=2, n=3, resource=specs.named_resources["aws_p4d.24xlarge"], mounts=mounts)
    info = sched.submit_dryrun(
        a,
        {"queue": "q", "share_id": "team1", "priority": 5, "job_role_arn": "arn:aws:iam::1:role/j"},
    )
    job = info.request
    validate(sched.client, "RegisterJobDefinition", job.job_def)
    validate(sched.client, "SubmitJob", job.submit_args())
    props = job.job_def["nodeProperties"]
    assert props["numNodes"] == 6 and props["mainNode"] == 0
    assert [r["targetNodes"] for r in props["nodeRangeProperties"]] == ["0:0", "1:2", "3:5"]
    c0 = props["nodeRangeProperties"][0]["container"]
    env0 = {e["name"]: e["value"] for e in c0["environment"]}
    assert env0["TORCHX_RANK0_HOST"] == "localhost" and env0["TORCHX_ROLE_NAME"] == "r0"
    assert env0["RANK0"] == "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
    assert env0["IDX"] == "$AWS_BATCH_JOB_NODE_INDEX"
    env1 = {
        e["name"]: e["value"] for e in props["nodeRangeProperties"][1]["container"]["environment"]
    }
    assert "TORCHX_RANK0_HOST" not in env1
    assert {r["type"]: r["value"] for r in c0["resourceRequirements"]} == {
        "VCPU": "96",
        "GPU": "8",
        "MEMORY": str(1152 * int(1024 * 0.96)),
    }
    assert c0["instanceType"] == "p4d.24xlarge" and c0["jobRoleArn"].endswith("role/j")
    assert len(c0["linuxParameters"]["devices"]) == 4 + 1
    assert c0["volumes"][1]["efsVolumeConfiguration"] == {"fileSystemId": "fs-123"}
    assert c0["mountPoints"][0] == {
        "sourceVolume": "mount_0",
        "containerPath": "/data",
        "readOnly": True,
    }
    assert job.job_def["retryStrategy"]["attempts"] == 3
    assert job.job_def["tags"]["team"] == "ml" and job.job_def["schedulingPriority"] == 5
    assert job.submit_args()["shareIdentifier"] == "team1"
    assert job.name.startswith("bt-team1-")


def test_validation_errors() -> None:
    sched = AwsBatchScheduler("torchx", client=object())
    opts = sched.resolve_opts  # the Runner resolves once: _validate gets the typed options
    with pytest.raises(specs.InvalidRunConfigException, match="at most 5 roles"):
        sched._validate(app(roles=6), "aws_batch", opts({"queue": "q"}))
    with pytest.raises(specs.InvalidRunConfigException, match="priority needs share_id"):
        sched._validate(app(), "aws_batch", opts({"queue": "q", "priority": 3}))
    with pytest.raises(specs.InvalidRunConfigException, match="no sooner than 60 seconds"):
        sched._validate(app(), "aws_batch", opts({"queue": "q", "timeout": "59"}))
    sched._validate(app(), "aws_batch", opts({"queue": "q", "timeout": 60}))
    sched._validate(app(), "aws_batch")  # TorchX's call, with no options: the app's checks
    with pytest.raises(specs.InvalidRunConfigException, match="needs memory"):
        sched.submit_dryrun(app(resource=specs.Resource(cpu=1, gpu=0, memMB=0)), {"queue": "q"})
    with pytest.raises(specs.InvalidRunConfigException, match="missing required option 'queue'"):
        sched.submit_dryrun(app(), {})


@pytest.fixture
def queue(aws_env: MotoServer) -> str:
    aws_env.use_docker(True)
    return make_queue(aws_env, f"q{next(_queues)}")


CELL = """import os
print("node", os.environ.get("TORCHX_ROLE_NAME"), os.environ.get("TORCHX_RANK0_HOST", "-"),
      open("data.csv").read().strip())
"""


def test_two_node_cell_job_runs_in_containers(
    queue: str,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.csv").write_text("from-the-workspace")
    cfg = {
        "queue": queue,
        "image_repo": f"{registry.host}/batch/jobs",
        "builder": "registry",
        "quiet": True,
    }
    with get_runner() as runner:
        a = cell(source=CELL, image=python_in_registry, memMB=256)
        a.roles[0].num_replicas = 2
        handle = runner.run(a, "aws_batch", cfg, workspace=str(ws))
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.scheduler == "aws_batch"
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        assert [r.state for r in status.roles[0].replicas] == [AppState.SUCCEEDED] * 2
        assert status.ui_url and "#jobs/mnp-job/" in status.ui_url
        logs = "".join(runner.log_lines(handle, "cell", 0))
        assert "node cell localhost from-the-workspace" in logs
        assert "node cell - from-the-workspace" in logs
        desc = runner.describe(handle)
        assert desc is not None and desc.roles[0].num_replicas == 2
        # as in TorchX, the scheduler's describe keeps the env our request set on each node group
        from torchx_nb.specs import parse_app_handle

        native = runner.get_scheduler("aws_batch").describe(parse_app_handle(handle).app_id)
        assert native is not None
        env = native.roles[0].env
        assert env["TORCHX_ROLE_IDX"] == "0" and env["TORCHX_ROLE_NAME"] == "cell"
        assert env["TORCHX_RANK0_HOST"] == "localhost"
        assert runner.jobstore.get(handle).state == "SUCCEEDED"  # type: ignore[union-attr]


def test_failure_cancel_and_list(
    queue: str, base_images: dict[str, str], docker_env: DockerDaemon, aws_env: MotoServer
) -> None:
    sched = AwsBatchScheduler("torchx")
    bb = base_images["busybox"]

    failing = sched.submit(shell_app("echo bad; exit 3", bb, mem_mb=128), {"queue": queue})
    wait_for(lambda: sched.describe(failing).state == AppState.FAILED, 60)  # type: ignore[union-attr]
    sleeper = sched.submit(shell_app("sleep 60", bb, mem_mb=128), {"queue": queue})
    wait_for(lambda: sched.describe(sleeper).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
    sched.cancel(sleeper)
    wait_for(lambda: sched.describe(sleeper).state == AppState.CANCELLED, 60)  # type: ignore[union-attr]
    said = sched.describe(sleeper).msg  # type: ignore[union-attr]
    assert re.fullmatch(rf"it was cancelled by {getpass.getuser()} with .+ \(pid \d+\)", said), said
    aws_env.client("batch").register_job_definition(
        jobDefinitionName="foreign",
        type="container",
        containerProperties={"image": bb, "command": ["true"], "vcpus": 1, "memory": 128},
    )
    aws_env.client("batch").submit_job(jobName="not-ours", jobQueue=queue, jobDefinition="foreign")
    listed = {a.app_id: a.state for a in sched.list({"queue": queue})}
    assert listed == {failing: AppState.FAILED, sleeper: AppState.CANCELLED}
    everywhere = {a.app_id for a in sched.list()}
    assert {failing, sleeper} <= everywhere
    assert sched.describe(f"{queue}:no-such-job") is None
    lines = list(sched.log_iter(failing, "r"))
    assert lines == ["bad\n"]
    from datetime import datetime, timedelta, timezone

    later = datetime.now(timezone.utc) + timedelta(hours=1)
    earlier = datetime.now(timezone.utc) - timedelta(hours=1)
    assert list(sched.log_iter(failing, "r", since=later)) == []
    assert list(sched.log_iter(failing, "r", until=earlier)) == []
    assert list(sched.log_iter(failing, "r", since=earlier, until=later)) == ["bad\n"]
    assert list(sched.log_iter(failing, "r", regex="nothing")) == []
    with pytest.raises(ValueError, match="one combined log"):
        sched.log_iter(failing, "r", streams=Stream.STDERR)


def test_clear_errors(aws_env: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    sched = AwsBatchScheduler("torchx")
    a = specs.AppDef(
        "x", roles=[specs.Role("r", "img", entrypoint="true", resource=specs.Resource(1, 0, 128))]
    )
    with pytest.raises(specs.TorchxNbError, match="cannot submit to queue 'nope'"):
        sched.submit(a, {"queue": "nope"})
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(specs.TorchxNbError, match="no AWS region; set AWS_DEFAULT_REGION"):
        AwsBatchScheduler("torchx").submit(a, {"queue": "q"})
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(specs.TorchxNbError, match="no AWS credentials"):
        AwsBatchScheduler("torchx").submit(a, {"queue": "q"})


def test_cell_results_and_outputs_come_back_through_s3(
    queue: str,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
    aws_env: MotoServer,
    tmp_path: Path,
) -> None:
    """``-cfg output_path=s3://…``: each node uploads $TORCHX_OUTPUT_DIR to PREFIX/JOB/ (moto's
    S3) with the boto3 it has (this machine's Python, lent through bind mounts as volumes)."""
    from tests.infra.dockerd import host_python_mounts
    from tests.result_checks import (
        RAISE_CELL,
        RESULT_CELL,
        assert_raises_remotely,
        assert_round_trip,
        result_workspace,
    )

    s3 = aws_env.client("s3")
    s3.create_bucket(
        Bucket="batch-results", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    ws = result_workspace(tmp_path)
    mounts, path = host_python_mounts()
    cfg = {
        "queue": queue,
        "image_repo": f"{registry.host}/batch/results",
        "builder": "registry",
        "quiet": True,
        "output_path": "s3://batch-results/runs",
    }
    env = {"PATH": path, **aws_env.env}
    with get_runner() as runner:
        ok = runner.run(
            cell(source=RESULT_CELL, image=python_in_registry, memMB=256, mounts=mounts, env=env),
            "aws_batch",
            cfg,
            workspace=str(ws),
        )
        bad = runner.run(
            cell(source=RAISE_CELL, image=python_in_registry, memMB=256, mounts=mounts, env=env),
            "aws_batch",
            cfg,
            workspace=str(ws),
        )
        assert_round_trip(runner, ok, tmp_path / "dl")
        assert_raises_remotely(runner, bad)
        rec = runner.jobstore.get(ok)
        assert rec is not None and rec.outputs
        job_name = ok.rsplit(":", 1)[1]
        assert rec.outputs == f"s3://batch-results/runs/{job_name}/"
    with pytest.raises(Exception, match="output_path 'gs://b/p' is not an object-store URL"):
        AwsBatchScheduler("torchx").submit_dryrun(
            cell(source="1"), {"queue": queue, "output_path": "gs://b/p"}
        )


def test_a_sweep_is_one_array_job_whose_children_run_in_containers(
    queue: str,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
    aws_env: MotoServer,
    tmp_path: Path,
) -> None:
    """One submit_job with arrayProperties (moto runs each child as a container); each trial
    is a child ``PARENT:INDEX`` with its own state, log and result (uploaded to S3)."""
    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    aws_env.client("s3").create_bucket(
        Bucket="batch-sweeps", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    mounts, path = host_python_mounts()
    source = (
        "import os\n"
        "print('trial lr', os.environ['TORCHX_PARAM_LR'], flush=True)\n"
        "if lr > 0.5:\n"
        "    raise ValueError('lr too high')\n"
        "lr * 10\n"
    )
    cfg = [
        f"queue={queue},image_repo={registry.host}/batch/sweeps,builder=registry,quiet=True",
        "output_path=s3://batch-sweeps/runs",
    ]
    env = {"PATH": path, **aws_env.env}
    batch = aws_env.client("batch")
    # the cell lends this machine's Python (boto3 for the upload) to the image through volumes
    app = cell(source=source, image=python_in_registry, memMB=256, mounts=mounts, env=env)
    with get_runner() as runner:
        request = SweepRequest(
            RunRequest(app=app, scheduler="aws_batch", cfg=cfg, workspace=str(ws)),
            {"lr": [0.1, 0.2, 0.9]},
        )
        sw = start(runner, request)
        assert sw.array
        children = [h.rsplit("/", 1)[1] for h in sw.handles]  # type: ignore[union-attr]
        assert [c.rsplit(":", 1)[1] for c in children] == ["0", "1", "2"]
        statuses = sw.wait(timeout=180)
        assert [s.state if s else None for s in statuses] == [
            AppState.SUCCEEDED,
            AppState.SUCCEEDED,
            AppState.FAILED,
        ], statuses
        frame = sw.results()
        assert list(frame["result"][:2]) == [1.0, 2.0]
        assert frame["error"][2] == "raised ValueError: lr too high"
        assert "trial lr 0.2" in "".join(runner.log_lines(sw.handles[1], "cell", 0))  # type: ignore[arg-type]
        parent_app = children[0].rsplit(":", 1)[0]
        parent_id = runner.get_scheduler("aws_batch")._job_id(parent_app)  # type: ignore[attr-defined]
    # one array job holds the three trials
    (parent,) = batch.describe_jobs(jobs=[parent_id])["jobs"]
    assert parent["arrayProperties"]["size"] == 3
    assert ":" not in parent_id  # the children are PARENT:INDEX


def test_a_job_held_runnable_says_which_compute_environment_holds_it(aws_env: MotoServer) -> None:
    """moto's Batch keeps a compute environment's state and limits but never reads them when it
    runs a job, so the job's RUNNABLE is given here; everything else (the queue, its compute
    environments, their state and maxvCpus) is read from moto through the scheduler."""
    import uuid

    from tests.infra.moto import make_queue
    from torchx_nb.schedulers.aws_batch import create_scheduler
    from torchx_nb.schedulers.aws_batch_runnable import runnable_reason

    queue = make_queue(aws_env, f"held-{uuid.uuid4().hex[:8]}")
    batch = aws_env.client("batch")
    batch.update_compute_environment(computeEnvironment=f"{queue}-ce", state="DISABLED")
    sched = create_scheduler("torchx")
    job = {
        "status": "RUNNABLE",
        "jobQueue": queue,
        "createdAt": (time.time() - 300) * 1000,
        "container": {"resourceRequirements": [{"type": "VCPU", "value": "4"}]},
    }
    said = runnable_reason(job, sched._environments)
    assert said == (
        f"RUNNABLE for 5 min: {queue}-ce is DISABLED: enable it (aws batch"
        f" update-compute-environment --compute-environment {queue}-ce --state ENABLED)"
    )
    batch.update_compute_environment(computeEnvironment=f"{queue}-ce", state="ENABLED")
    assert runnable_reason(job, sched._environments) is None  # nothing found that holds it
    fresh = {**job, "createdAt": time.time() * 1000}
    assert runnable_reason(fresh, sched._environments) is None  # within the grace period


def test_a_job_too_big_for_its_environment_can_never_start() -> None:
    from torchx_nb.schedulers.aws_batch_runnable import job_vcpus, runnable_reason

    job = {
        "status": "RUNNABLE",
        "jobQueue": "arn:aws:batch:us-west-2:1:job-queue/q",
        "createdAt": 0,
        "nodeProperties": {
            "nodeRangeProperties": [
                {
                    "targetNodes": "0:0",
                    "container": {"resourceRequirements": [{"type": "VCPU", "value": "8"}]},
                },
                {
                    "targetNodes": "1:3",
                    "container": {"resourceRequirements": [{"type": "VCPU", "value": "8"}]},
                },
            ]
        },
    }
    assert job_vcpus(job) == 32
    envs = [
        {
            "computeEnvironmentName": "small",
            "state": "ENABLED",
            "status": "VALID",
            "computeResources": {"maxvCpus": 16},
        }
    ]
    assert runnable_reason(job, lambda q: envs, now=600) == (
        "RUNNABLE for 10 min: small allows at most 16 vCPUs (maxvCpus) and the job needs 32:"
        " it can never start there; raise maxvCpus or ask for less"
    )
    broken = [
        {
            "computeEnvironmentName": "bad",
            "status": "INVALID",
            "statusReason": "CLIENT_ERROR - role",
        }
    ]
    assert "bad is INVALID (CLIENT_ERROR - role)" in (
        runnable_reason(job, lambda q: broken, now=600) or ""
    )
    assert runnable_reason(job, lambda q: [], now=600) == (
        "RUNNABLE: the queue q has no compute environment: add one to the queue"
    )


def test_no_instance_type_that_fits_the_jobs_memory_or_gpus() -> None:
    from torchx_nb.schedulers.aws_batch_runnable import runnable_reason

    def job(mem: int, gpu: int) -> dict[str, object]:
        reqs = [{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": str(mem)}]
        if gpu:
            reqs.append({"type": "GPU", "value": str(gpu)})
        return {
            "status": "RUNNABLE",
            "jobQueue": "q",
            "createdAt": 0,
            "container": {"resourceRequirements": reqs},
        }

    def envs(*types: str) -> list[dict[str, object]]:
        return [
            {
                "computeEnvironmentName": "ce",
                "state": "ENABLED",
                "status": "VALID",
                "computeResources": {"maxvCpus": 256, "instanceTypes": list(types)},
            }
        ]

    assert runnable_reason(job(4096, 1), lambda q: envs("m5.xlarge", "c5.2xlarge"), now=600) == (
        "RUNNABLE for 10 min: in ce a node needs 1 GPUs and its instance types (m5.xlarge,"
        " c5.2xlarge) have at most 0: it can never start there; add a larger instance type or"
        " ask for less"
    )
    too_big = runnable_reason(job(200_000, 0), lambda q: envs("m5.xlarge"), now=600)
    assert too_big is not None and "a node needs 200000 MiB of memory" in too_big
    assert runnable_reason(job(4096, 1), lambda q: envs("p3.2xlarge"), now=600) is None
    assert runnable_reason(job(4096, 1), lambda q: envs("optimal"), now=600) is None


def test_a_notebook_job_comes_back_executed_from_s3(
    queue: str,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
    aws_env: MotoServer,
    tmp_path: Path,
) -> None:
    """A notebook job on AWS Batch (moto, containers in dockerd, built without a daemon): the
    executed notebook is uploaded to the output path and ``job.notebook()`` fetches it."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.components.notebook import notebook_app, notebook_program
    from torchx_nb.notebook.handle import JobHandle

    s3 = aws_env.client("s3")
    s3.create_bucket(
        Bucket="batch-notebooks", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    cells = [new_code_cell("n = 0", metadata={"tags": ["parameters"]}), new_code_cell("n * 7")]
    nbformat.write(new_notebook(cells=cells), ws / "nightly.ipynb")
    program = notebook_program(str(ws / "nightly.ipynb"), str(ws), {"n": 6})
    mounts, path = host_python_mounts()
    app = notebook_app(
        program, image=python_in_registry, env={"PATH": path, **aws_env.env}, mounts=mounts
    )
    app.roles[0].resource = specs.Resource(cpu=1, gpu=0, memMB=256)
    cfg = {
        "queue": queue,
        "image_repo": f"{registry.host}/batch/notebooks",
        "builder": "registry",
        "quiet": True,
        "output_path": "s3://batch-notebooks/runs",
    }
    with get_runner() as runner:
        job = JobHandle(
            runner.run(app, "aws_batch", cfg, workspace=str(ws), packages="none"), runner
        )
        status = job.wait(timeout=180, interval=1)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        nb = nbformat.read(job.notebook(tmp_path / "back"), 4)
    assert nb.cells[2].outputs[0]["data"]["text/plain"] == "42"
    assert (tmp_path / "back" / "nightly.executed.ipynb").is_file()


def test_who_cancelled_is_said_ours_or_someone_elses_terminate(
    queue: str, base_images: dict[str, str], docker_env: DockerDaemon, aws_env: MotoServer
) -> None:
    """Two running jobs: one cancelled with torchx_nb (Batch keeps who asked in the terminate
    reason), one terminated outside torchx_nb with a reason of its own (``aws batch
    terminate-job``): both CANCELLED, each saying who; a job that failed by itself stays
    FAILED."""
    import getpass
    import re

    from tests.conftest import cli
    from torchx_nb.schedulers.aws_batch_status import cancel_ending

    bb = base_images["busybox"]
    with get_runner() as runner:
        ours, theirs = (
            runner.run(shell_app("sleep 60", bb, mem_mb=128), "aws_batch", {"queue": queue})
            for _ in range(2)
        )
        for handle in (ours, theirs):
            wait_for(lambda h=handle: runner.status(h).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
        code, _, err = cli("cancel", ours)
        assert code == 0, err
        sched = runner.get_scheduler("aws_batch")
        assert isinstance(sched, AwsBatchScheduler)
        job_id = sched._job_id(theirs.rsplit("/", 1)[1])
        aws_env.client("batch").terminate_job(jobId=job_id, reason="Stopped by the on-call")
        cancelled = runner.wait(ours, wait_interval=0.2, timeout=60)
        stopped = runner.wait(theirs, wait_interval=0.2, timeout=60)
    assert cancelled is not None and cancelled.state == AppState.CANCELLED
    user = getpass.getuser()
    assert re.fullmatch(
        rf"it was cancelled by {user} with torchx-nb cancel \(pid \d+\)",
        cancelled.msg,
    ), cancelled.msg
    assert stopped is not None and stopped.state == AppState.CANCELLED
    assert stopped.msg == (
        "it was cancelled outside torchx_nb (Batch's TerminateJob or CancelJob) with the"
        " reason 'Stopped by the on-call'"
    )
    (rep,) = [r for rs in stopped.roles for r in rs.replicas]
    assert rep.state == AppState.CANCELLED and rep.ending == stopped.msg.removeprefix("it ")
    failed = {"status": "FAILED", "statusReason": "Essential container in task exited"}
    assert cancel_ending(failed, "cancelled by torchx_nb") is None  # Batch's own: a failure


def test_a_failure_with_a_reason_off_the_list_is_not_called_a_cancel(
    queue: str, base_images: dict[str, str], docker_env: DockerDaemon, aws_env: MotoServer
) -> None:
    """A job whose container exited 3 and whose reason is one Batch gives that is not on the
    list (ECS could not assume the instance role, as DescribeJobs says it) stays FAILED with
    exit code 3 — it was called 'cancelled outside torchx_nb', CANCELLED. moto keeps no reason
    for a failed job; a TerminateJob after its end writes one (Batch's own words) without
    changing its status or exit code."""
    from tests.conftest import cli

    reason = (
        "ECS was unable to assume the role 'arn:aws:iam::123456789012:role/ecsInstanceRole'"
        " that was provided for this task. Please verify that the role being passed has the"
        " proper trust relationship and permissions"
    )
    bb = base_images["busybox"]
    with get_runner() as runner:
        handle = runner.run(shell_app("exit 3", bb, mem_mb=128), "aws_batch", {"queue": queue})
        ended = runner.wait(handle, wait_interval=0.2, timeout=90)
        assert ended is not None and ended.state == AppState.FAILED, ended
        sched = runner.get_scheduler("aws_batch")
        assert isinstance(sched, AwsBatchScheduler)
        job_id = sched._job_id(handle.rsplit("/", 1)[1])
        aws_env.client("batch").terminate_job(jobId=job_id, reason=reason)
        (job,) = aws_env.client("batch").describe_jobs(jobs=[str(job_id)])["jobs"]
        assert job["status"] == "FAILED" and job["statusReason"] == reason, job
        status = sched.describe(handle.rsplit("/", 1)[1])
    assert status is not None and status.state == AppState.FAILED, status
    assert status.msg == reason
    (rep,) = [r for rs in status.roles_statuses for r in rs.replicas]
    assert rep.state == AppState.FAILED and rep.exit_code == 3 and not rep.ending, rep
    code, out, err = cli("status", handle)
    assert code == 0, err
    assert "FAILED" in out and "cancelled" not in out, out


@pytest.mark.parametrize(
    "reason",
    [
        # DescribeJobs' statusReason of jobs Batch failed itself (ECS's and Fargate's words)
        "ECS was unable to assume the role 'arn:aws:iam::1:role/ecsInstanceRole' that was"
        " provided for this task.",
        "Your Spot Task was interrupted.",
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested",
        "InternalError: an internal error occurred",
        "Essential container in pod exited",
    ],
)
def test_batch_s_own_reasons_are_failures(reason: str) -> None:
    from torchx_nb.schedulers.aws_batch_status import cancel_ending

    job = {"status": "FAILED", "statusReason": reason, "startedAt": 1}
    assert cancel_ending(job, "cancelled by torchx_nb") is None


def test_a_terminate_reason_on_a_container_that_exited_by_itself_is_no_cancel() -> None:
    from torchx_nb.schedulers.aws_batch_status import cancel_ending

    job = {"status": "FAILED", "statusReason": "stop please", "startedAt": 1}
    said = cancel_ending({**job, "container": {"exitCode": 137}}, "cancelled by torchx_nb")
    assert said and "outside torchx_nb" in said
    assert cancel_ending({**job, "container": {"exitCode": 3}}, "cancelled by torchx_nb") is None
    assert cancel_ending({**job, "startedAt": None}, "cancelled by torchx_nb") == (
        "was cancelled while it waited outside torchx_nb (Batch's TerminateJob or CancelJob)"
        " with the reason 'stop please'"
    )


def test_who_a_terminate_reason_names_is_one_clean_line() -> None:
    """Anyone who may terminate the job writes its reason: one that starts like ours cannot
    add a line, colour a terminal or run to 1,000 characters in the status."""
    from torchx_nb.schedulers.aws_batch_status import cancel_ending

    reason = "cancelled by torchx_nb: mallory\x1b[2J\nState: SUCCEEDED" + "y" * 900
    said = cancel_ending({"status": "FAILED", "statusReason": reason}, "cancelled by torchx_nb")
    assert said is not None and said.startswith("was cancelled by mallory State: SUCCEEDEDyyy")
    assert "\n" not in said and "\x1b" not in said and len(said) < 260, said


def _rules_against_the_model(client: Any, strategy: dict[str, Any]) -> None:
    """Each evaluateOnExit rule field by field against botocore's EvaluateOnExit shape."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("batch")
    shape = model.shape_for("EvaluateOnExit")
    assert 1 <= strategy["attempts"] <= 10 and len(strategy["evaluateOnExit"]) <= 5
    for rule in strategy["evaluateOnExit"]:
        for field, value in rule.items():
            assert field in shape.members, field
            member = shape.members[field]
            if member.enum:
                assert value in member.enum, (field, value)
            assert len(value) <= member.metadata.get("max", 512)
            # Batch's globs: letters, digits, spaces, periods and colons; '*' only at the end
            assert "*" not in value[:-1], value
    validate(
        client,
        "RegisterJobDefinition",
        {"jobDefinitionName": "x", "type": "container", "retryStrategy": strategy},
    )


def test_a_reclaimed_host_is_retried_and_the_program_only_per_max_retries() -> None:
    import boto3

    sched = AwsBatchScheduler("torchx", client=boto3.client("batch", region_name="us-west-2"))
    # max_retries 2, a ledger in the output path: Batch's attempts cover both, capped at 10
    info = sched.submit_dryrun(app(), {"queue": "q", "output_path": "s3://b/p"})
    strategy = info.request.job_def["retryStrategy"]
    _rules_against_the_model(sched.client, strategy)
    assert strategy == {
        "attempts": 10,
        "evaluateOnExit": [
            {"onStatusReason": "Host EC2*", "action": "RETRY"},
            {"onStatusReason": "Your Spot Task was interrupted*", "action": "RETRY"},
            {"onExitCode": "171", "action": "EXIT"},
            {"onExitCode": "0", "action": "EXIT"},
        ],
    }
    env = {
        e["name"]: e["value"]
        for e in info.request.job_def["nodeProperties"]["nodeRangeProperties"][0]["container"][
            "environment"
        ]
    }
    assert env["TORCHX_NB_ATTEMPT_ENV"] == "AWS_BATCH_JOB_ATTEMPT"
    assert env["TORCHX_NB_MAX_RETRIES"] == "2" and env["TORCHX_NB_MAX_PREEMPTIONS"] == "20"
    assert env["TORCHX_NB_CHECKPOINT_URL"] == f"s3://b/p/{info.request.name}/.torchx-nb/checkpoints"
    assert '"onStatusReason": "Host EC2*"' in str(info)  # the dry run shows the rules
    # no retries: only a reclaim is retried, up to max_preemptions
    one = app()
    for role in one.roles:
        role.max_retries = 0
    strategy = sched.submit_dryrun(one, {"queue": "q", "max_preemptions": 3}).request.job_def[
        "retryStrategy"
    ]
    _rules_against_the_model(sched.client, strategy)
    assert strategy["attempts"] == 4
    assert strategy["evaluateOnExit"][0] == {"onStatusReason": "Host EC2*", "action": "RETRY"}
    assert strategy["evaluateOnExit"][-1] == {"onStatusReason": "*", "action": "EXIT"}
    assert len(strategy["evaluateOnExit"]) == 5  # Batch's most
    # retries but no ledger to count them apart: max_retries + 1 attempts, as before
    strategy = sched.submit_dryrun(app(), {"queue": "q"}).request.job_def["retryStrategy"]
    assert strategy["attempts"] == 3 and len(strategy["evaluateOnExit"]) == 4


def test_spot_says_in_one_line_when_the_queue_has_no_spot_compute_environment(
    aws_env: MotoServer,
) -> None:
    import uuid

    from torchx_nb.schedulers.aws_batch import create_scheduler

    queue = make_queue(aws_env, f"od-{uuid.uuid4().hex[:8]}")
    sched = create_scheduler("torchx")
    said = str(sched.submit_dryrun(app(), {"queue": queue, "spot": True}))
    assert said.splitlines()[0] == (
        f"spot: queue {queue!r} has no SPOT compute environment (types: UNMANAGED); on AWS"
        " Batch spot is the queue's: give -cfg queue=Q of a queue with a SPOT or FARGATE_SPOT one"
    )
    assert "has no SPOT" not in str(sched.submit_dryrun(app(), {"queue": queue}))
    # a queue with a managed SPOT compute environment says nothing
    batch = aws_env.client("batch")
    ec2 = aws_env.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"sg-{queue}", Description="d", VpcId=vpc)["GroupId"]
    iam = aws_env.client("iam")
    role = iam.get_role(RoleName="torchx-nb-batch")["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName=f"p-{queue}")["InstanceProfile"]
    ce = batch.create_compute_environment(
        computeEnvironmentName=f"{queue}-spot",
        type="MANAGED",
        state="ENABLED",
        computeResources={
            "type": "SPOT",
            "minvCpus": 0,
            "maxvCpus": 4,
            "instanceTypes": ["optimal"],
            "subnets": [subnet],
            "securityGroupIds": [sg],
            "instanceRole": profile["Arn"],
            "bidPercentage": 100,
            "spotIamFleetRole": role,
        },
        serviceRole=role,
    )
    spot_queue = f"{queue}-s"
    batch.create_job_queue(
        jobQueueName=spot_queue,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce["computeEnvironmentArn"]}],
    )
    assert "has no SPOT" not in str(sched.submit_dryrun(app(), {"queue": spot_queue, "spot": True}))


def test_describe_lists_each_reclaimed_host_as_a_preemption() -> None:
    """A DescribeJobs job (its attempts checked against botocore's AttemptDetail shape) whose
    first attempt's host was terminated and whose second succeeded: SUCCEEDED, 1 preemption
    with when the second attempt started; a program failure's attempt is none."""
    import boto3
    import botocore.session

    detail = botocore.session.get_session().get_service_model("batch").shape_for("AttemptDetail")
    attempts = [
        {
            "startedAt": 1_000_000,
            "stoppedAt": 1_060_000,
            "statusReason": "Host EC2 (instance i-0abc) terminated.",
            "container": {"exitCode": 143},
        },
        {
            "startedAt": 1_100_000,
            "stoppedAt": 1_130_000,
            "statusReason": "Essential container in task exited",
            "container": {"exitCode": 1},
        },
        {"startedAt": 1_200_000, "stoppedAt": 1_260_000, "container": {"exitCode": 0}},
    ]
    for attempt in attempts:
        assert set(attempt) <= set(detail.members)
    sched = AwsBatchScheduler("torchx", client=boto3.client("batch", region_name="us-west-2"))
    job = {
        "jobId": "j-1",
        "jobName": "bt",
        "status": "SUCCEEDED",
        "startedAt": 1_000_000,
        "stoppedAt": 1_260_000,
        "attempts": attempts,
        "container": {"image": "img", "command": ["python"], "environment": []},
    }
    desc = sched._to_response("q:bt", job)
    assert desc.state == AppState.SUCCEEDED
    assert [(p.at, p.resumed_at) for p in desc.preemptions] == [(1060.0, 1100.0)]
    assert desc.preemptions[0].why == "spot capacity reclaimed: its EC2 host was terminated"
    # on Fargate Spot the attempt's reason is ECS's stopped reason: a preemption too, retried
    # by its own rule (it was a program failure, spending max_retries)
    attempts[0]["statusReason"] = "Your Spot Task was interrupted."
    desc = sched._to_response("q:bt", job)
    assert [(p.at, p.resumed_at) for p in desc.preemptions] == [(1060.0, 1100.0)]
    assert (
        desc.preemptions[0].why == "spot capacity reclaimed: its Fargate Spot task was interrupted"
    )
    job["status"], job["attempts"] = "FAILED", attempts[:1]
    assert sched._to_response("q:bt", job).ended_preempted
