"""What the AWS backends share: boto3 clients with adaptive retries, one-line errors, the
tags a job carries, and reading CloudWatch log streams (optionally following them)."""

from __future__ import annotations

import getpass
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from torchx_nb.lazy import LazyClient
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.specs.exceptions import AwsError as AwsError
from torchx_nb.specs.exceptions import AwsUnavailable
from torchx_nb.specs.log_line import LogLine
from torchx_nb.version import __version__

# TorchX's tag keys: a job carrying TAG_VERSION is one of ours (list and describe find it by it)
TAG_VERSION = "torchx.pytorch.org/version"
TAG_APP_NAME = "torchx.pytorch.org/app-name"
TAG_USER = "torchx.pytorch.org/user"


def job_tags(app_name: str, user: str | None, *extra: Mapping[str, str] | None) -> dict[str, str]:
    """The tags of a job as TorchX writes them (version, app name, user: ``user`` or the login
    name), then ``extra`` mappings in order (the AppDef's metadata, the user's own tags)."""
    tags = {TAG_VERSION: __version__, TAG_APP_NAME: app_name, TAG_USER: user or getpass.getuser()}
    for more in extra:
        tags.update(more or {})
    return tags


def error_code(e: BaseException) -> str:
    """The AWS error code of a botocore ClientError (``NoSuchEntity``, ``404``…), else ""."""
    response = getattr(e, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def aws_error(e: BaseException, what: str) -> TorchxNbError:
    """One line for the usual AWS failures: no credentials, no region, refused, throttled."""
    name = type(e).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return AwsError(
            f"{what}: no AWS credentials; set AWS_PROFILE or AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY (or run `aws configure`)"
        )
    if name == "ProfileNotFound":
        profile = str(getattr(e, "kwargs", {}).get("profile", ""))[:80]
        return AwsError(
            f"{what}: no AWS profile {profile!r} in the AWS config; set AWS_PROFILE to one"
            " that `aws configure list-profiles` shows, or unset it"
        )
    if name == "NoRegionError":
        return AwsError(
            f"{what}: no AWS region; set AWS_DEFAULT_REGION (or region in ~/.aws/config)"
        )
    if name == "EndpointConnectionError":
        return AwsUnavailable(
            f"{what}: cannot reach the AWS endpoint ({e}); check AWS_ENDPOINT_URL and the network"
        )
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        code = error_code(e) or name
        msg = response.get("Error", {}).get("Message", str(e))
        if code in ("ThrottlingException", "TooManyRequestsException"):
            return AwsUnavailable(
                f"{what}: AWS is throttling requests even after retries; try again later"
            )
        return AwsError(f"{what}: {code}: {msg}")
    return AwsError(f"{what}: {name}: {e}")


def call(what: str, fn: Any, **kwargs: Any) -> Any:
    """``fn(**kwargs)``, with any AWS failure turned into a one-line error about ``what``."""
    try:
        return fn(**kwargs)
    except TorchxNbError:
        raise
    except Exception as e:
        raise aws_error(e, what) from None


def pages(what: str, client: Any, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every page of a paginated AWS call, any failure (also one met while paging: boto3's
    paginator asks only when it is iterated) turned into a one-line error about ``what``."""
    try:
        yield from client.get_paginator(operation).paginate(**kwargs)
    except TorchxNbError:
        raise
    except Exception as e:
        raise aws_error(e, what) from None


def boto_client(service: str, region: str | None = None) -> Any:
    """A boto3 client with adaptive retries (AWS's advice for throttling); boto3 itself honours
    AWS_ENDPOINT_URL, AWS_PROFILE and AWS_DEFAULT_REGION. Four attempts, not ten: an endpoint
    that is down is reported within seconds (a widget shows "reconnecting…") instead of
    after a minute of silent retries."""
    import boto3
    from botocore.config import Config

    cfg = Config(
        retries={"mode": "adaptive", "max_attempts": 4},
        connect_timeout=10,
        user_agent_extra=f"torchx_nb/{__version__}",
    )
    try:
        return boto3.session.Session(region_name=region).client(service, config=cfg)
    except Exception as e:
        raise aws_error(e, f"cannot create an AWS {service} client") from None


class AwsClients:
    """The service client and the CloudWatch Logs client of an AWS backend, created on first
    use unless injected (tests pass clients pointed at moto)."""

    service = ""

    def _init_clients(self, client: Any, log_client: Any, region: str | None) -> None:
        self._client = client
        self._log_client = log_client
        self._region = region

    client = LazyClient(lambda self: boto_client(self.service, self._region))
    log_client = LazyClient(lambda self: boto_client("logs", self._region), "_log_client")


def cloudwatch_events(
    log_client: Any,
    group: str,
    stream: str,
    since: datetime | None = None,
    until: datetime | None = None,
    token: list[str | None] | None = None,
) -> Iterator[str]:
    """Lines of one stream from where ``token[0]`` left off (updated as pages are read), until
    the end of what is there now, each a ``LogLine`` with its event's time. A missing stream
    yields nothing."""
    token = token if token is not None else [None]
    while True:
        args: dict[str, Any] = {
            "logGroupName": group,
            "logStreamName": stream,
            "startFromHead": True,
            "limit": 10000,
        }
        if token[0]:
            args["nextToken"] = token[0]
        if since:
            args["startTime"] = int(since.timestamp() * 1000)
        if until:
            args["endTime"] = int(until.timestamp() * 1000)
        try:
            resp = log_client.get_log_events(**args)
        except Exception as e:
            if "ResourceNotFound" in type(e).__name__ or "ResourceNotFound" in str(e):
                return
            raise aws_error(e, f"cannot read the log {group}/{stream}") from None
        for event in resp.get("events", []):
            stamp = event.get("timestamp")
            yield LogLine(
                event["message"].rstrip("\n") + "\n",
                stamp / 1000 if isinstance(stamp, (int, float)) else None,
            )
        nxt = resp.get("nextForwardToken")
        if not nxt or nxt == token[0]:
            return
        token[0] = nxt
