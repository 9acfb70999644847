"""``aws_sagemaker``: an app's first role becomes a SageMaker training job, created with boto3's
``create_training_job`` (no SageMaker Python SDK: it takes seconds to import and dropped the
estimator TorchX used). The image, patched with the workspace and the cell, is pushed to
``image_repo``; the container runs the role's entrypoint and args. Logs come from CloudWatch
``/aws/sagemaker/TrainingJobs``.

Every option of TorchX's SageMaker scheduler is accepted. Those that only make sense for the
SDK's script mode (``source_dir``, ``git_config``, ``code_location``, ``dependencies``) cannot
apply to a patched image and are refused with the reason, not dropped."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from torchx_nb.schedulers import aws_common
from torchx_nb.schedulers.abilities import DefinesMetrics, StoresOutputs, TakesTypedOptions
from torchx_nb.schedulers.api import (
    DescribeAppResponse,
    GivenOpts,
    ListAppResponse,
    LogQuery,
    Scheduler,
)
from torchx_nb.schedulers.aws_common import (
    AwsClients,
    AwsError,
    boto_client,
    call,
    cloudwatch_events,
)
from torchx_nb.schedulers.ids import make_unique
from torchx_nb.schedulers.logs import tail_wait
from torchx_nb.schedulers.outputs import REMOTE_OUTPUT_DIR, output_env, upload_target
from torchx_nb.schedulers.sagemaker_describe import BOOT_ENV, STATES, job_response
from torchx_nb.schedulers.sagemaker_options import AwsSageMakerOpts
from torchx_nb.schedulers.sagemaker_spot import check_times, checkpoint, spot_on
from torchx_nb.schedulers.sagemaker_stop import stopped_by as read_stopped_by
from torchx_nb.schedulers.sagemaker_stop import tag_stop
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    InvalidRunConfigException,
    is_terminal,
    macros,
    make_app_handle,
)
from torchx_nb.workspace import WorkspaceMixin

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
DEFAULT_OUTPUT = "s3://sagemaker-{region}-{account}/"
SCRIPT_MODE_ONLY = {
    "source_dir": "the workspace is shipped in the image",
    "git_config": "the workspace is shipped in the image",
    "code_location": "no code is uploaded to S3: the workspace is in the image",
    "dependencies": "put dependencies in the workspace or the base image",
}
MAX_ARG = 256
# Run in the container before the role's program: the node's rank and the rendezvous host from
# what SageMaker gives a container (SM_HOSTS/SM_CURRENT_HOST, else resourceconfig.json), and
# on failure a reason in /opt/ml/output/failure, which SageMaker reports as FailureReason —
# put first: SageMaker keeps 1,024 characters of it, and a program may have written its own
# long reason there (a traceback, as SageMaker's docs suggest), which follows it.
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
if [ $rc != 0 ]; then o=/opt/ml/output/failure; mkdir -p /opt/ml/output
{ echo "$1 exited with code $rc on $SM_CURRENT_HOST (replica $TORCHX_REPLICA_ID)"
cat $o 2>/dev/null; } >$o.t; mv -f $o.t $o
fi; exit $rc"""


@dataclass
class TrainingJob:
    """aws_sagemaker's native request: the arguments of CreateTrainingJob."""

    name: str
    request: dict[str, Any]
    outputs: str | None = None  # where the job uploads $TORCHX_OUTPUT_DIR (OUTPUT_PATH/NAME/)


def _fmt(job: TrainingJob) -> str:
    import json

    from torchx_nb.redact import redact

    return json.dumps(redact({"create_training_job": job.request}), indent=2)


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


class AwsSageMakerScheduler(
    AwsClients,
    TakesTypedOptions,
    WorkspaceMixin,
    StoresOutputs,
    DefinesMetrics,
    Scheduler[AwsSageMakerOpts],
):
    """SageMaker training jobs through boto3; describe, list, stop and CloudWatch logs."""

    service = "sagemaker"

    def metric_definitions(self, cfg: AwsSageMakerOpts) -> dict[str, str]:
        """The ``metric_definitions`` option: SageMaker reads these from the log itself."""
        return dict(cfg.metric_definitions or {})

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

    def role_arn(self, role: str | None) -> str:
        """The ARN of ``role`` (a name or an ARN), or the Studio execution role when none is
        given; looked up once per scheduler."""
        import torchx_nb.schedulers.sagemaker_studio as studio

        key = str(role or "")
        if key not in self._roles:
            if key.strip():
                self._roles[key] = studio.resolve_role(key, self._sts_client, self._iam_client)
            else:
                self._roles[key] = studio.execution_role(
                    self.client, self._sts_client, self._iam_client
                )
        return self._roles[key]

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: AwsSageMakerOpts) -> None:
        """Every option checked, and the role resolved to an ARN (a read of IAM, kept for the
        dry run), before anything is built or pushed. SageMaker runs one role; the node count
        comes from the role or instance_count."""
        from torchx_nb.metrics import metric_definitions

        if len(app.roles) != 1:
            raise InvalidRunConfigException(
                f"SageMaker runs one role; this app has {len(app.roles)}", "roles"
            )
        script_mode = {
            "source_dir": cfg.source_dir,
            "git_config": cfg.git_config,
            "code_location": cfg.code_location,
            "dependencies": cfg.dependencies,
        }
        for key, value in script_mode.items():
            if value:
                raise InvalidRunConfigException(
                    f"{key} does not apply to aws_sagemaker in torchx_nb:"
                    f" {SCRIPT_MODE_ONLY[key]}; drop it",
                    key,
                )
        check_times(spot_on(cfg.spot, cfg.use_spot_instances), cfg.max_run, cfg.max_wait)
        if bool(cfg.subnets) != bool(cfg.security_group_ids):
            raise InvalidRunConfigException(
                "subnets and security_group_ids go together: give both or neither", "subnets"
            )
        metric_definitions(cfg.metric_definitions)
        itype = cfg.instance_type or ""
        if not re.fullmatch(r"ml\.[a-z0-9-]+\.[a-z0-9-]+", itype):
            raise InvalidRunConfigException(
                f"instance_type {itype[:60]!r} is not a SageMaker instance type: use e.g."
                " -cfg instance_type=ml.m5.large",
                "instance_type",
            )
        count = cfg.instance_count
        if count is not None and count < 1:
            raise InvalidRunConfigException(
                f"instance_count must be 1 or more, got {count!r}", "instance_count"
            )
        self.role_arn(cfg.role)

    def output_url(self, app_id: str, request: TrainingJob) -> str | None:
        """``OUTPUT_PATH/JOB/``: the job uploads its output folder there, and SageMaker keeps
        its own model and output archives (``output/model.tar.gz``...) there too."""
        return request.outputs

    def _validate(self, app: AppDef, scheduler: str, cfg: AwsSageMakerOpts | None = None) -> None:
        """Arguments SageMaker would refuse (each at most 256 characters)."""
        for arg in [app.roles[0].entrypoint, *app.roles[0].args] if app.roles else []:
            if len(arg) > MAX_ARG:
                raise InvalidRunConfigException(
                    f"an argument of {len(arg)} characters is over SageMaker's limit of"
                    f" {MAX_ARG} ({arg[:40]!r}…): put long text in a file in the workspace",
                    "args",
                )

    def _submit_dryrun(self, app: AppDef, cfg: AwsSageMakerOpts) -> AppDryRunInfo[TrainingJob]:
        """The CreateTrainingJob request, exactly as ``schedule`` sends it. Reads, no writes:
        the role's ARN (IAM, or the Studio execution role) and, without output_path, the
        account (STS) that names its default bucket."""
        name = _job_name(cfg.base_job_name or app.name)
        count = cfg.instance_count or max(app.roles[0].num_replicas, 1)
        role = macros.Values(
            img_root="",
            app_id=name,
            replica_id="$TORCHX_REPLICA_ID" if count > 1 else "0",
            rank0_env="TORCHX_RANK0_HOST",
        ).apply(app.roles[0])
        output = cfg.output_path or self._default_output()
        outputs = upload_target(output, name, ("s3",))
        spot = spot_on(cfg.spot, cfg.use_spot_instances)
        ckpt, ckpt_env = checkpoint(spot, cfg, outputs or output)
        env = {
            **ckpt_env,
            **output_env(REMOTE_OUTPUT_DIR, outputs),
            **(cfg.environment or {}),
            **role.env,
            "TORCHX_JOB_ID": make_app_handle("aws_sagemaker", self.session_name, name),
            **_boot_env(),
        }
        hyper = {k: str(v) for k, v in (cfg.hyperparameters or {}).items()}
        if cfg.container_log_level is not None:
            hyper["sagemaker_container_log_level"] = str(cfg.container_log_level)
        algo: dict[str, Any] = {
            "TrainingImage": role.image,
            "TrainingInputMode": cfg.input_mode,
            "ContainerEntrypoint": _boot_entrypoint(role.entrypoint),
        }
        if role.args:
            algo["ContainerArguments"] = list(role.args)
        if cfg.metric_definitions:
            algo["MetricDefinitions"] = [
                {"Name": k, "Regex": v} for k, v in cfg.metric_definitions.items()
            ]
        if cfg.enable_sagemaker_metrics:
            algo["EnableSageMakerMetricsTimeSeries"] = True
        if cfg.training_repository_access_mode:
            image_cfg: dict[str, Any] = {
                "TrainingRepositoryAccessMode": cfg.training_repository_access_mode
            }
            if cfg.training_repository_credentials_provider_arn:
                image_cfg["TrainingRepositoryAuthConfig"] = {
                    "TrainingRepositoryCredentialsProviderArn": (
                        cfg.training_repository_credentials_provider_arn
                    )
                }
            algo["TrainingImageConfig"] = image_cfg
        resource: dict[str, Any] = {
            "InstanceType": cfg.instance_type,
            "InstanceCount": count,
            "VolumeSizeInGB": cfg.volume_size or 30,
        }
        if cfg.volume_kms_key:
            resource["VolumeKmsKeyId"] = cfg.volume_kms_key
        if cfg.keep_alive_period_in_seconds:
            resource["KeepAlivePeriodInSeconds"] = cfg.keep_alive_period_in_seconds
        output_cfg: dict[str, Any] = {"S3OutputPath": output}
        if cfg.output_kms_key:
            output_cfg["KmsKeyId"] = cfg.output_kms_key
        if cfg.disable_output_compression:
            output_cfg["CompressionType"] = "NONE"
        stopping: dict[str, Any] = {"MaxRuntimeInSeconds": cfg.max_run or 86400}
        if cfg.max_wait:
            stopping["MaxWaitTimeInSeconds"] = cfg.max_wait
        tags = aws_common.job_tags(app.name, cfg.user, app.metadata, cfg.tags)
        req: dict[str, Any] = {
            "TrainingJobName": name,
            "AlgorithmSpecification": algo,
            "RoleArn": self.role_arn(cfg.role),
            "ResourceConfig": resource,
            "OutputDataConfig": output_cfg,
            "StoppingCondition": stopping,
            "Environment": env,
            "Tags": [{"Key": k, "Value": str(v)} for k, v in tags.items()],
            "EnableNetworkIsolation": cfg.enable_network_isolation,
            "EnableInterContainerTrafficEncryption": cfg.encrypt_inter_container_traffic,
            "EnableManagedSpotTraining": spot,
        }
        if hyper:
            req["HyperParameters"] = hyper
        if cfg.subnets:
            req["VpcConfig"] = {"Subnets": cfg.subnets, "SecurityGroupIds": cfg.security_group_ids}
        if ckpt:
            req["CheckpointConfig"] = ckpt
        if cfg.model_uri:
            req["InputDataConfig"] = [
                {
                    "ChannelName": cfg.model_channel_name,
                    "DataSource": {
                        "S3DataSource": {
                            "S3DataType": "S3Prefix",
                            "S3Uri": cfg.model_uri,
                            "S3DataDistributionType": "FullyReplicated",
                        }
                    },
                }
            ]
        if cfg.debugger_hook_config:
            req["DebugHookConfig"] = {"S3OutputPath": output}
        if cfg.disable_profiler:
            req["ProfilerConfig"] = {"DisableProfiler": True}
        if cfg.max_retry_attempts is not None:
            req["RetryStrategy"] = {"MaximumRetryAttempts": cfg.max_retry_attempts}
        if cfg.enable_infra_check:
            req["InfraCheckConfig"] = {"EnableInfraCheck": True}
        return AppDryRunInfo(TrainingJob(name, req, outputs), _fmt)

    def _default_output(self) -> str:
        """``s3://sagemaker-REGION-ACCOUNT/``, the bucket SageMaker Studio's SDK uses (the
        account is read from STS once; ``schedule`` creates the bucket if missing)."""
        from torchx_nb.schedulers.sagemaker_studio import default_bucket_name

        return f"s3://{default_bucket_name(self.client.meta.region_name, self._account())}/"

    def _default_image_repo(self, create: bool) -> str:
        from torchx_nb.schedulers.sagemaker_studio import default_image_repo, image_repo_uri

        region = self.client.meta.region_name
        if create:
            return default_image_repo(boto_client("ecr", self._region), region, self._account())
        return image_repo_uri(region, self._account())

    def image_opts(self, cfg: AwsSageMakerOpts, build: bool) -> AwsSageMakerOpts:
        """With no image_repo, images go to the account's ECR repository ``torchx-nb``
        (made at the first build)."""
        if cfg.image_repo:
            return cfg
        return cfg.with_(image_repo=self._default_image_repo(create=build))

    def schedule(self, dryrun_info: AppDryRunInfo[TrainingJob]) -> str:
        """Sends the dry run's request as it is; the default output bucket it names is created
        first when missing (as SageMaker's SDK does)."""
        from torchx_nb.schedulers.sagemaker_studio import ensure_bucket

        job = dryrun_info.request
        ensure_bucket(
            boto_client("s3", self._region),
            str(job.request["OutputDataConfig"]["S3OutputPath"]),
            self.client.meta.region_name,
        )
        call(
            f"cannot create the training job {job.name}",
            self.client.create_training_job,
            **job.request,
        )
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
        stopped_by = None
        if job.get("TrainingJobStatus") == "Stopped" and job.get("TrainingJobArn"):
            with contextlib.suppress(Exception):  # who is extra: never fail describe
                stopped_by = read_stopped_by(self.client, job["TrainingJobArn"])
        return self._response(app_id, job, stopped_by)

    def _response(
        self, app_id: str, job: dict[str, Any], stopped_by: str | None = None
    ) -> DescribeAppResponse:
        """The status of a DescribeTrainingJob answer (``sagemaker_describe``)."""
        return job_response(app_id, job, self.client.meta.region_name, stopped_by)

    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        """Every training job of the account tagged by torchx (tags read 8 jobs at a time)."""
        summaries = [
            s
            for page in aws_common.pages(
                "cannot list training jobs", self.client, "list_training_jobs"
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
            return found if aws_common.TAG_VERSION in found else None

        with ThreadPoolExecutor(max_workers=8) as pool:
            tags = list(pool.map(ours, summaries))
        return [
            ListAppResponse(
                app_id=s["TrainingJobName"],
                state=STATES.get(s.get("TrainingJobStatus", ""), AppState.UNKNOWN),
                name=t.get(aws_common.TAG_APP_NAME, ""),
            )
            for s, t in zip(summaries, tags, strict=True)
            if t is not None
        ]

    def _cancel_existing(self, app_id: str) -> None:
        """Tag the job with who cancels it (StopTrainingJob keeps no reason), then stop it;
        a tag that cannot be written (no sagemaker:AddTags) does not hold up the stop."""
        with contextlib.suppress(Exception):
            tag_stop(self.client, app_id)
        call(f"cannot stop {app_id}", self.client.stop_training_job, TrainingJobName=app_id)

    #: why ``--streams`` cannot pick a stream here
    combined_only = "SageMaker keeps one combined log per instance"

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """CloudWatch events of instance ``k`` (stream ``{job}/algo-{k+1}-…``)."""
        return self._lines(q.app_id, q.k, q.since, q.until, q.tail)

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


def create_scheduler(session_name: str, **kwargs: Any) -> AwsSageMakerScheduler:
    return AwsSageMakerScheduler(session_name, **kwargs)


def _default_region() -> str | None:
    """None where boto3 finds a region itself; else the Studio app's region."""
    import boto3

    try:
        if boto3.session.Session().region_name:
            return None
    except Exception as e:  # a profile named that the config does not have
        raise aws_common.aws_error(e, "cannot read the AWS configuration") from None
    from torchx_nb.schedulers.sagemaker_studio import region

    return region()
