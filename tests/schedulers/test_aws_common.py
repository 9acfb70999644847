from __future__ import annotations

from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError

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
