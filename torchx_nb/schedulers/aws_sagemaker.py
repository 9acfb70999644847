"""``aws_sagemaker``: an app's first role becomes a SageMaker training job, created with boto3's
``create_training_job`` (no SageMaker Python SDK: it takes seconds to import and dropped the
estimator TorchX used). The image, patched with the workspace and the cell, is pushed to
``image_repo``; the container runs the role's entrypoint and args. Logs come from CloudWatch
``/aws/sagemaker/TrainingJobs``.

Every option of TorchX's SageMaker scheduler is accepted. Those that only make sense for the
SDK's script mode (``source_dir``, ``git_config``, ``code_location``, ``dependencies``) cannot
apply to a patched image and are refused with the reason, not dropped."""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from torchx_nb.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
    tail_wait,
)
from torchx_nb.schedulers.aws_common import (
    AwsClients,
    AwsError,
    boto_client,
    call,
    cloudwatch_events,
)
from torchx_nb.schedulers.ids import make_unique
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    InvalidRunConfigException,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    is_terminal,
    macros,
    make_app_handle,
    runopts,
)
from torchx_nb.version import __version__
from torchx_nb.workspace import WorkspaceMixin

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TAG_VERSION = "torchx.pytorch.org/version"
TAG_APP_NAME = "torchx.pytorch.org/app-name"
TAG_USER = "torchx.pytorch.org/user"
DEFAULT_OUTPUT = "s3://sagemaker-{region}-{account}/"
SCRIPT_MODE_ONLY = {
    "source_dir": "the workspace is shipped in the image",
    "git_config": "the workspace is shipped in the image",
    "code_location": "no code is uploaded to S3: the workspace is in the image",
    "dependencies": "put dependencies in the workspace or the base image",
}
STATES = {
    "InProgress": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Stopping": AppState.RUNNING,
    "Stopped": AppState.CANCELLED,
}
# InProgress jobs whose SecondaryStatus says no instance runs the container yet
WAITING = {
    "Starting",
    "Pending",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
    "Restarting",
}
MAX_ARG = 256
BOOT_ENV = "TORCHX_NB_SM_BOOT"
# Run in the container before the role's program: the node's rank and the rendezvous host from
# what SageMaker gives a container (SM_HOSTS/SM_CURRENT_HOST, else resourceconfig.json), and
# on failure a reason in /opt/ml/output/failure, which SageMaker reports as FailureReason.
BOOTSTRAP = r"""f=/opt/ml/input/config/resourceconfig.json
if [ -z "$SM_HOSTS" ] && [ -r $f ]; then j=$(tr -d ' \t\r\n' <$f)
SM_CURRENT_HOST=$(echo "$j"|sed -n 's/.*"current_host":"\([^"]*\)".*/\1/p')
SM_HOSTS=$(echo "$j"|sed -n 's/.*"hosts":\(\[[^]]*\]\).*/\1/p'); fi
i=0; for h in $(echo "$SM_HOSTS"|tr -d '[]"'|tr , ' '); do [ $i = 0 ] && TORCHX_RANK0_HOST=$h
[ "$h" = "$SM_CURRENT_HOST" ] && TORCHX_REPLICA_ID=$i; i=$((i+1)); done
export SM_HOSTS SM_CURRENT_HOST TORCHX_RANK0_HOST=${TORCHX_RANK0_HOST:-localhost} \
TORCHX_REPLICA_ID=${TORCHX_REPLICA_ID:-0}
"$@" & p=$!; trap 'kill -TERM $p' TERM INT; wait $p; rc=$?
while kill -0 $p 2>/dev/null; do wait $p; rc=$?; done
if [ $rc != 0 ]; then mkdir -p /opt/ml/output
echo "$1 exited with code $rc on $SM_CURRENT_HOST (replica $TORCHX_REPLICA_ID)" >>/opt/ml/output/failure
fi; exit $rc"""

# name: (type, help, default)
OPTIONS: list[tuple[str, Any, str, CfgVal]] = [
    ("instance_count", int, "number of instances (default: the role's replicas, -j N)", None),
    ("user", str, "user tagged on the job", None),
    ("keep_alive_period_in_seconds", int, "keep instances warm for this long (warm pools)", None),
    ("volume_size", int, "GB of storage per instance", 30),
    ("volume_kms_key", str, "KMS key for the storage volume", None),
    ("max_run", int, "seconds the job may run", 86400),
    ("input_mode", str, "File, Pipe or FastFile", "File"),
    ("output_path", str, "S3 prefix for outputs (default: the account's SageMaker bucket)", None),
    ("output_kms_key", str, "KMS key for the outputs", None),
    ("base_job_name", str, "prefix of the job name (default: the app's name)", None),
    ("tags", dict[str, str], "extra tags", None),
    ("subnets", list[str], "VPC subnets (with security_group_ids)", None),
    ("security_group_ids", list[str], "VPC security groups (with subnets)", None),
    ("model_uri", str, "S3 URI of a model to load, as an input channel", None),
    ("model_channel_name", str, "channel name of model_uri", "model"),
    ("metric_definitions", dict[str, str], "metric NAME:REGEX pairs parsed from the logs", None),
    ("encrypt_inter_container_traffic", bool, "encrypt traffic between instances", False),
    ("use_spot_instances", bool, "use managed spot training", False),
    ("max_wait", int, "seconds to wait for spot capacity (with use_spot_instances)", None),
    ("checkpoint_s3_uri", str, "S3 URI checkpoints are synced to", None),
    ("checkpoint_local_path", str, "local checkpoint folder in the container", None),
    ("debugger_hook_config", bool, "enable the debugger hook (writes to output_path)", False),
    ("enable_sagemaker_metrics", bool, "publish metrics as time series", False),
    ("enable_network_isolation", bool, "no network access from the container", False),
    ("disable_profiler", bool, "turn the profiler off", False),
    ("environment", dict[str, str], "environment variables for the container", None),
    ("max_retry_attempts", int, "retries after an internal failure", None),
    ("source_dir", str, "(SDK script mode only; refused)", None),
    ("git_config", dict[str, str], "(SDK script mode only; refused)", None),
    ("hyperparameters", dict[str, str], "hyperparameters passed to the job", None),
    ("container_log_level", int, "log level inside the container (Python logging level)", None),
    ("code_location", str, "(SDK script mode only; refused)", None),
    ("dependencies", list[str], "(SDK script mode only; refused)", None),
    (
        "training_repository_access_mode",
        str,
        "Platform or Vpc: where the image is pulled from",
        None,
    ),
    (
        "training_repository_credentials_provider_arn",
        str,
        "Lambda giving credentials for a private Vpc registry",
        None,
    ),
    ("disable_output_compression", bool, "upload outputs uncompressed", False),
    ("enable_infra_check", bool, "run infrastructure health checks first", False),
]


@dataclass
class TrainingJob:
    """aws_sagemaker's native request: the arguments of CreateTrainingJob."""

    name: str
    request: dict[str, Any]


def _fmt(job: TrainingJob) -> str:
    import json

    from torchx_nb.redact import redact

    return json.dumps(redact({"create_training_job": job.request}), indent=2)


def _opt_dict(cfg: Mapping[str, CfgVal], key: str) -> dict[str, str]:
    value = cfg.get(key) or {}
    assert isinstance(value, dict)
    return {str(k): str(v) for k, v in value.items()}


def _opt_int(cfg: Mapping[str, CfgVal], key: str, default: int) -> int:
    value = cfg.get(key)
    return int(value) if isinstance(value, (int, float, str)) and value != "" else default


def _boot_env() -> dict[str, str]:
    """The bootstrap script in environment variables of at most 500 characters each
    (SageMaker's limit on a value is 512; each entrypoint item may hold only 256)."""
    size = 500
    chunks = [BOOTSTRAP[i : i + size] for i in range(0, len(BOOTSTRAP), size)]
    return {f"{BOOT_ENV}_{i}": c for i, c in enumerate(chunks)}


def _boot_entrypoint(program: str) -> list[str]:
    names = "".join(f"${{{k}}}" for k in _boot_env())
    return ["/bin/sh", "-c", f'eval "{names}"', "torchx-nb", program]


def _job_name(prefix: str) -> str:
    base = re.sub(r"[^A-Za-z0-9-]", "-", prefix).strip("-")[:46] or "job"
    return make_unique(base)[:63]


class AwsSageMakerScheduler(AwsClients, WorkspaceMixin, Scheduler[Mapping[str, CfgVal]]):
    """SageMaker training jobs through boto3; describe, list, stop and CloudWatch logs."""

    service = "sagemaker"

    def __init__(
        self,
        session_name: str,
        client: Any = None,
        log_client: Any = None,
        sts_client: Any = None,
        region: str | None = None,
    ) -> None:
        super().__init__("aws_sagemaker", session_name)
        self._init_clients(client, log_client, region or _default_region())
        self._sts = sts_client
        self._iam: Any = None
        self._roles: dict[str, str] = {}
        self._account_id: str | None = None

    def _sts_client(self) -> Any:
        if self._sts is None:
            self._sts = boto_client("sts", self._region)
        return self._sts

    def _iam_client(self) -> Any:
        if self._iam is None:
            self._iam = boto_client("iam", self._region)
        return self._iam

    def _account(self) -> str:
        """The caller's account, asked of STS once per scheduler (bucket and image repo both
        need it at submit)."""
        if self._account_id is None:
            identity = call("cannot find the AWS account", self._sts_client().get_caller_identity)
            self._account_id = str(identity["Account"])
        return self._account_id

    def role_arn(self, role: CfgVal) -> str:
        """The ARN of ``role`` (a name or an ARN), or the Studio execution role when none is
        given; looked up once per scheduler."""
        from torchx_nb.schedulers import sagemaker_studio as studio

        key = str(role or "")
        if key not in self._roles:
            if key.strip():
                self._roles[key] = studio.resolve_role(key, self._sts_client, self._iam_client)
            else:
                self._roles[key] = studio.execution_role(
                    self.client, self._sts_client, self._iam_client
                )
        return self._roles[key]

    def _run_opts(self) -> runopts:
        opts = runopts()
        opts.add(
            "role",
            type_=str,
            help="IAM role (name or ARN) the job runs as (default: the SageMaker Studio or"
            " notebook instance execution role)",
        )
        opts.add("instance_type", type_=str, required=True, help="e.g. ml.g5.xlarge")
        for name, type_, help_text, default in OPTIONS:
            opts.add(name, type_=type_, help=help_text, default=default)
        return opts

    def _pre_build_validate(
        self, app: AppDef, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> None:
        """Every option checked, and the role resolved to an ARN, before anything is built or
        pushed. SageMaker runs one role; the node count comes from the role or instance_count."""
        cfg = cfg or {}
        if len(app.roles) != 1:
            raise InvalidRunConfigException(
                f"SageMaker runs one role; this app has {len(app.roles)}", "roles"
            )
        for key, why in SCRIPT_MODE_ONLY.items():
            if cfg.get(key):
                raise InvalidRunConfigException(
                    f"{key} does not apply to aws_sagemaker in torchx_nb: {why}; drop it", key
                )
        if cfg.get("max_wait") and not cfg.get("use_spot_instances"):
            raise InvalidRunConfigException(
                "max_wait only applies with use_spot_instances=True", "max_wait"
            )
        if bool(cfg.get("subnets")) != bool(cfg.get("security_group_ids")):
            raise InvalidRunConfigException(
                "subnets and security_group_ids go together: give both or neither", "subnets"
            )
        itype = str(cfg.get("instance_type") or "")
        if not re.fullmatch(r"ml\.[a-z0-9-]+\.[a-z0-9-]+", itype):
            raise InvalidRunConfigException(
                f"instance_type {itype[:60]!r} is not a SageMaker instance type: use e.g."
                " -cfg instance_type=ml.m5.large",
                "instance_type",
            )
        count = cfg.get("instance_count")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise InvalidRunConfigException(
                f"instance_count must be 1 or more, got {count!r}", "instance_count"
            )
        arn = self.role_arn(cfg.get("role"))
        if isinstance(cfg, dict):
            cfg["role"] = arn

    def _validate(
        self, app: AppDef, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> None:
        """Arguments SageMaker would refuse (each at most 256 characters)."""
        for arg in [app.roles[0].entrypoint, *app.roles[0].args] if app.roles else []:
            if len(arg) > MAX_ARG:
                raise InvalidRunConfigException(
                    f"an argument of {len(arg)} characters is over SageMaker's limit of"
                    f" {MAX_ARG} ({arg[:40]!r}…): put long text in a file in the workspace",
                    "args",
                )

    def _submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[TrainingJob]:
        name = _job_name(str(cfg.get("base_job_name") or app.name))
        given = cfg.get("instance_count")
        count = int(given) if isinstance(given, int) else max(app.roles[0].num_replicas, 1)
        role = macros.Values(
            img_root="",
            app_id=name,
            replica_id="$TORCHX_REPLICA_ID" if count > 1 else "0",
            rank0_env="TORCHX_RANK0_HOST",
        ).apply(app.roles[0])
        env = {
            **_opt_dict(cfg, "environment"),
            **role.env,
            "TORCHX_JOB_ID": make_app_handle("aws_sagemaker", self.session_name, name),
            **_boot_env(),
        }
        hyper = {k: str(v) for k, v in _opt_dict(cfg, "hyperparameters").items()}
        if cfg.get("container_log_level") is not None:
            hyper["sagemaker_container_log_level"] = str(cfg["container_log_level"])
        algo: dict[str, Any] = {
            "TrainingImage": role.image,
            "TrainingInputMode": str(cfg.get("input_mode") or "File"),
            "ContainerEntrypoint": _boot_entrypoint(role.entrypoint),
        }
        if role.args:
            algo["ContainerArguments"] = list(role.args)
        if cfg.get("metric_definitions"):
            algo["MetricDefinitions"] = [
                {"Name": k, "Regex": v} for k, v in _opt_dict(cfg, "metric_definitions").items()
            ]
        if cfg.get("enable_sagemaker_metrics"):
            algo["EnableSageMakerMetricsTimeSeries"] = True
        if cfg.get("training_repository_access_mode"):
            image_cfg: dict[str, Any] = {
                "TrainingRepositoryAccessMode": cfg["training_repository_access_mode"]
            }
            if cfg.get("training_repository_credentials_provider_arn"):
                image_cfg["TrainingRepositoryAuthConfig"] = {
                    "TrainingRepositoryCredentialsProviderArn": cfg[
                        "training_repository_credentials_provider_arn"
                    ]
                }
            algo["TrainingImageConfig"] = image_cfg
        resource: dict[str, Any] = {
            "InstanceType": cfg["instance_type"],
            "InstanceCount": count,
            "VolumeSizeInGB": _opt_int(cfg, "volume_size", 30),
        }
        if cfg.get("volume_kms_key"):
            resource["VolumeKmsKeyId"] = cfg["volume_kms_key"]
        if cfg.get("keep_alive_period_in_seconds"):
            resource["KeepAlivePeriodInSeconds"] = cfg["keep_alive_period_in_seconds"]
        output = str(cfg.get("output_path") or DEFAULT_OUTPUT)
        output_cfg: dict[str, Any] = {"S3OutputPath": output}
        if cfg.get("output_kms_key"):
            output_cfg["KmsKeyId"] = cfg["output_kms_key"]
        if cfg.get("disable_output_compression"):
            output_cfg["CompressionType"] = "NONE"
        stopping: dict[str, Any] = {"MaxRuntimeInSeconds": _opt_int(cfg, "max_run", 86400)}
        if cfg.get("max_wait"):
            stopping["MaxWaitTimeInSeconds"] = cfg["max_wait"]
        tags = {
            TAG_VERSION: __version__,
            TAG_APP_NAME: app.name,
            TAG_USER: str(cfg.get("user") or getpass.getuser()),
            **app.metadata,
            **_opt_dict(cfg, "tags"),
        }
        req: dict[str, Any] = {
            "TrainingJobName": name,
            "AlgorithmSpecification": algo,
            "RoleArn": self.role_arn(cfg.get("role")),
            "ResourceConfig": resource,
            "OutputDataConfig": output_cfg,
            "StoppingCondition": stopping,
            "Environment": env,
            "Tags": [{"Key": k, "Value": str(v)} for k, v in tags.items()],
            "EnableNetworkIsolation": bool(cfg.get("enable_network_isolation")),
            "EnableInterContainerTrafficEncryption": bool(
                cfg.get("encrypt_inter_container_traffic")
            ),
            "EnableManagedSpotTraining": bool(cfg.get("use_spot_instances")),
        }
        if hyper:
            req["HyperParameters"] = hyper
        if cfg.get("subnets"):
            req["VpcConfig"] = {
                "Subnets": cfg["subnets"],
                "SecurityGroupIds": cfg["security_group_ids"],
            }
        if cfg.get("checkpoint_s3_uri"):
            ckpt: dict[str, Any] = {"S3Uri": cfg["checkpoint_s3_uri"]}
            if cfg.get("checkpoint_local_path"):
                ckpt["LocalPath"] = cfg["checkpoint_local_path"]
            req["CheckpointConfig"] = ckpt
        if cfg.get("model_uri"):
            req["InputDataConfig"] = [
                {
                    "ChannelName": str(cfg.get("model_channel_name") or "model"),
                    "DataSource": {
                        "S3DataSource": {
                            "S3DataType": "S3Prefix",
                            "S3Uri": cfg["model_uri"],
                            "S3DataDistributionType": "FullyReplicated",
                        }
                    },
                }
            ]
        if cfg.get("debugger_hook_config"):
            req["DebugHookConfig"] = {"S3OutputPath": output}
        if cfg.get("disable_profiler"):
            req["ProfilerConfig"] = {"DisableProfiler": True}
        if cfg.get("max_retry_attempts") is not None:
            req["RetryStrategy"] = {"MaximumRetryAttempts": cfg["max_retry_attempts"]}
        if cfg.get("enable_infra_check"):
            req["InfraCheckConfig"] = {"EnableInfraCheck": True}
        return AppDryRunInfo(TrainingJob(name, req), _fmt)

    def _default_output(self) -> str:
        """``s3://sagemaker-REGION-ACCOUNT/``, the bucket created if missing (as Studio's SDK)."""
        from torchx_nb.schedulers.sagemaker_studio import default_bucket

        s3 = boto_client("s3", self._region)
        bucket = default_bucket(s3, self.client.meta.region_name, self._account())
        return f"s3://{bucket}/"

    def _default_image_repo(self, create: bool) -> str:
        from torchx_nb.schedulers.sagemaker_studio import default_image_repo, image_repo_uri

        region = self.client.meta.region_name
        if create:
            return default_image_repo(boto_client("ecr", self._region), region, self._account())
        return image_repo_uri(region, self._account())

    def plan_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        if not cfg.get("image_repo"):
            cfg = {**cfg, "image_repo": self._default_image_repo(create=False)}
        super().plan_workspace_and_update_role(role, workspace, cfg)

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        """With no image_repo, images go to the account's ECR repository ``torchx-nb``."""
        if not cfg.get("image_repo"):
            cfg = {**cfg, "image_repo": self._default_image_repo(create=True)}
        super().build_workspace_and_update_role(role, workspace, cfg)

    def schedule(self, dryrun_info: AppDryRunInfo[TrainingJob]) -> str:
        job = dryrun_info.request
        req = dict(job.request)
        if req["OutputDataConfig"]["S3OutputPath"] == DEFAULT_OUTPUT:
            path = self._default_output()
            req["OutputDataConfig"] = {**req["OutputDataConfig"], "S3OutputPath": path}
            if "DebugHookConfig" in req:
                req["DebugHookConfig"] = {"S3OutputPath": path}
        call(f"cannot create the training job {job.name}", self.client.create_training_job, **req)
        return job.name

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        try:
            job = self.client.describe_training_job(TrainingJobName=app_id)
        except Exception as e:
            text = str(e)
            if "ValidationException" in text or "not found" in text.lower():
                return None
            from torchx_nb.schedulers.aws_common import aws_error

            raise aws_error(e, f"cannot describe {app_id}") from None
        state = STATES.get(job.get("TrainingJobStatus", ""), AppState.UNKNOWN)
        secondary = str(job.get("SecondaryStatus") or "")
        if state == AppState.RUNNING and secondary in WAITING:
            state = AppState.PENDING
        algo = job.get("AlgorithmSpecification", {})
        res = job.get("ResourceConfig", {})
        count = int(res.get("InstanceCount", 1))
        entry = list(algo.get("ContainerEntrypoint") or [""])
        if entry[:2] == ["/bin/sh", "-c"] and len(entry) == 5 and entry[3] == "torchx-nb":
            entry = entry[4:]
        env = {
            k: v for k, v in (job.get("Environment") or {}).items() if not k.startswith(BOOT_ENV)
        }
        role = Role(
            name="sagemaker",
            image=algo.get("TrainingImage", ""),
            entrypoint=entry[0],
            args=[*entry[1:], *algo.get("ContainerArguments", [])],
            num_replicas=count,
            env=env,
            resource=Resource(-1, -1, -1),
        )
        region = self.client.meta.region_name
        resp = DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=0,
            ui_url=(
                f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}"
                f"#/jobs/{app_id}"
            ),
            roles=[role],
            roles_statuses=[
                RoleStatus(
                    "sagemaker",
                    [ReplicaStatus(i, state, "sagemaker", f"algo-{i + 1}") for i in range(count)],
                )
            ],
            started=_epoch(job.get("TrainingStartTime")),
            ended=_epoch(job.get("TrainingEndTime")) if is_terminal(state) else None,
        )
        reason = str(job.get("FailureReason") or "")
        resp.msg = f"{secondary}: {reason}" if secondary and reason else reason or secondary
        return resp

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        """Every training job of the account tagged by torchx (tags read 8 jobs at a time)."""
        summaries = [
            s
            for page in call(
                "cannot list training jobs",
                self.client.get_paginator("list_training_jobs").paginate,
            )
            for s in page.get("TrainingJobSummaries", [])
        ]

        def ours(summary: dict[str, Any]) -> dict[str, str] | None:
            tags = call(
                "cannot read training job tags",
                self.client.list_tags,
                ResourceArn=summary["TrainingJobArn"],
            ).get("Tags", [])
            found = {t["Key"]: t["Value"] for t in tags}
            return found if TAG_VERSION in found else None

        with ThreadPoolExecutor(max_workers=8) as pool:
            tags = list(pool.map(ours, summaries))
        return [
            ListAppResponse(
                app_id=s["TrainingJobName"],
                state=STATES.get(s.get("TrainingJobStatus", ""), AppState.UNKNOWN),
                name=t.get(TAG_APP_NAME, ""),
            )
            for s, t in zip(summaries, tags, strict=True)
            if t is not None
        ]

    def _cancel_existing(self, app_id: str) -> None:
        call(f"cannot stop {app_id}", self.client.stop_training_job, TrainingJobName=app_id)

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """CloudWatch events of instance ``k`` (stream ``{job}/algo-{k+1}-…``)."""
        if streams not in (None, Stream.COMBINED):
            raise ValueError("SageMaker keeps one combined log per instance: drop --streams")
        lines = self._lines(app_id, k, since, until, should_tail)
        return filter_regex(regex, lines) if regex else lines

    def _lines(
        self, app_id: str, k: int, since: datetime | None, until: datetime | None, should_tail: bool
    ) -> Iterator[str]:
        token: list[str | None] = [None]
        stream: str | None = None
        prefix = f"{app_id}/algo-{k + 1}-"
        while True:
            desc = self.describe(app_id)
            if desc is None:
                raise AwsError(f"unknown training job {app_id!r}")
            if stream is None:
                try:
                    found = self.log_client.describe_log_streams(
                        logGroupName=LOG_GROUP, logStreamNamePrefix=prefix
                    )["logStreams"]
                except Exception as e:
                    if "ResourceNotFound" not in type(e).__name__ + str(e):
                        raise
                    found = []
                stream = found[0]["logStreamName"] if found else None
            if stream is not None:
                yield from cloudwatch_events(
                    self.log_client, LOG_GROUP, stream, since, until, token
                )
            if not should_tail or is_terminal(desc.state):
                return
            if tail_wait(2.0):
                return


def create_scheduler(
    session_name: str,
    client: Any = None,
    log_client: Any = None,
    sts_client: Any = None,
    region: str | None = None,
) -> AwsSageMakerScheduler:
    return AwsSageMakerScheduler(
        session_name, client=client, log_client=log_client, sts_client=sts_client, region=region
    )


def _default_region() -> str | None:
    """None where boto3 finds a region itself; else the Studio app's region."""
    import boto3

    if boto3.session.Session().region_name:
        return None
    from torchx_nb.schedulers.sagemaker_studio import region

    return region()


def _epoch(value: Any) -> float | None:
    """boto3 gives datetimes; a JSON-decoded response may give epoch numbers."""
    if value is None:
        return None
    return value.timestamp() if hasattr(value, "timestamp") else float(value)
