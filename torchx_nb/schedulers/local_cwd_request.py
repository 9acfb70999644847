"""local_cwd's request and its record on disk: every replica's launch parameters, the app's
roles as JSON (read back by ``describe`` from any process) and the app ids allowed as folder
names."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from torchx_nb.specs.api import Resource, Role


@dataclass
class ReplicaParam:
    """How one replica is started: argv, the env added to the supervisor's, log files, cwd."""

    args: list[str]
    env: dict[str, str]
    stdout: str
    stderr: str
    combined: str
    cwd: str


@dataclass
class PopenRequest:
    """local_cwd's native request: the app's folders and every replica's launch parameters."""

    app_id: str
    state_dir: str
    log_dir: str
    role_params: dict[str, list[ReplicaParam]] = field(default_factory=dict)
    role_log_dirs: dict[str, list[str]] = field(default_factory=dict)
    roles: list[dict[str, Any]] = field(default_factory=list)
    grace_seconds: float = 10.0


def format_request(req: PopenRequest) -> str:
    """The request as a dry run shows it: JSON, secret-looking values masked."""
    from torchx_nb.redact import redact

    return json.dumps(redact(asdict(req)), indent=2)


_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}")


def check_app_id(app_id: str) -> str:
    """``app_id`` if it is a plain folder name (letters, digits, ``_.-``; no ``..``), else a
    one-line error: a hostile handle must not reach outside the state folder."""
    if not _SAFE_ID.fullmatch(app_id) or ".." in app_id:
        raise ValueError(f"{app_id!r} is not a local_cwd app id")
    return app_id


def role_to_json(role: Role) -> dict[str, Any]:
    """A role as the app's state file keeps it."""
    return {
        "name": role.name,
        "image": role.image,
        "entrypoint": role.entrypoint,
        "args": role.args,
        "env": role.env,
        "num_replicas": role.num_replicas,
        "max_retries": role.max_retries,
        "resource": {
            "cpu": role.resource.cpu,
            "gpu": role.resource.gpu,
            "memMB": role.resource.memMB,
        },
        "metadata": role.metadata,
    }


def role_from_json(d: dict[str, Any]) -> Role:
    """A role read back from the app's state file."""
    return Role(
        name=d["name"],
        image=d["image"],
        entrypoint=d["entrypoint"],
        args=list(d["args"]),
        env=dict(d["env"]),
        num_replicas=d["num_replicas"],
        max_retries=d.get("max_retries", 0),
        resource=Resource(**d["resource"]),
        metadata=dict(d.get("metadata", {})),
    )
