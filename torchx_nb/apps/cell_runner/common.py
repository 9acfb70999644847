"""What every part of the job-side runner shares: its own folder in the job's outputs, the
folder the runner shipped in, the process's rank, atomic writes, and cloudpickle."""

from __future__ import annotations

import os
import sys
from typing import Any

OWN = ".torchx-nb"  # the runner's own folder, in the job's outputs and beside the workspace
#: the folder the runner ships in (``.torchx-nb/`` beside the workspace): the files written
#: at build time (``plan.json``, the notebook's parameters, ``vendor/``) are there
SHIPPED = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shipped(name: str) -> str:
    """The path of ``name``, a file shipped beside the runner."""
    return os.path.join(SHIPPED, name)


def cloudpickle() -> Any:
    """cloudpickle: the image's, else the copy shipped beside the runner."""
    try:
        import cloudpickle
    except ImportError:
        sys.path.insert(0, shipped("vendor"))
        import cloudpickle
    return cloudpickle


#: each replica's id, as the backends set it (torchx_nb's local ones, Slurm's components,
#: Kubernetes' completion index, SageMaker's host order)
REPLICA_ID_ENV = "TORCHX_REPLICA_ID"
#: the replica ids a backend sets itself: AWS Batch's node index, GCP Batch's task index as
#: TorchX names it
NATIVE_REPLICA_ENVS = ("AWS_BATCH_JOB_NODE_INDEX", "TORCHX_REPLICA_IDX")


def rank() -> int:
    """This process's rank (torchrun's ``$RANK``, else the replica id); 0 when alone. Each
    rank keeps its own checkpoint folder, so two replicas must never read as one."""
    for name in ("RANK", REPLICA_ID_ENV, *NATIVE_REPLICA_ENVS):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def write(folder: str, name: str, data: bytes) -> None:
    """``data`` into ``folder/name``, whole or not at all (a reader never sees half a file)."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(folder, name))
