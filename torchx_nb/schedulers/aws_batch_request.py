"""aws_batch's native request: the job definition and job (``BatchJob``), and each role's
container properties (environment, devices, mounts, resources, roles), built without any
call to AWS."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torchx_nb.schedulers.aws_batch_options import AwsBatchOpts
from torchx_nb.schedulers.devices import get_device_mounts
from torchx_nb.schedulers.outputs import REMOTE_OUTPUT_DIR, output_env
from torchx_nb.specs.api import (
    BindMount,
    DeviceMount,
    InvalidRunConfigException,
    Resource,
    Role,
    VolumeMount,
)
from torchx_nb.specs.named_resources_aws import instance_type_from_resource


@dataclass
class BatchJob:
    """aws_batch's native request: the job definition to register and the job to submit."""

    name: str
    queue: str
    share_id: str | None
    priority: int
    job_def: dict[str, Any]
    tags: dict[str, str]
    outputs: str | None = None  # where the job uploads $TORCHX_OUTPUT_DIR (output_path)
    array_size: int | None = None  # an array job of this many tasks (a sweep's trials)
    notes: tuple[str, ...] = ()  # lines the dry run says above the request (spot)

    def submit_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "jobName": self.name,
            "jobQueue": self.queue,
            "jobDefinition": self.name,
            "tags": self.tags,
        }
        if self.array_size:
            args["arrayProperties"] = {"size": self.array_size}
        if self.job_def.get("timeout"):  # on the job too: DescribeJobs then says it
            args["timeout"] = self.job_def["timeout"]
        if self.share_id:
            args["shareIdentifier"] = self.share_id
            args["schedulingPriorityOverride"] = self.priority
        return args


def format_request(job: BatchJob) -> str:
    import json

    from torchx_nb.redact import redact

    said = json.dumps(
        redact({"register_job_definition": job.job_def, "submit_job": job.submit_args()}),
        indent=2,
    )
    return "".join(f"{note}\n" for note in job.notes) + said


def job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "-", name)
    return cleaned[:110] or "job"


def _permissions(perm: str) -> list[str]:
    return [{"r": "READ", "w": "WRITE", "m": "MKNOD"}[c] for c in perm]


def _resource_requirements(res: Resource) -> list[dict[str, str]]:
    if res.memMB <= 0:
        raise InvalidRunConfigException(
            "AWS Batch needs memory for every role: give the role a resource (-h NAME, e.g."
            " aws_g5.xlarge, or --memMB)",
            "memMB",
        )
    reqs = [
        {"type": "VCPU", "value": str(max(res.cpu, 1))},
        {"type": "MEMORY", "value": str(res.memMB)},
    ]
    if res.gpu > 0:
        reqs.append({"type": "GPU", "value": str(res.gpu)})
    return reqs


def container(role: Role, role_idx: int, cfg: AwsBatchOpts, outputs: str | None) -> dict[str, Any]:
    """The container properties of one role's node range."""
    env = {
        **(output_env(REMOTE_OUTPUT_DIR, outputs) if outputs else {}),
        **role.env,
        "TORCHX_ROLE_IDX": str(role_idx),
        "TORCHX_ROLE_NAME": role.name,
    }
    res = role.resource
    linux: dict[str, Any] = {"sharedMemorySize": max(res.memMB, 0)}
    devices = [
        {
            "hostPath": m.src_path,
            "containerPath": m.dst_path,
            "permissions": _permissions(m.permissions),
        }
        for m in [*role.mounts, *get_device_mounts(res.devices)]
        if isinstance(m, DeviceMount)
    ]
    if devices:
        linux["devices"] = devices
    volumes: list[dict[str, Any]] = []
    mount_points: list[dict[str, Any]] = []
    for i, m in enumerate(role.mounts):
        if isinstance(m, BindMount):
            volumes.append({"name": f"mount_{i}", "host": {"sourcePath": m.src_path}})
            mount_points.append(
                {
                    "sourceVolume": f"mount_{i}",
                    "containerPath": m.dst_path,
                    "readOnly": m.read_only,
                }
            )
        elif isinstance(m, VolumeMount):
            volumes.append(
                {"name": f"mount_{i}", "efsVolumeConfiguration": {"fileSystemId": m.src}}
            )
            mount_points.append(
                {
                    "sourceVolume": f"mount_{i}",
                    "containerPath": m.dst_path,
                    "readOnly": m.read_only,
                }
            )
    container: dict[str, Any] = {
        "command": [role.entrypoint, *role.args],
        "image": role.image,
        "environment": [{"name": k, "value": v} for k, v in env.items()],
        "privileged": cfg.privileged,
        "resourceRequirements": _resource_requirements(res),
        "linuxParameters": linux,
        "logConfiguration": {"logDriver": "awslogs"},
        "mountPoints": mount_points,
        "volumes": volumes,
    }
    itype = instance_type_from_resource(res)
    if itype:
        container["instanceType"] = itype
    if cfg.job_role_arn:
        container["jobRoleArn"] = cfg.job_role_arn
    if cfg.execution_role_arn:
        container["executionRoleArn"] = cfg.execution_role_arn
    return container
