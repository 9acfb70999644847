"""aws_sagemaker's options: TorchX's SageMaker scheduler's (every one accepted), then ours,
then the workspace's; typed, with their help taken from the docstrings below."""

from __future__ import annotations

from dataclasses import dataclass

from torchx_nb.specs.structured_opts import PreemptionOpts, StructuredOpts
from torchx_nb.workspace import WorkspaceOpts


@dataclass(kw_only=True)
class _SageMakerFields(StructuredOpts):
    role: str | None = None
    """IAM role (name or ARN) the job runs as (default: the SageMaker Studio or notebook
    instance execution role)"""

    instance_type: str
    """e.g. ml.g5.xlarge"""

    instance_count: int | None = None
    """number of instances (default: the role's replicas, -j N)"""

    user: str | None = None
    """user tagged on the job (default: the current user)"""

    keep_alive_period_in_seconds: int | None = None
    """keep instances warm for this long (warm pools)"""

    volume_size: int = 30
    """GB of storage per instance"""

    volume_kms_key: str | None = None
    """KMS key for the storage volume"""

    max_run: int = 86400
    """seconds the job may run"""

    input_mode: str = "File"
    """File, Pipe or FastFile"""

    output_path: str | None = None
    """S3 prefix for outputs (default: the account's SageMaker bucket)"""

    output_kms_key: str | None = None
    """KMS key for the outputs"""

    base_job_name: str | None = None
    """prefix of the job name (default: the app's name)"""

    tags: dict[str, str] | None = None
    """extra tags"""

    subnets: list[str] | None = None
    """VPC subnets (with security_group_ids)"""

    security_group_ids: list[str] | None = None
    """VPC security groups (with subnets)"""

    model_uri: str | None = None
    """S3 URI of a model to load, as an input channel"""

    model_channel_name: str = "model"
    """channel name of model_uri"""

    metric_definitions: dict[str, str] | None = None
    """metric NAME:REGEX pairs parsed from the logs"""

    encrypt_inter_container_traffic: bool = False
    """encrypt traffic between instances"""

    use_spot_instances: bool | None = None
    """use managed spot training (SageMaker's name of spot)"""

    spot: bool | None = None
    """run on managed spot capacity (alias of use_spot_instances); a preemption never spends
    max_retries, and the job's checkpoints go to checkpoint_s3_uri (default: its output
    folder's checkpoints/)"""

    max_wait: int | None = None
    """seconds the job may take in all, waits for spot capacity and every attempt's run
    included (with spot; at least max_run)"""

    checkpoint_s3_uri: str | None = None
    """S3 URI checkpoints are synced to"""

    checkpoint_local_path: str | None = None
    """local checkpoint folder in the container"""

    debugger_hook_config: bool = False
    """enable the debugger hook (writes to output_path)"""

    enable_sagemaker_metrics: bool = False
    """publish metrics as time series"""

    enable_network_isolation: bool = False
    """no network access from the container"""

    disable_profiler: bool = False
    """turn the profiler off"""

    environment: dict[str, str] | None = None
    """environment variables for the container"""

    max_retry_attempts: int | None = None
    """retries after an internal failure"""

    source_dir: str | None = None
    """(SDK script mode only; refused)"""

    git_config: dict[str, str] | None = None
    """(SDK script mode only; refused)"""

    hyperparameters: dict[str, str] | None = None
    """hyperparameters passed to the job"""

    container_log_level: int | None = None
    """log level inside the container (Python logging level)"""

    code_location: str | None = None
    """(SDK script mode only; refused)"""

    dependencies: list[str] | None = None
    """(SDK script mode only; refused)"""

    training_repository_access_mode: str | None = None
    """Platform or Vpc: where the image is pulled from"""

    training_repository_credentials_provider_arn: str | None = None
    """Lambda giving credentials for a private Vpc registry"""

    disable_output_compression: bool = False
    """upload outputs uncompressed"""

    enable_infra_check: bool = False
    """run infrastructure health checks first"""


@dataclass(kw_only=True)
class AwsSageMakerOpts(WorkspaceOpts, PreemptionOpts, _SageMakerFields):
    """aws_sagemaker's options (TorchX's, then ours), the preemption limit, then the
    workspace's; spot is the alias of use_spot_instances."""
