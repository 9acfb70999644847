"""SageMaker Studio defaults and role names, against moto (IAM, STS, S3, ECR, SageMaker domains).
moto has no DescribeUserProfile or DescribeSpace and its STS caller is an IAM user, so those
calls are answered by botocore's Stubber on real clients, validated against AWS's models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tests.infra.moto import MotoServer
from torchx_nb import specs
from torchx_nb.schedulers import sagemaker_studio as studio
from torchx_nb.schedulers.aws_sagemaker import AwsSageMakerScheduler

ACCOUNT = "123456789012"
DOMAIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/service-role/AmazonSageMaker-ExecutionRole-1"
PROFILE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/ProfileRole"


@pytest.fixture
def meta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "resource-metadata.json"
    monkeypatch.setenv(studio.ENV_METADATA_FILE, str(path))
    yield path


def write(path: Path, **data: Any) -> None:
    path.write_text(json.dumps(data))


def stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(
        service, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return client, Stubber(client)


def never() -> Any:
    raise AssertionError("this client must not be used")


def test_metadata_role_wins_and_region_comes_from_the_app_arn(meta: Path) -> None:
    write(
        meta,
        ExecutionRoleArn=PROFILE_ROLE,
        DomainId="d-1",
        ResourceArn=f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:app/d-1/me/jupyterlab/default",
    )
    assert studio.execution_role(object(), never, never) == PROFILE_ROLE
    assert studio.region() == "eu-west-1"


def test_user_profile_then_domain(meta: Path) -> None:
    write(meta, DomainId="d-1", UserProfileName="me")
    sm, stub = stubbed("sagemaker")
    with stub:
        stub.add_response(
            "describe_user_profile",
            {"UserSettings": {"ExecutionRole": PROFILE_ROLE}},
            {"DomainId": "d-1", "UserProfileName": "me"},
        )
        assert studio.execution_role(sm, never, never) == PROFILE_ROLE
        stub.add_response("describe_user_profile", {"UserSettings": {}}, None)
        stub.add_response(
            "describe_domain",
            {"DefaultUserSettings": {"ExecutionRole": DOMAIN_ROLE}},
            {"DomainId": "d-1"},
        )
        assert studio.execution_role(sm, never, never) == DOMAIN_ROLE
        stub.assert_no_pending_responses()


def test_private_space_uses_its_owner_and_shared_space_the_domain(meta: Path) -> None:
    write(meta, DomainId="d-1", SpaceName="lab")
    sm, stub = stubbed("sagemaker")
    with stub:
        stub.add_response(
            "describe_space",
            {"OwnershipSettings": {"OwnerUserProfileName": "owner"}},
            {"DomainId": "d-1", "SpaceName": "lab"},
        )
        stub.add_response(
            "describe_user_profile",
            {"UserSettings": {"ExecutionRole": PROFILE_ROLE}},
            {"DomainId": "d-1", "UserProfileName": "owner"},
        )
        assert studio.execution_role(sm, never, never) == PROFILE_ROLE
        stub.add_response("describe_space", {"SpaceSharingSettings": {"SharingType": "Shared"}})
        stub.add_response(
            "describe_domain", {"DefaultSpaceSettings": {"ExecutionRole": DOMAIN_ROLE}}
        )
        assert studio.execution_role(sm, never, never) == DOMAIN_ROLE
        stub.assert_no_pending_responses()


def test_outside_studio_the_callers_assumed_role(meta: Path, aws_env: MotoServer) -> None:
    iam = aws_env.client("iam")
    iam.create_role(RoleName="Notebook", Path="/service-role/", AssumeRolePolicyDocument="{}")
    sts, stub = stubbed("sts")
    with stub:
        stub.add_response(
            "get_caller_identity",
            {
                "Account": ACCOUNT,
                "UserId": "AROA:me",
                "Arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/Notebook/botocore-session-1",
            },
        )
        role = studio.execution_role(object(), lambda: sts, lambda: iam)
    assert role == f"arn:aws:iam::{ACCOUNT}:role/service-role/Notebook"
    # moto's caller is an IAM user: no role to default to, one clear line
    with pytest.raises(specs.InvalidRunConfigException, match="pass -cfg role=NAME_OR_ARN"):
        studio.execution_role(object(), lambda: aws_env.client("sts"), lambda: iam)


def test_role_names_resolve_through_iam(aws_env: MotoServer) -> None:
    iam, sts = aws_env.client("iam"), aws_env.client("sts")
    iam.create_role(RoleName="SageMakerRole", Path="/service-role/", AssumeRolePolicyDocument="{}")
    arn = f"arn:aws:iam::{ACCOUNT}:role/service-role/SageMakerRole"
    assert studio.resolve_role("SageMakerRole", lambda: sts, lambda: iam) == arn
    assert studio.resolve_role(arn, never, never) == arn
    with pytest.raises(specs.InvalidRunConfigException) as e:
        studio.resolve_role("Typo", lambda: sts, lambda: iam)
    assert str(e.value) == (
        f"IAM role 'Typo' does not exist in account {ACCOUNT}: check the name, or pass the"
        " role's ARN with -cfg role=arn:aws:iam::ACCOUNT:role/NAME"
    )


def test_without_iam_read_access_a_name_becomes_an_arn_in_the_callers_account() -> None:
    iam, iam_stub = stubbed("iam")
    sts, sts_stub = stubbed("sts")
    with iam_stub, sts_stub:
        iam_stub.add_client_error("get_role", "AccessDenied", "not allowed")
        sts_stub.add_response(
            "get_caller_identity",
            {"Account": ACCOUNT, "UserId": "u", "Arn": f"arn:aws:iam::{ACCOUNT}:user/me"},
        )
        got = studio.resolve_role("Runner", lambda: sts, lambda: iam)
    assert got == f"arn:aws:iam::{ACCOUNT}:role/Runner"


def test_default_bucket_and_image_repo_are_created_once(aws_env: MotoServer) -> None:
    s3, ecr = aws_env.client("s3"), aws_env.client("ecr")
    bucket = studio.default_bucket_name("us-west-2", ACCOUNT)
    assert bucket == f"sagemaker-us-west-2-{ACCOUNT}"
    studio.ensure_bucket(s3, f"s3://{bucket}/", "us-west-2")
    studio.ensure_bucket(s3, f"s3://{bucket}/x/", "us-west-2")
    s3.head_bucket(Bucket=bucket)
    studio.ensure_bucket(s3, "s3://someone-elses/", "us-west-2")  # not ours to create
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]].count("someone-elses") == 0
    repo = studio.default_image_repo(ecr, "us-west-2", ACCOUNT)
    assert repo == f"{ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/torchx-nb"
    assert studio.default_image_repo(ecr, "us-west-2", ACCOUNT) == repo
    names = [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]]
    assert names.count("torchx-nb") == 1


def test_a_bad_role_is_reported_before_any_build(
    aws_env: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace build would fail loudly (no daemon, no registry): the role error comes
    first, as one line."""
    from torchx_nb.runner import get_runner

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    (tmp_path / "train.py").write_text("print(1)\n")
    with get_runner() as runner, pytest.raises(specs.InvalidRunConfigException) as e:
        runner.run_component(
            "utils.python",
            ["--script", "train.py"],
            "aws_sagemaker",
            {"role": "Typo", "instance_type": "ml.m5.large", "image_repo": "127.0.0.1:9/x"},
            workspace=str(tmp_path),
        )
    assert str(e.value).startswith("IAM role 'Typo' does not exist in account")


def test_multi_node_instance_count_and_ranks_from_the_container(aws_env: MotoServer) -> None:
    from torchx_nb.components.dist import ddp

    sched = AwsSageMakerScheduler("torchx", client=aws_env.client("sagemaker"))
    app = ddp(script="train.py", j="2x1", image="img:1")
    cfg = {"role": DOMAIN_ROLE, "instance_type": "ml.m5.large"}
    req = sched.submit_dryrun(app, cfg).request.request
    assert req["ResourceConfig"]["InstanceCount"] == 2
    cmd = req["AlgorithmSpecification"]["ContainerArguments"][1]
    assert "--rdzv_endpoint ${TORCHX_RANK0_HOST:=localhost}:29500" in cmd
    assert "--nnodes 2 --nproc_per_node 1" in cmd
    # TorchX's instance_count option wins where given
    req = sched.submit_dryrun(app, {**cfg, "instance_count": 3}).request.request
    assert req["ResourceConfig"]["InstanceCount"] == 3


def test_describe_reports_secondary_status_and_stopping_is_not_final() -> None:
    sm, stub = stubbed("sagemaker")
    sched = AwsSageMakerScheduler("torchx", client=sm)
    base = {
        "TrainingJobName": "j",
        "TrainingJobArn": f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-job/j",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 60},
        "CreationTime": 1700000000,
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/m"},
    }
    cases = [
        ("InProgress", "Downloading", "", specs.AppState.PENDING,
         "Downloading: downloading the input data"),
        ("InProgress", "Training", "", specs.AppState.RUNNING, "Training"),
        ("Stopping", "Stopping", "", specs.AppState.RUNNING, "Stopping"),
        ("Failed", "Failed", "python exited with code 3", specs.AppState.FAILED,
         "Failed: python exited with code 3"),
    ]  # fmt: skip
    with stub:
        for status, secondary, reason, _, _ in cases:
            resp = {**base, "TrainingJobStatus": status, "SecondaryStatus": secondary}
            if reason:
                resp["FailureReason"] = reason
            stub.add_response("describe_training_job", resp, {"TrainingJobName": "j"})
        for _, _, _, state, msg in cases:
            desc = sched.describe("j")
            assert desc is not None and (desc.state, desc.msg) == (state, msg)
