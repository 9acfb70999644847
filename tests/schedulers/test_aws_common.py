from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError

from tests.conftest import cli
from torchx_nb.schedulers.aws_common import aws_error, call


def client_error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "SubmitJob")


def test_one_line_messages() -> None:
    assert "no AWS credentials; set AWS_PROFILE" in str(aws_error(NoCredentialsError(), "x"))
    assert "no AWS region; set AWS_DEFAULT_REGION" in str(aws_error(NoRegionError(), "x"))
    throttled = str(aws_error(client_error("ThrottlingException", "Rate exceeded"), "submit"))
    assert throttled == "submit: AWS is throttling requests even after retries; try again later"
    denied = str(aws_error(client_error("AccessDeniedException", "not allowed"), "submit"))
    assert denied == "submit: AccessDeniedException: not allowed"


def test_call_wraps_failures() -> None:
    def boom(**kwargs: object) -> None:
        raise client_error("ClientException", "JobQueue q not found")

    try:
        call("cannot submit to queue 'q'", boom)
    except Exception as e:
        assert str(e) == "cannot submit to queue 'q': ClientException: JobQueue q not found"
    else:
        raise AssertionError("no error raised")


NO_CREDENTIALS = (
    "no AWS credentials; set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    " (or run `aws configure`)"
)
NO_PROFILE = (
    "no AWS profile 'nope' in the AWS config; set AWS_PROFILE to one that"
    " `aws configure list-profiles` shows, or unset it"
)


@pytest.mark.parametrize(
    ("scheduler", "profile", "said"),
    [
        ("aws_batch", None, f"cannot list job queues: {NO_CREDENTIALS}"),
        ("aws_sagemaker", None, f"cannot list training jobs: {NO_CREDENTIALS}"),
        ("aws_batch", "nope", f"cannot create an AWS batch client: {NO_PROFILE}"),
        ("aws_sagemaker", "nope", f"cannot read the AWS configuration: {NO_PROFILE}"),
    ],
)
def test_list_without_credentials_is_one_line_naming_the_fix(
    scheduler: str,
    profile: str | None,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``torchx-nb list -s aws_batch`` on a machine with no AWS credentials, or with
    AWS_PROFILE naming a profile the config does not have: one line naming the fix. boto3's
    paginator asks only when it is iterated, which the mapping did not cover (the raw
    NoCredentialsError was printed), and ProfileNotFound was not mapped at all."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    env = {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "TORCHX_NB_DATA_DIR": str(tmp_path / "data"),
        **({"AWS_PROFILE": profile} if profile else {}),
    }
    code, out, err = cli("list", "-s", scheduler, env=env)
    assert (code, out, err) == (1, "", f"torchx-nb: error: {said}\n")
