"""aws_batch's options (TorchX's, then ours), then the workspace's; typed, with their help taken
from the docstrings below."""

from __future__ import annotations

from dataclasses import dataclass

from torchx_nb.specs.structured_opts import SpotOpts, StructuredOpts
from torchx_nb.workspace import WorkspaceOpts


@dataclass(kw_only=True)
class _AwsBatchFields(StructuredOpts):
    queue: str
    """job queue to submit to"""

    user: str | None = None
    """user tagged on the job (default: the current user)"""

    privileged: bool = False
    """run the containers privileged"""

    share_id: str | None = None
    """share identifier (queues with a fair-share scheduling policy)"""

    priority: int = 0
    """scheduling priority; needs share_id"""

    job_role_arn: str | None = None
    """IAM role the job's containers assume"""

    execution_role_arn: str | None = None
    """IAM role ECS uses to start the containers (pull images, write logs)"""

    timeout: int | None = None
    """seconds each attempt may run (Batch's attemptDurationSeconds, at least 60); a job
    stopped there is FAILED with a card naming the limit"""

    output_path: str | None = None
    """s3://BUCKET/PREFIX: each job's $TORCHX_OUTPUT_DIR (a cell's result, its files) is
    uploaded to PREFIX/JOB_NAME/ at its end (with boto3 from the image)"""


@dataclass(kw_only=True)
class AwsBatchOpts(WorkspaceOpts, SpotOpts, _AwsBatchFields):
    """aws_batch's options, spot and the preemption limit, then the workspace's."""
