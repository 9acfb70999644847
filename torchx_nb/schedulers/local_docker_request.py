"""local_docker's native request: the containers of a job (``DockerJob``), how a dry run
shows it, TorchX's container names, and the role kept in each container's label (so describe
can give back the AppDef from the daemon alone)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from torchx_nb.specs.api import Resource, Role


@dataclass
class DockerContainer:
    """One replica: image, command, and the keyword arguments of ``containers.run``."""

    image: str
    command: list[str]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class DockerJob:
    """local_docker's native request: the containers to start and the network they join."""

    app_id: str
    network: str
    containers: list[DockerContainer] = field(default_factory=list)
    outputs: str = ""  # the host folder mounted at CONTAINER_OUTPUTS in every container


def format_job(job: DockerJob) -> str:
    """The request as a dry run shows it: JSON, secret-looking values masked."""
    import json

    from torchx_nb.redact import redact

    data = {
        "app_id": job.app_id,
        "network": job.network,
        "outputs": job.outputs,
        "containers": [
            {"image": c.image, "command": c.command, **_jsonable(c.kwargs)} for c in job.containers
        ],
    }
    return json.dumps(redact(data), indent=2, default=str)


def _jsonable(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in kwargs.items():
        if k == "mounts":
            out[k] = [dict(m) for m in v]
        elif k == "device_requests":
            out[k] = [dict(d) for d in v]
        else:
            out[k] = v
    return out


def container_name(app_id: str, role: str, replica_id: int) -> str:
    """TorchX's container naming: ``{app_id[-30:]}-{role[:30]}-{replica}``, starting alphanumeric."""
    name = f"{app_id[-30:]}-{role[:30]}-{replica_id}"
    return re.sub(r"^[^a-zA-Z0-9]+", "", name)


def role_label(role: Role) -> str:
    """The role as JSON, kept in each container's label for describe to give back."""
    import json

    return json.dumps(
        {
            "name": role.name,
            "image": role.image,
            "entrypoint": role.entrypoint,
            "args": role.args,
            "num_replicas": role.num_replicas,
            "resource": [role.resource.cpu, role.resource.gpu, role.resource.memMB],
            "max_retries": role.max_retries,
        }
    )


def role_from_label(text: str) -> Role | None:
    """The role a container's label keeps (None: not one of ours, or unreadable)."""
    import json

    try:
        d = json.loads(text)
    except ValueError:
        return None
    cpu, gpu, mem = d.get("resource", [1, 0, 1024])
    return Role(
        name=d["name"],
        image=d["image"],
        entrypoint=d["entrypoint"],
        args=list(d["args"]),
        num_replicas=d["num_replicas"],
        max_retries=d.get("max_retries", 0),
        resource=Resource(cpu=cpu, gpu=gpu, memMB=mem),
    )
