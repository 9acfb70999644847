"""``slurm``'s options, one typed structure."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchx_nb.specs.structured_opts import StructuredOpts


@dataclass(kw_only=True)
class SlurmOpts(StructuredOpts):
    """slurm's options (TorchX's, then ours)."""

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
