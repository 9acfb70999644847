"""``slurm``'s options, one typed structure, and the checks a dry run makes of what sbatch
would refuse only after the job was built (a time limit, a memory size)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from torchx_nb.specs.structured_opts import PreemptionOpts, StructuredOpts


@dataclass(kw_only=True)
class _SlurmFields(StructuredOpts):
    """slurm's own options (TorchX's, then ours)."""

    partition: str | None = None
    """the partition to run the job in"""

    time: str | None = None
    """maximum run time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
    days-hours:minutes or days-hours:minutes:seconds"""

    comment: str | None = None
    """comment to set on the slurm job"""

    constraint: str | None = None
    """constraint to use for the slurm job"""

    mail_user: str | None = field(default=None, metadata={"cfg_key": "mail-user"})
    """user to mail on job end"""

    mail_type: str | None = field(default=None, metadata={"cfg_key": "mail-type"})
    """what events to mail users on"""

    job_dir: str | None = None
    """folder on the shared filesystem for the job's code and logs: the workspace and the
    cell are copied into it (a new folder JOB_DIR/NAME-ID when it exists)"""

    qos: str | None = None
    """quality of service for every component"""

    account: str | None = None
    """account to charge the job to"""

    exclusive: bool = False
    """whole nodes for each replica"""

    gpus_per_node: bool = False
    """ask for GPUs with --gpus-per-node (for sites that refuse --gpus-per-task)"""

    nodelist: str | None = None
    """nodes to run on, one per replica in order (N1,N2,...)"""

    exclude: str | None = None
    """nodes never to run on (N1,N2,...)"""


@dataclass(kw_only=True)
class SlurmOpts(PreemptionOpts, _SlurmFields):
    """slurm's options, then the preemption limit (a job Slurm ends PREEMPTED is sent again)."""


# sbatch's documented --time forms: minutes, minutes:seconds, hours:minutes:seconds,
# days-hours, days-hours:minutes, days-hours:minutes:seconds; and no limit
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|(?i:infinite|unlimited)")
TIME_FORMS = (
    "minutes (90), hours:minutes:seconds (1:30:00), days-hours[:minutes[:seconds]]"
    " (2-12, 1-12:30:00) or UNLIMITED"
)


def check_time(value: Any) -> None:
    """A ``time`` option sbatch takes, else one line naming the forms it takes."""
    if value is None or value == "":
        return
    if not _TIME.fullmatch(str(value)):
        raise ValueError(
            f"slurm option time={str(value)[:60]!r} is not a Slurm time limit: give {TIME_FORMS}"
        )


def memory_mb(role: str, mem: Any) -> int:
    """A role's ``memMB`` as the whole number of MB sbatch's ``--mem`` takes (it refuses
    ``1536.5``, and would read ``1536.0`` as nothing at all), else one line naming the fix."""
    whole = isinstance(mem, int) or (isinstance(mem, float) and mem.is_integer())
    if isinstance(mem, bool) or not whole:
        raise ValueError(
            f"role {role}: memMB={mem!r} is not a whole number of MB; Slurm's --mem takes whole"
            " MB: give an int (e.g. memMB=4096 for 4 GB)"
        )
    return int(mem)
