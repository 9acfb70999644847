"""The request: an app as one GCP Batch job (names, labels, the task's command, mounts), and the ids it answers to."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from torchx_nb.schedulers.gcp_batch.constants import (
    _JOB_ID_RE,
    _LOCATION_RE,
    _PATH_RE,
    _PROJECT_RE,
    TASK_INDEX,
)
from torchx_nb.schedulers.ids import random_id
from torchx_nb.specs.api import (
    BindMount,
    DeviceMount,
    InvalidRunConfigException,
    Role,
    VolumeMount,
)


@dataclass
class GCPBatchJob:
    """gcp_batch's native request (TorchX's name and attributes): the ``batch_v1.Job`` to
    create as ``projects/PROJECT/locations/LOCATION/jobs/NAME``."""

    name: str
    project: str
    location: str
    job_def: Any
    outputs: str | None = None  # where the job uploads $TORCHX_OUTPUT_DIR (output_path)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.location}"

    def __str__(self) -> str:
        return _fmt(self)


def _fmt(job: GCPBatchJob) -> str:
    import json

    from google.cloud import batch_v1
    from google.protobuf import json_format

    from torchx_nb.redact import redact

    # as the REST API receives it: camelCase, enum names, default values left out
    body = json_format.MessageToDict(batch_v1.Job.pb(job.job_def))
    return json.dumps(
        redact({"parent": job.parent, "job_id": job.name, "job": body}), indent=2, sort_keys=True
    )


def job_name(app_name: str) -> str:
    """A GCP Batch job id (lowercase letters, digits and ``-``, starting with a letter, at most 63
    characters) made unique with a random suffix."""
    base = re.sub(r"[^a-z0-9-]+", "-", app_name.lower()).strip("-")
    base = re.sub(r"^[^a-z]+", "", base)[:46].rstrip("-") or "app"
    return f"{base}-{random_id()}"


def label_value(value: str) -> str:
    """A label value GCP accepts: lowercase letters, digits, ``_`` and ``-``, 63 at most."""
    return re.sub(r"[^a-z0-9_-]", "_", value.lower())[:63]


def task_command(words: list[str]) -> list[str]:
    """The container's command. GCP Batch runs it without a shell, so a ``${replica_id}``
    (``$BATCH_TASK_INDEX``) in it would reach the program as those characters: such a command
    runs under ``/bin/sh -c`` (as GCP's own samples do), every word quoted but the index."""
    if not any(TASK_INDEX in w for w in words):
        return words
    quoted = [
        '"$BATCH_TASK_INDEX"'.join(shlex.quote(part) for part in w.split(TASK_INDEX)) for w in words
    ]
    return ["/bin/sh", "-c", "exec " + " ".join(quoted)]


def _label_key(key: str) -> str:
    cleaned = label_value(key)
    return cleaned if cleaned[:1].isalpha() else f"k{cleaned}"[:63]


def parse_app_id(app_id: str) -> tuple[str, str, str]:
    """``PROJECT:LOCATION:JOB`` → its three parts, each checked (the id may come from anywhere)."""
    parts = app_id.split(":")
    # a domain-scoped project id has a colon of its own (example.com:proj)
    if len(parts) == 4:
        parts = [f"{parts[0]}:{parts[1]}", parts[2], parts[3]]
    if len(parts) != 3:
        raise ValueError(f"not a gcp_batch app id {app_id!r}: expected PROJECT:LOCATION:JOB")
    project, location, name = parts
    if not _PROJECT_RE.match(project) or not _LOCATION_RE.match(location):
        raise ValueError(f"not a gcp_batch app id {app_id!r}: bad project or location")
    if not _JOB_ID_RE.match(name):
        raise ValueError(f"not a gcp_batch app id {app_id!r}: bad job name")
    return project, location, name


def parse_trial_id(app_id: str) -> tuple[str, str, str, int | None]:
    """``PROJECT:LOCATION:JOB`` or a sweep trial's ``PROJECT:LOCATION:JOB:INDEX`` → its parts
    (the index None for a job); a job id never ends in digits alone, so the two cannot mix."""
    head, _, last = app_id.rpartition(":")
    if head and last.isdigit():
        return (*parse_app_id(head), int(last))
    return (*parse_app_id(app_id), None)


@dataclass(frozen=True)
class _Checked:
    """An app's GCP Batch settings, every check made (before anything is built)."""

    project: str
    location: str
    machine_type: str | None
    model: str
    max_run_seconds: int | None


def _mounts(role: Role) -> tuple[list[Any], list[str], list[str]]:
    """Task volumes (GCS buckets, NFS shares), the container's ``src:dst[:ro]`` binds and its
    extra docker options (devices), each path checked so nothing can add an option."""
    from google.cloud import batch_v1

    volumes: list[Any] = []
    binds: list[str] = []
    options: list[str] = []

    def path(p: str, what: str) -> str:
        if not _PATH_RE.match(p):
            raise InvalidRunConfigException(
                f"{what} {p!r} is not an absolute path of letters, digits and ._/@+-", "mounts"
            )
        return p

    for i, m in enumerate(role.mounts):
        ro = ":ro" if getattr(m, "read_only", False) else ""
        if isinstance(m, BindMount):
            binds.append(f"{path(m.src_path, 'bind source')}:{path(m.dst_path, 'mount path')}{ro}")
        elif isinstance(m, VolumeMount):
            host = f"/mnt/disks/torchx-{i}"
            dst = path(m.dst_path, "mount path")
            if m.src.startswith("gs://"):
                bucket = m.src[5:].strip("/")
                if not re.match(r"^[a-z0-9][a-z0-9._-]{1,220}(/[A-Za-z0-9._/-]*)?$", bucket):
                    raise InvalidRunConfigException(f"bad GCS bucket path {m.src!r}", "mounts")
                volumes.append(
                    batch_v1.Volume(gcs=batch_v1.GCS(remote_path=bucket), mount_path=host)
                )
            elif m.src.startswith("nfs://"):
                server, _, remote = m.src[6:].partition("/")
                if not re.match(r"^[A-Za-z0-9.-]+$", server):
                    raise InvalidRunConfigException(f"bad NFS server in {m.src!r}", "mounts")
                volumes.append(
                    batch_v1.Volume(
                        nfs=batch_v1.NFS(server=server, remote_path=path("/" + remote, "NFS path")),
                        mount_path=host,
                    )
                )
            else:
                raise InvalidRunConfigException(
                    f"GCP Batch mounts gs://BUCKET[/PATH] and nfs://SERVER/PATH volumes, not"
                    f" {m.src!r}",
                    "mounts",
                )
            binds.append(f"{host}:{dst}{ro}")
        elif isinstance(m, DeviceMount):
            perm = m.permissions if re.match(r"^[rwm]{1,3}$", m.permissions) else "rwm"
            options.append(
                f"--device={path(m.src_path, 'device')}:{path(m.dst_path, 'device path')}:{perm}"
            )
    for dev, count in role.resource.devices.items():
        raise InvalidRunConfigException(
            f"GCP Batch has no device {dev!r} (x{count}): drop it from the resource", "devices"
        )
    return volumes, binds, options
