"""``slurm``: an app as one heterogeneous Slurm batch job, one component per replica, started by
``sbatch`` and watched with ``squeue``/``sacct --json``. No image: jobs run the submitter's
Python from a shared filesystem, in the workspace folder itself or, with ``job_dir``, in a new
job folder the workspace (secrets left out) and the cell are copied into.

The script keeps TorchX 0.7.0's shape (``SlurmBatchRequest.materialize()``), so TorchX users'
jobs and ``.torchxconfig`` carry over; what we add is listed in ``_run_opts``."""

from __future__ import annotations

from torchx_nb.schedulers.slurm.commands import (
    CMD_OPTS,
    COMMAND_TIMEOUT_S,
    OUTPUTS_FOLDER,
    RANK0_ENV,
    SCRIPT_NAME,
    TAIL_IDLE_S,
    WORKSPACE_EXCLUDES,
    SlurmError,
    run_slurm,
)
from torchx_nb.schedulers.slurm.options import SlurmOpts
from torchx_nb.schedulers.slurm.request import (
    JOB_ID_VAR,
    TASK_ID_VAR,
    SlurmBatchRequest,
    SlurmReplicaRequest,
    check_job_id,
)
from torchx_nb.schedulers.slurm.scheduler import SlurmScheduler, create_scheduler

__all__ = [
    "CMD_OPTS",
    "COMMAND_TIMEOUT_S",
    "JOB_ID_VAR",
    "OUTPUTS_FOLDER",
    "RANK0_ENV",
    "SCRIPT_NAME",
    "TAIL_IDLE_S",
    "TASK_ID_VAR",
    "WORKSPACE_EXCLUDES",
    "SlurmBatchRequest",
    "SlurmError",
    "SlurmOpts",
    "SlurmReplicaRequest",
    "SlurmScheduler",
    "check_job_id",
    "create_scheduler",
    "run_slurm",
]
