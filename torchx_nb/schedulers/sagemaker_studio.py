"""SageMaker defaults found the way Studio's own tools find them: the execution role (the Studio
metadata file, then the space, user profile and domain, then the caller's assumed role), the
region, the default bucket and an ECR repository for patched images. Role names become ARNs."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchx_nb.schedulers.aws_common import AwsError, aws_error, call, error_code
from torchx_nb.specs.api import InvalidRunConfigException

METADATA_FILE = "/opt/ml/metadata/resource-metadata.json"
ENV_METADATA_FILE = "TORCHX_NB_STUDIO_METADATA"
DEFAULT_IMAGE_REPO_NAME = "torchx-nb"
_ASSUMED_ROLE = re.compile(
    r"^arn:(?P<part>[\w-]+):sts::(?P<account>\d+):assumed-role/(?P<name>[^/]+)/"
)
_ROLE_NAME = re.compile(r"^[\w+=,.@-]{1,64}$")


def metadata() -> dict[str, Any]:
    """Studio's (or a notebook instance's) resource metadata, or {} outside SageMaker.
    ``$TORCHX_NB_STUDIO_METADATA`` names another file (tests use it)."""
    path = Path(os.environ.get(ENV_METADATA_FILE) or METADATA_FILE)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def region() -> str | None:
    """The region of the Studio app, from its ARN in the metadata file."""
    arn = str(metadata().get("ResourceArn") or "")
    parts = arn.split(":")
    return parts[3] if len(parts) > 4 and parts[2] == "sagemaker" and parts[3] else None


def execution_role(sagemaker: Any, sts: Callable[[], Any], iam: Callable[[], Any]) -> str:
    """The role Studio's tools would run a job as. Order: ``ExecutionRoleArn`` in the metadata
    file; a notebook instance's role; a private space's owner profile (or a shared space's
    domain default); the user profile's role; the domain's default; the caller's assumed role."""
    meta = metadata()
    if meta.get("ExecutionRoleArn"):
        return str(meta["ExecutionRoleArn"])
    domain = meta.get("DomainId")
    try:
        if meta and not domain and meta.get("ResourceName"):
            return str(
                sagemaker.describe_notebook_instance(NotebookInstanceName=meta["ResourceName"])[
                    "RoleArn"
                ]
            )
        if domain:
            profile = meta.get("UserProfileName")
            if not profile and meta.get("SpaceName"):
                space = sagemaker.describe_space(DomainId=domain, SpaceName=meta["SpaceName"])
                profile = (space.get("OwnershipSettings") or {}).get("OwnerUserProfileName")
                if not profile:
                    shared = sagemaker.describe_domain(DomainId=domain)
                    role = (shared.get("DefaultSpaceSettings") or {}).get("ExecutionRole")
                    if role:
                        return str(role)
            if profile:
                desc = sagemaker.describe_user_profile(DomainId=domain, UserProfileName=profile)
                role = (desc.get("UserSettings") or {}).get("ExecutionRole")
                if role:
                    return str(role)
            role = (
                sagemaker.describe_domain(DomainId=domain).get("DefaultUserSettings") or {}
            ).get("ExecutionRole")
            if role:
                return str(role)
    except AwsError:
        raise
    except Exception as e:
        if "AccessDenied" not in error_code(e) + type(e).__name__:
            raise aws_error(e, "cannot read the Studio domain for its execution role") from None
    identity = call("cannot find who is calling AWS", sts().get_caller_identity)
    m = _ASSUMED_ROLE.match(str(identity.get("Arn", "")))
    if not m:
        raise InvalidRunConfigException(
            "no role given and none to default to (not in SageMaker Studio, and the caller"
            f" {identity.get('Arn')} is not a role): pass -cfg role=NAME_OR_ARN",
            "role",
        )
    return resolve_role(m["name"], sts, iam)


def resolve_role(role: str, sts: Callable[[], Any], iam: Callable[[], Any]) -> str:
    """An IAM role ARN for ``role``, a name or an ARN. A name is looked up in IAM (which gives
    its path); where IAM may not be read, the ARN is built from the caller's account."""
    role = role.strip()
    if role.startswith("arn:"):
        if ":role/" not in role:
            raise InvalidRunConfigException(
                f"role {role!r} is not an IAM role ARN: use arn:aws:iam::ACCOUNT:role/NAME"
                " or the role's name",
                "role",
            )
        return role
    if not _ROLE_NAME.match(role):
        raise InvalidRunConfigException(
            f"role {role[:80]!r} is neither an IAM role name nor an ARN: use the role's name"
            " (e.g. SageMakerRole) or arn:aws:iam::ACCOUNT:role/NAME",
            "role",
        )
    try:
        return str(iam().get_role(RoleName=role)["Role"]["Arn"])
    except Exception as e:
        code = error_code(e) + type(e).__name__
        if "NoSuchEntity" in code:
            account = _account(sts)
            raise InvalidRunConfigException(
                f"IAM role {role!r} does not exist in account {account}: check the name, or"
                " pass the role's ARN with -cfg role=arn:aws:iam::ACCOUNT:role/NAME",
                "role",
            ) from None
        if "AccessDenied" not in code:
            raise aws_error(e, f"cannot look up the IAM role {role!r}") from None
    partition, account = _partition_account(sts)
    return f"arn:{partition}:iam::{account}:role/{role}"


def _partition_account(sts: Callable[[], Any]) -> tuple[str, str]:
    identity = call("cannot find the AWS account", sts().get_caller_identity)
    arn = str(identity.get("Arn", "arn:aws:"))
    return arn.split(":")[1] or "aws", str(identity["Account"])


def _account(sts: Callable[[], Any]) -> str:
    return _partition_account(sts)[1]


def default_bucket_name(region_name: str, account: str) -> str:
    """``sagemaker-REGION-ACCOUNT``: the bucket SageMaker's SDK uses by default."""
    return f"sagemaker-{region_name}-{account}"


def ensure_bucket(s3: Any, output_path: str, region_name: str) -> None:
    """Create the default bucket (``sagemaker-REGION-…``) that ``output_path`` names when it
    is missing, as the SageMaker SDK does; any other bucket is the user's to make."""
    bucket = output_path.removeprefix("s3://").split("/", 1)[0]
    if bucket.startswith(f"sagemaker-{region_name}-"):
        default_bucket(s3, bucket, region_name)


def default_bucket(s3: Any, bucket: str, region_name: str) -> str:
    """``bucket``, created if missing."""
    try:
        s3.head_bucket(Bucket=bucket)
        return bucket
    except Exception as e:
        if error_code(e) not in ("404", "NoSuchBucket", "NotFound"):
            raise aws_error(e, f"cannot read the default bucket {bucket}") from None
    args: dict[str, Any] = {"Bucket": bucket}
    if region_name != "us-east-1":
        args["CreateBucketConfiguration"] = {"LocationConstraint": region_name}
    call(f"cannot create the default bucket {bucket}", s3.create_bucket, **args)
    return bucket


def image_repo_uri(region_name: str, account: str) -> str:
    """The account's ECR repository for patched images (``torchx-nb``)."""
    return f"{account}.dkr.ecr.{region_name}.amazonaws.com/{DEFAULT_IMAGE_REPO_NAME}"


def default_image_repo(ecr: Any, region_name: str, account: str) -> str:
    """The account's ECR repository for patched images (``torchx-nb``), created if missing."""
    try:
        ecr.describe_repositories(repositoryNames=[DEFAULT_IMAGE_REPO_NAME])
    except Exception as e:
        if "RepositoryNotFound" not in error_code(e) + type(e).__name__:
            raise aws_error(e, "cannot read the ECR repository for images") from None
        call(
            f"cannot create the ECR repository {DEFAULT_IMAGE_REPO_NAME}",
            ecr.create_repository,
            repositoryName=DEFAULT_IMAGE_REPO_NAME,
        )
    return image_repo_uri(region_name, account)
