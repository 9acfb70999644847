"""aws_sagemaker on managed spot: ``spot`` (the one spelling of every backend) and
``use_spot_instances`` (SageMaker's) as one switch, ``max_wait`` against ``max_run``, and the
``CheckpointConfig`` a spot job gets by default so that each attempt resumes from the last."""

from __future__ import annotations

from typing import Any

from torchx_nb.schedulers.outputs import checkpoint_env
from torchx_nb.schedulers.sagemaker_options import AwsSageMakerOpts
from torchx_nb.specs.api import InvalidRunConfigException

LOCAL_PATH = "/opt/ml/checkpoints"  # SageMaker's default CheckpointConfig.LocalPath
SIGTERM_GRACE = 120  # SageMaker stops a job with SIGTERM, then kills it 120 s later


def spot_on(spot: bool | None, use_spot_instances: bool | None) -> bool:
    """Whether the job runs on managed spot; both options given, and differently, is one line."""
    if spot is not None and use_spot_instances is not None and spot != use_spot_instances:
        raise InvalidRunConfigException(
            f"spot={spot} and use_spot_instances={use_spot_instances} disagree (one is the"
            " other's alias): give only one of them",
            "spot",
        )
    return bool(spot if spot is not None else use_spot_instances)


def check_times(spot: bool, max_run: int | None, max_wait: int | None) -> None:
    """SageMaker's MaxWaitTimeInSeconds covers the wait for capacity and the run (all
    attempts), so it is at least MaxRuntimeInSeconds."""
    if max_wait and not spot:
        raise InvalidRunConfigException(
            "max_wait only applies with use_spot_instances=True (or spot=True)", "max_wait"
        )
    run = max_run or 86400
    if max_wait and max_wait < run:
        raise InvalidRunConfigException(
            f"max_wait={max_wait} is less than max_run={run}: max_wait covers the wait for spot"
            f" capacity and the run, so give max_wait={run} or more (or a smaller max_run)",
            "max_wait",
        )


def checkpoint(
    spot: bool, cfg: AwsSageMakerOpts, outputs: str
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The request's ``CheckpointConfig`` and the job's checkpoint env: a spot job without a
    checkpoint_s3_uri keeps its checkpoints at ``<the job's output>/checkpoints``, synced and
    restored by SageMaker (the job's store is ``sagemaker:``, its folder LocalPath)."""
    s3_uri, local_path = cfg.checkpoint_s3_uri, cfg.checkpoint_local_path
    if not spot:
        if not s3_uri:
            return None, {}
        return {"S3Uri": s3_uri, **({"LocalPath": local_path} if local_path else {})}, {}
    uri = s3_uri or f"{outputs.rstrip('/')}/checkpoints"
    folder = local_path or LOCAL_PATH
    # max_retries 0: SageMaker runs a job again only after a spot interruption (its
    # RetryStrategy retries InternalServerError, never the program's failure)
    env = checkpoint_env(
        "sagemaker:",
        folder,
        max_retries=0,
        max_preemptions=cfg.max_preemptions,
        grace=SIGTERM_GRACE,
    )
    return {"S3Uri": uri, "LocalPath": folder}, env
