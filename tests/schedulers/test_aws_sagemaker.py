"""aws_sagemaker against moto_server (create, describe, list, logs) and botocore's models."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.infra.dockerd import DockerDaemon, Registry, free_port, host_python
from tests.infra.moto import MotoServer
from torchx_nb import specs
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.aws_common import AwsError
from torchx_nb.schedulers.aws_sagemaker import AwsSageMakerScheduler
from torchx_nb.specs import AppState

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def validate(client: Any, operation: str, params: dict[str, Any]) -> None:
    from botocore.validate import validate_parameters

    validate_parameters(params, client.meta.service_model.operation_model(operation).input_shape)


def app() -> specs.AppDef:
    return specs.AppDef(
        "train",
        metadata={"team": "ml"},
        roles=[
            specs.Role(
                "trainer",
                "REGISTRY/img:1",
                entrypoint="python",
                args=["train.py", "--lr=1"],
                env={"A": "1"},
            )
        ],
    )


ALL_OPTIONS: dict[str, Any] = {
    "role": ROLE,
    "instance_type": "ml.g5.xlarge",
    "instance_count": 2,
    "user": "me",
    "keep_alive_period_in_seconds": 600,
    "volume_size": 100,
    "volume_kms_key": "vk",
    "max_run": 3600,
    "input_mode": "FastFile",
    "output_path": "s3://b/out",
    "output_kms_key": "ok",
    "base_job_name": "exp",
    "tags": {"project": "p"},
    "subnets": ["s-1"],
    "security_group_ids": ["sg-1"],
    "model_uri": "s3://b/model",
    "model_channel_name": "weights",
    "metric_definitions": {"loss": "loss=([0-9.]+)"},
    "encrypt_inter_container_traffic": True,
    "use_spot_instances": True,
    "max_wait": 7200,
    "checkpoint_s3_uri": "s3://b/ckpt",
    "checkpoint_local_path": "/opt/ckpt",
    "debugger_hook_config": True,
    "enable_sagemaker_metrics": True,
    "enable_network_isolation": True,
    "disable_profiler": True,
    "environment": {"B": "2", "HF_TOKEN": "hf_secret"},
    "max_retry_attempts": 2,
    "hyperparameters": {"epochs": "3"},
    "container_log_level": 20,
    "training_repository_access_mode": "Vpc",
    "training_repository_credentials_provider_arn": "arn:aws:lambda:x",
    "disable_output_compression": True,
    "enable_infra_check": True,
}


def test_every_option_maps_onto_create_training_job() -> None:
    import boto3

    sched = AwsSageMakerScheduler(
        "torchx", client=boto3.client("sagemaker", region_name="us-west-2")
    )
    info = sched.submit_dryrun(app(), ALL_OPTIONS)
    req = info.request.request
    validate(sched.client, "CreateTrainingJob", req)
    assert req["TrainingJobName"].startswith("exp-") and len(req["TrainingJobName"]) <= 63
    assert req["AlgorithmSpecification"] == {
        "TrainingImage": "REGISTRY/img:1",
        "TrainingInputMode": "FastFile",
        "ContainerEntrypoint": [
            "/bin/sh",
            "-c",
            'eval "${TORCHX_NB_SM_BOOT_0}${TORCHX_NB_SM_BOOT_1}"',
            "torchx-nb",
            "python",
        ],
        "ContainerArguments": ["train.py", "--lr=1"],
        "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        "EnableSageMakerMetricsTimeSeries": True,
        "TrainingImageConfig": {
            "TrainingRepositoryAccessMode": "Vpc",
            "TrainingRepositoryAuthConfig": {
                "TrainingRepositoryCredentialsProviderArn": "arn:aws:lambda:x"
            },
        },
    }
    assert req["ResourceConfig"] == {
        "InstanceType": "ml.g5.xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 100,
        "VolumeKmsKeyId": "vk",
        "KeepAlivePeriodInSeconds": 600,
    }
    assert req["OutputDataConfig"] == {
        "S3OutputPath": "s3://b/out",
        "KmsKeyId": "ok",
        "CompressionType": "NONE",
    }
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
    assert req["VpcConfig"] == {"Subnets": ["s-1"], "SecurityGroupIds": ["sg-1"]}
    assert req["InputDataConfig"][0]["ChannelName"] == "weights"
    assert req["CheckpointConfig"] == {"S3Uri": "s3://b/ckpt", "LocalPath": "/opt/ckpt"}
    assert req["HyperParameters"] == {"epochs": "3", "sagemaker_container_log_level": "20"}
    assert req["Environment"]["A"] == "1" and req["Environment"]["B"] == "2"
    assert req["Environment"]["TORCHX_JOB_ID"].startswith("aws_sagemaker://torchx/exp-")
    tags = {t["Key"]: t["Value"] for t in req["Tags"]}
    assert (
        tags["team"] == "ml" and tags["project"] == "p" and tags["torchx.pytorch.org/user"] == "me"
    )
    assert req["EnableManagedSpotTraining"] and req["EnableNetworkIsolation"]
    assert req["EnableInterContainerTrafficEncryption"]
    assert req["DebugHookConfig"] == {"S3OutputPath": "s3://b/out"}
    assert req["ProfilerConfig"] == {"DisableProfiler": True}
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert req["InfraCheckConfig"] == {"EnableInfraCheck": True}
    assert "hf_secret" not in repr(info)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"source_dir": "."}, "source_dir does not apply"),
        ({"git_config": {"repo": "x"}}, "git_config does not apply"),
        ({"dependencies": ["a"]}, "dependencies does not apply"),
        ({"code_location": "s3://x"}, "code_location does not apply"),
        ({"max_wait": 10}, "max_wait only applies with use_spot_instances"),
        (
            {"spot": True, "use_spot_instances": False},
            r"^spot=True and use_spot_instances=False disagree \(one is the other's alias\):"
            " give only one of them$",
        ),
        (
            {"spot": True, "max_run": 3600, "max_wait": 600},
            r"^max_wait=600 is less than max_run=3600: max_wait covers the wait for spot capacity"
            r" and the run, so give max_wait=3600 or more \(or a smaller max_run\)$",
        ),
        ({"subnets": ["s"]}, "subnets and security_group_ids go together"),
        ({"role": "arn:aws:iam::1:user/me"}, "is not an IAM role ARN"),
        ({"role": "bad role name!"}, "neither an IAM role name nor an ARN"),
        ({"instance_type": "m5.large"}, "not a SageMaker instance type: use e.g."),
        ({"instance_count": 0}, "instance_count must be 1 or more"),
    ],
)
def test_refused_options(extra: dict[str, Any], message: str) -> None:
    sched = AwsSageMakerScheduler("torchx", client=object())
    cfg = {"role": ROLE, "instance_type": "ml.m5.large", **extra}
    with pytest.raises(specs.InvalidRunConfigException, match=message):
        sched._pre_build_validate(app(), "aws_sagemaker", sched.resolve_opts(cfg))


def test_an_argument_over_256_characters_is_refused() -> None:
    sched = AwsSageMakerScheduler("torchx", client=object())
    long_app = app()
    long_app.roles[0].args = ["x" * 257]
    with pytest.raises(specs.InvalidRunConfigException, match="over SageMaker's limit of 256"):
        sched._validate(long_app, "aws_sagemaker", {})


def test_stop_request_shape() -> None:
    """moto has no stop_training_job (HTTP 500, NotImplemented), so cancel is checked with
    botocore's Stubber on a real client: the exact request, validated against the model."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("sagemaker", region_name="us-west-2")
    sched = AwsSageMakerScheduler("torchx", client=client)
    from datetime import datetime

    from botocore.stub import ANY

    arn = "arn:aws:sagemaker:us-west-2:123456789012:training-job/job-1"
    described = {
        "TrainingJobName": "job-1",
        "TrainingJobArn": arn,
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/m"},
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ResourceConfig": {"VolumeSizeInGB": 1},
        "StoppingCondition": {},
        "CreationTime": datetime(2026, 1, 1),
    }
    tags = {"ResourceArn": arn, "Tags": [{"Key": "torchx-nb/stopped-by", "Value": ANY}]}
    with Stubber(client) as stub:  # who asked is tagged first: StopTrainingJob keeps no reason
        stub.add_response("describe_training_job", described, {"TrainingJobName": "job-1"})
        stub.add_response("add_tags", {}, tags)
        stub.add_response("stop_training_job", {}, {"TrainingJobName": "job-1"})
        sched._cancel_existing("job-1")
        stub.assert_no_pending_responses()


def test_create_describe_list_and_logs_in_moto(
    aws_env: MotoServer,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text("print('hi')\n")
    with get_runner() as runner:
        handle = runner.run(
            cell(source="import train\n", image=python_in_registry),
            "aws_sagemaker",
            {
                "role": ROLE,
                "instance_type": "ml.m5.large",
                "builder": "registry",
                "image_repo": f"{registry.host}/sm/jobs",
                "quiet": True,
            },
            workspace=str(ws),
        )
        job_name = handle.rsplit("/", 1)[1]
        status = runner.status(handle)
        assert status is not None and status.state == AppState.SUCCEEDED
        assert status.ui_url and f"#/jobs/{job_name}" in status.ui_url
        desc = runner.describe(handle)
        assert desc is not None
        sm = aws_env.client("sagemaker")
        created = sm.describe_training_job(TrainingJobName=job_name)
        assert created["AlgorithmSpecification"]["TrainingImage"].startswith(
            f"{registry.host}/sm/jobs@sha256:"
        )
        runner_arg, script_arg = created["AlgorithmSpecification"]["ContainerArguments"]
        assert runner_arg == ".torchx-nb/cell_main.py" and script_arg.startswith(".torchx-cell-")
        assert (
            created["OutputDataConfig"]["S3OutputPath"] == "s3://sagemaker-us-west-2-123456789012/"
        )

        sm.create_training_job(
            TrainingJobName="foreign-job",
            RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": "s3://b/"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 60},
        )
        listed = {a.app_id for a in runner.list("aws_sagemaker")}
        assert job_name in listed and "foreign-job" not in listed

        logs = aws_env.client("logs")
        group = "/aws/sagemaker/TrainingJobs"
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_group(logGroupName=group)
        stream = f"{job_name}/algo-1-1700000000"
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        now = int(time.time() * 1000)
        logs.put_log_events(
            logGroupName=group,
            logStreamName=stream,
            logEvents=[
                {"timestamp": now, "message": "epoch 1 loss=0.5"},
                {"timestamp": now + 1, "message": "epoch 2 loss=0.25"},
            ],
        )
        assert list(runner.log_lines(handle, "sagemaker")) == [
            "epoch 1 loss=0.5\n",
            "epoch 2 loss=0.25\n",
        ]
        assert list(runner.log_lines(handle, "sagemaker", regex="epoch 2")) == [
            "epoch 2 loss=0.25\n"
        ]
        assert runner.status("aws_sagemaker://torchx/no-such-job") is None
        import boto3
        from botocore.config import Config

        no_retry = boto3.client("sagemaker", config=Config(retries={"max_attempts": 1}))
        with pytest.raises(AwsError, match="cannot stop"):
            AwsSageMakerScheduler("torchx", client=no_retry)._cancel_existing(job_name)


ALL_REDUCE = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.environ['SM_CURRENT_HOST']}"
      f" sum {t.item()}")
open("/opt/ml/model/rank-%d" % dist.get_rank(), "w").write(str(t.item()))
dist.destroy_process_group()
"""
# Each worker leaves through os._exit: with torch 2.13 (CPU) the C++ teardown at interpreter
# exit sometimes aborts a gloo worker (SIGABRT, "terminate called without an active
# exception") after its work is done, and its peer then waits forever.
EXIT = "import sys\nsys.stdout.flush()\nos._exit({code})\n"


def _python_mounts() -> tuple[dict[str, dict[str, str]], str]:
    """``host_python`` as docker volumes for the SageMaker runner."""
    prefixes, path = host_python()
    return {p: {"bind": p, "mode": "ro"} for p in prefixes}, path


@pytest.mark.parametrize("fail", [False, True], ids=["all_reduce", "failure"])
def test_two_instance_ddp_cell_runs_as_sagemaker_starts_it(
    fail: bool,
    aws_env: MotoServer,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    mounts, path = _python_mounts()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "helper.py").write_text("VALUE = 'from the workspace'\n")
    source = "import helper\nprint(helper.VALUE)\n" + ALL_REDUCE
    source += EXIT.format(code=7 if fail else 0)
    app = cell(
        source=source,
        image=python_in_registry,
        j="2x1",
        rdzv_port=free_port(),  # host networking: another test run may use the default
        env={"PATH": path, "GLOO_SOCKET_IFNAME": "lo", "LOGLEVEL": "WARNING"},
    )
    with get_runner() as runner:
        info = runner.dryrun(
            app,
            "aws_sagemaker",
            {
                "role": ROLE,
                "instance_type": "ml.m5.large",
                "image_repo": f"{registry.host}/sm/ddp",
                "builder": "registry",
                "quiet": True,
            },
            workspace=str(ws),
            build_workspace=True,
        )
    request = info.request.request
    assert request["ResourceConfig"]["InstanceCount"] == 2
    from tests.infra.sagemaker_runner import run_training_job

    run = run_training_job(
        docker_env.client(), request, tmp_path / "sm", extra_mounts=mounts, timeout=60
    )
    logs = "\n".join(i.logs for i in run.instances)
    assert "from the workspace" in logs, logs
    assert "rank 0 of 2 on algo-" in logs and "rank 1 of 2 on algo-" in logs, logs
    assert logs.count("sum 3.0") == 2, logs
    if fail:
        assert run.status == "Failed"
        # torchrun exits 1 when a worker fails; the worker's own code is in its report
        assert re.fullmatch(
            r"bash exited with code 1 on algo-[12] \(replica [01]\)\n", run.failure_reason
        ), run
        assert "exitcode: 7" in logs.replace("exitcode  :", "exitcode:"), logs
    else:
        assert run.status == "Completed", logs
        assert {i.host for i in run.instances} == {"algo-1", "algo-2"}
        assert sorted(p.name for p in (tmp_path / "sm").glob("algo-*/model/rank-*")) == [
            "rank-0",
            "rank-1",
        ]


def test_the_dry_run_writes_nothing_and_is_what_schedule_sends(aws_env: MotoServer) -> None:
    """The dry run reads (the role, the account for the default bucket) and writes nothing;
    ``schedule`` sends its request unchanged, after creating the default bucket it names."""
    s3 = aws_env.client("s3")
    before = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    with get_runner() as runner:
        info = runner.dryrun(
            app(),
            "aws_sagemaker",
            {"role": ROLE, "instance_type": "ml.m5.large", "hyperparameters": {"lr": "0.1"}},
        )
        request = info.request.request
        assert request["OutputDataConfig"]["S3OutputPath"] == (
            "s3://sagemaker-us-west-2-123456789012/"
        )
        assert {b["Name"] for b in s3.list_buckets()["Buckets"]} == before
        runner.schedule(info)
    created = aws_env.client("sagemaker").describe_training_job(
        TrainingJobName=request["TrainingJobName"]
    )
    # (moto keeps these fields of the request; it drops others, such as Environment)
    for key in ("RoleArn", "ResourceConfig", "OutputDataConfig", "HyperParameters"):
        assert created[key] == request[key], key
    spec = created["AlgorithmSpecification"]
    assert spec["TrainingImage"] == request["AlgorithmSpecification"]["TrainingImage"]
    assert "sagemaker-us-west-2-123456789012" in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_cell_results_come_back_from_the_default_bucket_beside_sagemakers_model(
    aws_env: MotoServer,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """No output_path: the default bucket SageMaker Studio's SDK uses. The container uploads
    $TORCHX_OUTPUT_DIR to ``s3://sagemaker-REGION-ACCOUNT/JOB/`` (boto3 of this machine's Python,
    lent through volumes), beside SageMaker's own ``output/model.tar.gz``, which
    ``outputs()`` lists and ``download()`` fetches too."""
    from tests.infra.sagemaker_runner import run_training_job, upload_model
    from tests.result_checks import RESULT_CELL, result_workspace
    from torchx_nb.notebook.handle import JobHandle

    mounts, path = _python_mounts()
    ws = result_workspace(tmp_path)
    source = RESULT_CELL.replace(
        "Score(tnb_wsmod", "open('/opt/ml/model/w.txt', 'w').write('m')\nScore(tnb_wsmod"
    )
    app = cell(source=source, image=python_in_registry, env={"PATH": path, **aws_env.env})
    with get_runner() as runner:
        info = runner.dryrun(
            app,
            "aws_sagemaker",
            {
                "role": ROLE,
                "instance_type": "ml.m5.large",
                "image_repo": f"{registry.host}/sm/results",
                "builder": "registry",
                "quiet": True,
            },
            workspace=str(ws),
            build_workspace=True,
        )
        handle = runner.schedule(info, workspace=str(ws))
        request = info.request.request
        name = request["TrainingJobName"]
        assert runner.jobstore.get(handle).outputs == (  # type: ignore[union-attr]
            f"s3://sagemaker-us-west-2-123456789012/{name}/"
        )
        run = run_training_job(docker_env.client(), request, tmp_path / "sm", extra_mounts=mounts)
        assert run.status == "Completed", run.instances[0].logs
        upload_model(aws_env.client("s3"), request, tmp_path / "sm")
        job = JobHandle(handle, runner)
        value = job.result(timeout=60)
        assert (value.acc, value.rank) == (0.9, 0)
        assert job.outputs() == ["ckpt/weights.bin", "metrics.json", "output/model.tar.gz"]
        folder = job.download(tmp_path / "dl")
        import tarfile

        with tarfile.open(folder / "output" / "model.tar.gz") as tar:
            assert tar.extractfile("./w.txt").read() == b"m"  # type: ignore[union-attr]


# DescribeTrainingJob as SageMaker answers it while a job waits, trains and fails (recorded
# shapes: moto fixes SecondaryStatus at "Completed", so these are written out here)
_WAITING = {
    "TrainingJobStatus": "InProgress",
    "SecondaryStatus": "Starting",
    "AlgorithmSpecification": {"TrainingImage": "123.dkr.ecr.us-west-2.amazonaws.com/base:2.5"},
    "SecondaryStatusTransitions": [
        {"Status": "Starting", "StatusMessage": "Preparing the instances for training"}
    ],
}
_PULLING = {
    **_WAITING,
    "SecondaryStatus": "DownloadingTrainingImage",
    "SecondaryStatusTransitions": [
        {"Status": "Starting", "StatusMessage": "Preparing the instances for training"},
        {
            "Status": "DownloadingTrainingImage",
            "StatusMessage": "Downloading the training image",
        },
    ],
}
_OOM = {
    "TrainingJobStatus": "Failed",
    "SecondaryStatus": "Failed",
    "FailureReason": "AlgorithmError: Please use an instance type with more memory, or reduce"
    " the size of job data processed on an instance.",
}
_NO_CAPACITY = {
    "TrainingJobStatus": "Failed",
    "SecondaryStatus": "Failed",
    "FailureReason": "CapacityError: Unable to provision requested ML compute capacity.",
}


def test_sagemakers_status_is_said_in_words() -> None:
    from torchx_nb.schedulers.sagemaker_status import out_of_memory, status_message

    assert status_message(_WAITING) == (
        "Starting: SageMaker is starting the job (Preparing the instances for training)"
    )
    assert status_message(_PULLING) == (
        "DownloadingTrainingImage: pulling the image"
        " 123.dkr.ecr.us-west-2.amazonaws.com/base:2.5 (Downloading the training image)"
    )
    assert status_message(_OOM).endswith(
        "; it ran out of memory: a larger -cfg instance_type, or less per instance"
    )
    assert out_of_memory(_OOM) and not out_of_memory(_NO_CAPACITY)
    assert "no capacity for the instance type" in status_message(_NO_CAPACITY)
    assert status_message({"SecondaryStatus": "Completed"}) == "Completed"


def test_a_failed_replicas_exit_code_comes_from_the_failure_reason(
    aws_env: MotoServer, docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """Two instances run as SageMaker starts them (real containers); replica 1 exits 3. Our
    bootstrap writes that into /opt/ml/output/failure, which SageMaker reports as the job's
    FailureReason: the status of the job (moto cannot fail one, so its DescribeTrainingJob
    answer is the request with that real reason) gives replica 1 exit code 3, and its card
    says so; after the live view the job store keeps it (tests/schedulers/test_gone_jobs.py)."""
    from tests.conftest import shell_app
    from tests.infra.sagemaker_runner import run_training_job
    from torchx_nb.specs.failure import FailureCard

    app = shell_app(
        'if [ "$TORCHX_REPLICA_ID" = 1 ]; then exit 3; fi', base_images["busybox"], replicas=2
    )
    sched = AwsSageMakerScheduler("torchx")
    info = sched.submit_dryrun(
        app, {"role": ROLE, "instance_type": "ml.m5.large", "image_repo": "unused/x"}
    )
    request = info.request.request
    run = run_training_job(docker_env.client(), request, tmp_path / "sm", timeout=60)
    assert run.status == "Failed", run
    answer = {
        **request,
        "TrainingJobStatus": "Failed",
        "SecondaryStatus": "Failed",
        "FailureReason": run.failure_reason,
    }
    resp = sched._response(request["TrainingJobName"], answer)
    assert resp.state == AppState.FAILED
    (role,) = resp.roles_statuses
    assert [r.exit_code for r in role.replicas] == [None, 3], run.failure_reason
    rep = role.replicas[1]
    card = FailureCard(role.role, rep.id, rep.exit_code, rep.oom, signal_number=rep.signal)
    assert card.headline() == "sagemaker/1 exited with code 3"


def test_a_stopped_job_says_who_stopped_it(aws_env: MotoServer) -> None:
    """StopTrainingJob keeps no reason, so torchx_nb's cancel first tags the job with who
    asked (here against moto_server, which has the job and its tags but no
    stop_training_job): a Stopped job with that tag says torchx_nb stopped it for whom; one
    without says it was stopped outside torchx_nb."""
    import getpass

    from torchx_nb.schedulers.sagemaker_stop import stopped_by, tag_stop

    sm = aws_env.client("sagemaker")
    for name in ("ours-1", "theirs-1"):
        sm.create_training_job(
            TrainingJobName=name,
            RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": "s3://b/"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 60},
        )
    tag_stop(sm, "ours-1")  # what _cancel_existing does before StopTrainingJob
    sched = AwsSageMakerScheduler("torchx", client=sm)
    said = {}
    for name in ("ours-1", "theirs-1"):
        job = sm.describe_training_job(TrainingJobName=name)
        stopped = {**job, "TrainingJobStatus": "Stopped", "SecondaryStatus": "Stopped"}
        resp = sched._response(name, stopped, stopped_by(sm, job["TrainingJobArn"]))
        assert resp.state == AppState.CANCELLED
        assert resp.roles_statuses[0].replicas[0].ending == resp.msg.removeprefix("it ")
        said[name] = resp.msg
    assert re.fullmatch(
        rf"it was stopped by {getpass.getuser()} with \S+ pid \d+", said["ours-1"]
    ), said
    assert said["theirs-1"] == (
        "it was stopped outside torchx_nb (StopTrainingJob: the console, the AWS CLI or an API"
        " call)"
    )


def test_the_exit_code_survives_a_programs_own_long_failure_reason(
    aws_env: MotoServer, docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The program writes its own 3,000-character reason to /opt/ml/output/failure (as
    SageMaker's docs suggest for a traceback) and exits 3; SageMaker keeps the first 1,024
    characters as FailureReason. Our bootstrap's line comes first, so replica 0's exit code
    3 is still read — appended after the program's text, it was cut off (no exit code)."""
    from tests.conftest import shell_app
    from tests.infra.sagemaker_runner import run_training_job

    script = (
        "mkdir -p /opt/ml/output; i=0; while [ $i -lt 30 ]; do"
        " printf 'Traceback line %03d: %080d\\n' $i 0 >>/opt/ml/output/failure; i=$((i+1));"
        " done; exit 3"
    )
    app = shell_app(script, base_images["busybox"])
    sched = AwsSageMakerScheduler("torchx")
    info = sched.submit_dryrun(
        app, {"role": ROLE, "instance_type": "ml.m5.large", "image_repo": "unused/x"}
    )
    request = info.request.request
    run = run_training_job(docker_env.client(), request, tmp_path / "sm", timeout=60)
    assert run.status == "Failed", run
    assert len(run.failure_reason) > 2500 and "Traceback line 029" in run.failure_reason
    answer = {
        **request,
        "TrainingJobStatus": "Failed",
        "SecondaryStatus": "Failed",
        "FailureReason": run.failure_reason[:1024],  # SageMaker's limit (DescribeTrainingJob)
    }
    resp = sched._response(request["TrainingJobName"], answer)
    assert resp.state == AppState.FAILED
    (role,) = resp.roles_statuses
    assert [r.exit_code for r in role.replicas] == [3], run.failure_reason[:200]


def test_a_spot_job_checkpoints_beside_its_output_and_moto_takes_the_request(
    aws_env: MotoServer,
) -> None:
    """spot (the alias) turns managed spot on, gives a CheckpointConfig at the job's output
    folder's checkpoints/ and tells the job its store is SageMaker's; each field is checked
    against botocore's model of CreateTrainingJob, and moto takes the request as it is."""
    import boto3
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    with get_runner() as runner:
        cfg = {"role": ROLE, "instance_type": "ml.m5.large", "output_path": "s3://b/out"}
        info = runner.dryrun(app(), "aws_sagemaker", {**cfg, "spot": True, "max_wait": 90000})
        req = info.request.request
        name = req["TrainingJobName"]
        assert req["EnableManagedSpotTraining"] is True
        assert req["CheckpointConfig"] == {
            "S3Uri": f"s3://b/out/{name}/checkpoints",
            "LocalPath": "/opt/ml/checkpoints",
        }
        assert req["StoppingCondition"] == {
            "MaxRuntimeInSeconds": 86400,
            "MaxWaitTimeInSeconds": 90000,
        }
        env = req["Environment"]
        assert env["TORCHX_NB_CHECKPOINT_URL"] == "sagemaker:"
        assert env["TORCHX_NB_CHECKPOINT_DIR"] == "/opt/ml/checkpoints"
        assert env["TORCHX_NB_MAX_PREEMPTIONS"] == "20" and env["TORCHX_NB_GRACE"] == "120"
        op = model.operation_model("CreateTrainingJob").input_shape
        for key in ("CheckpointConfig", "StoppingCondition"):
            shape = op.members[key]
            assert set(req[key]) <= set(shape.members), key
            assert set(shape.required_members) <= set(req[key]), key
        assert op.members["EnableManagedSpotTraining"].type_name == "boolean"
        validate(boto3.client("sagemaker", region_name="us-west-2"), "CreateTrainingJob", req)
        runner.schedule(info)
        # the user's own checkpoint_s3_uri is kept; use_spot_instances says the same as spot
        own = runner.dryrun(
            app(),
            "aws_sagemaker",
            {**cfg, "use_spot_instances": True, "checkpoint_s3_uri": "s3://b/mine"},
        ).request.request
        assert own["CheckpointConfig"] == {
            "S3Uri": "s3://b/mine",
            "LocalPath": "/opt/ml/checkpoints",
        }
        # without spot, no CheckpointConfig and no checkpoint store
        plain = runner.dryrun(app(), "aws_sagemaker", cfg).request.request
        assert "CheckpointConfig" not in plain and not plain["EnableManagedSpotTraining"]
        assert "TORCHX_NB_CHECKPOINT_URL" not in plain["Environment"]
    created = aws_env.client("sagemaker").describe_training_job(TrainingJobName=name)
    assert created["TrainingJobName"] == name
    assert created["StoppingCondition"] == req["StoppingCondition"]
