"""``gcp_batch``: an app becomes one GCP Batch job (one task group, a task per replica), its image
patched with the workspace and pushed to Artifact Registry; logs come from Cloud Logging's
``batch_task_logs``.

TorchX's names carry over: the request is a ``GCPBatchJob`` whose ``job_def`` is the
``batch_v1.Job`` sent, the handle is ``gcp_batch://SESSION/PROJECT:LOCATION:JOB`` and the options
``project`` and ``location`` mean what they meant there. Unlike TorchX, ``${replica_id}`` is each
task's real index (in commands ``$BATCH_TASK_INDEX``, expanded by ``/bin/sh -c``, since GCP Batch
runs a container command without a shell; in env values the number itself).

The Google libraries are imported when a client is first needed. Clients (or credentials) can be
injected; otherwise credentials come from ``google.auth.default()`` (Application Default
Credentials) and the API endpoints from ``TORCHX_NB_GCP_BATCH_ENDPOINT`` and
``TORCHX_NB_GCP_LOGGING_ENDPOINT`` when set (private or regional endpoints). Both clients use the
REST transport: one code path, whether the endpoint is Google's or a loopback test server.

A cell sweep with an ``output_path`` goes as one job with a task count (``SubmitsArrays``): each
trial is a task, ``PROJECT:LOCATION:JOB:INDEX``. GCP Batch runs the tasks independently (one
that fails leaves the others running) but has no call that stops one task, so a trial's cancel
is a mark in the job's bucket that the cell runner looks for (``$TORCHX_NB_CANCEL_POLL``)."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from torchx_nb.apps.cell_main import CANCEL_MARK, CANCELLED_EXIT
from torchx_nb.apps.cell_main import OWN as CELL_OWN
from torchx_nb.schedulers.abilities import (
    DescribesMany,
    StoresOutputs,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import DescribeAppResponse, ListAppResponse, LogQuery, Scheduler
from torchx_nb.schedulers.gcp_reasons import waiting_reason
from torchx_nb.schedulers.ids import random_id
from torchx_nb.schedulers.logs import tail_wait
from torchx_nb.schedulers.outputs import (
    OUTPUT_URL_ENV,
    REMOTE_OUTPUT_DIR,
    cancel_mark,
    mark_cancelled,
    output_env,
    trial_output,
    upload_target,
)
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    BindMount,
    DeviceMount,
    InvalidRunConfigException,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    TorchxNbError,
    VolumeMount,
    is_terminal,
    macros,
)
from torchx_nb.specs.log_line import LogLine, Stream
from torchx_nb.specs.named_resources_gcp import machine_type_for
from torchx_nb.specs.structured_opts import StructuredOpts
from torchx_nb.version import __version__
from torchx_nb.workspace import WorkspaceMixin, WorkspaceOpts

LABEL_VERSION = "torchx_version"
LABEL_APP_NAME = "torchx_app_name"
LABEL_USER = "torchx_user"
RANK0_ENV = "BATCH_MAIN_NODE_HOSTNAME"
TASK_INDEX = "$BATCH_TASK_INDEX"
TASK_GROUP = "group0"
LOG_NAME = "batch_task_logs"
BATCH_ENDPOINT_ENV = "TORCHX_NB_GCP_BATCH_ENDPOINT"
LOGGING_ENDPOINT_ENV = "TORCHX_NB_GCP_LOGGING_ENDPOINT"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
DEFAULT_LOCATION = "us-central1"
FIREWALL_SCRIPT = "/sbin/iptables -A INPUT -j ACCEPT"
LOG_POLL_SECONDS = 3.0  # Cloud Logging allows 60 entries.list calls a minute per project
CANCEL_POLL_ENV = "TORCHX_NB_CANCEL_POLL"
CANCEL_POLL_SECONDS = 5  # how often an array task's cell runner looks for its cancel mark

JOB_STATES = {
    "STATE_UNSPECIFIED": AppState.UNKNOWN,
    "QUEUED": AppState.SUBMITTED,
    "SCHEDULED": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "CANCELLATION_IN_PROGRESS": AppState.RUNNING,
    "CANCELLED": AppState.CANCELLED,
    # torchx_nb deletes a job only to cancel it (where the API has no cancel)
    "DELETION_IN_PROGRESS": AppState.CANCELLED,
}
# how a 400 reads: InvalidArgument over gRPC, BadRequest over REST
BAD_REQUEST = ("InvalidArgument", "BadRequest")
ACTIVE_JOB_STATES = ("QUEUED", "SCHEDULED", "RUNNING", "CANCELLATION_IN_PROGRESS")
TASK_STATES = {
    "STATE_UNSPECIFIED": AppState.UNKNOWN,
    "PENDING": AppState.PENDING,
    "ASSIGNED": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "UNEXECUTED": AppState.CANCELLED,
}

_JOB_ID_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_PROJECT_RE = re.compile(r"^[a-z][a-z0-9.:-]{2,62}$")
_LOCATION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/@+-]*$")
_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")


class GcpError(TorchxNbError):
    """A GCP call failed in a way the user can fix; ``reason`` is the API error's class name
    (``NotFound``, ``PermissionDenied``...) when there was one."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


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


def storage_client(credentials: Any = None) -> Any:
    """google-cloud-storage's client: anonymous against an emulator (``STORAGE_EMULATOR_HOST``),
    else with ``credentials`` (default: Application Default Credentials)."""
    from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client.create_anonymous_client()
    return storage.Client(project=default_project(), credentials=credentials)


def parse_duration(text: str) -> int:
    """Seconds in ``3600``, ``3600s``, ``90m``, ``2h``, ``1h30m`` or ``1d``."""
    m = _DURATION_RE.match(text.strip())
    if not text.strip() or m is None:
        raise InvalidRunConfigException(
            f"max_run_duration {text!r} is not a duration: write e.g. 2h, 90m, 1h30m or 3600s",
            "max_run_duration",
        )
    d, h, mins, s = (int(g or 0) for g in m.groups())
    return ((d * 24 + h) * 60 + mins) * 60 + s


def default_project() -> str | None:
    """The project from the environment, without any network call: ``GOOGLE_CLOUD_PROJECT`` (or
    ``GCLOUD_PROJECT``, ``CLOUDSDK_CORE_PROJECT``), the credentials file's ``project_id``, then
    gcloud's active configuration."""
    import configparser
    import json
    from pathlib import Path

    for var in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    gcloud = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    for creds in (
        os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"),
        str(gcloud / "application_default_credentials.json"),
    ):
        if not creds:
            continue
        try:
            info = json.loads(Path(creds).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):
            project = info.get("project_id") or info.get("quota_project_id")
            if project:
                return str(project)
    try:
        active = (gcloud / "active_config").read_text().strip() or "default"
    except OSError:
        active = "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(gcloud / "configurations" / f"config_{active}")
    except configparser.Error:
        return None
    return parser.get("core", "project", fallback=None) or None


def _api_message(e: BaseException) -> str:
    """The API's own words: over REST google.api_core prefixes them with the method and URL."""
    message = str(getattr(e, "message", None) or e)
    message = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", message)
    return " ".join(message.split())


def gcp_error(e: BaseException, what: str, endpoint: str = "") -> TorchxNbError:
    """One line for the usual GCP failures: no or refused credentials, denied, unreachable."""
    if isinstance(e, TorchxNbError):
        return e
    name = type(e).__name__
    if name == "DefaultCredentialsError":
        return GcpError(
            f"{what}: no GCP credentials; run `gcloud auth application-default login`, or set"
            " GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
        )
    if name == "RefreshError":
        return GcpError(
            f"{what}: GCP refused the credentials ({_api_message(e)}); run `gcloud auth"
            " application-default login` again or check GOOGLE_APPLICATION_CREDENTIALS"
        )
    if name in ("TransportError", "ConnectionError", "ConnectTimeout", "ReadTimeout"):
        where = endpoint or "Google's API"
        return GcpError(
            f"{what}: cannot reach {where} ({_api_message(e)[:200]}); check the network"
            f" (and {BATCH_ENDPOINT_ENV} / {LOGGING_ENDPOINT_ENV} if set)"
        )
    # gRPC names, then what the same HTTP status is called over REST
    if name in ("Unauthenticated", "Unauthorized"):
        return GcpError(
            f"{what}: GCP refused the credentials ({_api_message(e)}); run `gcloud auth"
            " application-default login` again or check GOOGLE_APPLICATION_CREDENTIALS",
            name,
        )
    if name in ("PermissionDenied", "Forbidden"):
        return GcpError(
            f"{what}: permission denied: {_api_message(e)}; ask for the Batch Job Editor role"
            " (roles/batch.jobsEditor) on the project",
            name,
        )
    if name in ("TooManyRequests", "ResourceExhausted"):
        return GcpError(f"{what}: GCP quota exceeded even after retries; try again later", name)
    return GcpError(f"{what}: {name}: {_api_message(e)}", name)


def is_transient(e: BaseException) -> bool:
    """Worth retrying: throttled, unavailable, internal or timed out, or the connection broke."""
    return type(e).__name__ in (
        "ServiceUnavailable",
        "TooManyRequests",
        "ResourceExhausted",
        "InternalServerError",
        "GatewayTimeout",
        "DeadlineExceeded",
        "BadGateway",
        "ConnectionError",
        "TransportError",
    )


class GcpClients:
    """The Batch and Logging clients, created on first use unless injected; every call goes
    through ``call``: retried with exponential backoff on transient errors (google.api_core's
    Retry), anything else turned into one line."""

    def __init__(
        self,
        batch_client: Any = None,
        logging_client: Any = None,
        credentials: Any = None,
        retry_timeout: float = 30.0,
        timeout: float = 60.0,
    ) -> None:
        self._batch = batch_client
        self._logging = logging_client
        self._storage: Any = None
        self._credentials = credentials
        self.retry_timeout = retry_timeout
        self.timeout = timeout

    def credentials(self) -> Any:
        if self._credentials is None:
            try:
                import google.auth

                self._credentials, _ = google.auth.default(scopes=SCOPES)
            except Exception as e:
                raise gcp_error(e, "cannot find GCP credentials") from None
        return self._credentials

    @staticmethod
    def _options(env: str) -> dict[str, str] | None:
        endpoint = os.environ.get(env, "").strip()
        return {"api_endpoint": endpoint} if endpoint else None

    @property
    def batch(self) -> Any:
        if self._batch is None:
            from google.cloud import batch_v1

            self._batch = batch_v1.BatchServiceClient(
                transport="rest",
                credentials=self.credentials(),
                client_options=self._options(BATCH_ENDPOINT_ENV),
            )
        return self._batch

    @property
    def logging(self) -> Any:
        """google-cloud-logging's client over JSON/HTTP (its GAPIC layer has no REST
        transport)."""
        if self._logging is None:
            from google.cloud import logging as cloud_logging

            self._logging = cloud_logging.Client(
                project=default_project() or "-",
                credentials=self.credentials(),
                _use_grpc=False,
                client_options=self._options(LOGGING_ENDPOINT_ENV),
            )
        return self._logging

    @property
    def storage(self) -> Any:
        """google-cloud-storage's client (a trial's cancel mark goes in the job's bucket)."""
        if self._storage is None:
            self._storage = storage_client(self._credentials)
        return self._storage

    @staticmethod
    def endpoint(api: str) -> str:
        """Where calls to ``api`` (batch, logging or storage) go."""
        env = {
            "logging": LOGGING_ENDPOINT_ENV,
            "storage": "STORAGE_EMULATOR_HOST",
        }.get(api, BATCH_ENDPOINT_ENV)
        return os.environ.get(env, "").strip() or f"{api}.googleapis.com"

    def call(
        self, what: str, fn: Callable[..., Any], *args: Any, api: str = "batch", **kwargs: Any
    ) -> Any:
        """``fn(*args, **kwargs)`` with our backoff around it; a pager is read to the end inside
        the retry."""
        from google.api_core.retry import Retry

        owner = getattr(fn, "__self__", None)
        # a GAPIC method: no retry of its own (ours is around it) and our timeout
        extra = {"retry": None, "timeout": self.timeout} if hasattr(owner, "_transport") else {}

        def once() -> Any:
            result = fn(*args, **extra, **kwargs)
            return list(result) if hasattr(result, "pages") else result

        retry = Retry(
            predicate=is_transient,
            initial=0.25,
            multiplier=2.0,
            maximum=4.0,
            timeout=self.retry_timeout,
        )
        try:
            return retry(once)()
        except Exception as e:
            cause = e.__cause__ if type(e).__name__ == "RetryError" and e.__cause__ else e
            raise gcp_error(cause, what, self.endpoint(api)) from None


@dataclass(kw_only=True)
class _GcpBatchFields(StructuredOpts):
    project: str | None = None
    """Name of the GCP project. Defaults to the configured GCP project in the environment"""

    location: str = DEFAULT_LOCATION
    """Name of the location to schedule the job in. Defaults to us-central1"""

    machine_type: str | None = None
    """machine type (a2-highgpu-8g, n2-standard-8) or GPU family (a2-highgpu, a2-ultragpu,
    a3-highgpu, g2-standard: the member with the role's GPU count)"""

    provisioning_model: str = "standard"
    """standard, or spot (cheaper VMs that can be preempted)"""

    service_account: str | None = None
    """email of the service account the VMs run as"""

    network: str | None = None
    """VPC network (projects/P/global/networks/N)"""

    subnetwork: str | None = None
    """subnetwork (projects/P/regions/R/subnetworks/S)"""

    labels: dict[str, str] | None = None
    """labels added to the job (key:value,key:value)"""

    max_run_duration: str | None = None
    """longest a task may run before it is failed (2h, 90m, 3600s)"""

    user: str | None = None
    """user labelled on the job (default: the current user)"""

    output_path: str | None = None
    """gs://BUCKET/PREFIX: each job's $TORCHX_OUTPUT_DIR (a cell's result, its files) is
    uploaded to PREFIX/JOB_NAME/ at its end (with google-cloud-storage from the image)"""


@dataclass(kw_only=True)
class GcpBatchOpts(WorkspaceOpts, _GcpBatchFields):
    """gcp_batch's options (TorchX's, then ours), then the workspace's."""


@dataclass(frozen=True)
class _Checked:
    """An app's GCP Batch settings, every check made (before anything is built)."""

    project: str
    location: str
    machine_type: str | None
    model: str
    max_run_seconds: int | None


class GcpBatchScheduler(
    TakesTypedOptions[GcpBatchOpts],
    WorkspaceMixin,
    DescribesMany,
    StoresOutputs,
    SubmitsArrays,
    Scheduler[GcpBatchOpts],
):
    """One GCP Batch job per app; describes many jobs with one list call per location; a
    sweep's trials are the tasks of one job."""

    opts_type = GcpBatchOpts
    array_index_env = "BATCH_TASK_INDEX"
    throttles_arrays = True

    def __init__(
        self,
        session_name: str,
        batch_client: Any = None,
        logging_client: Any = None,
        credentials: Any = None,
        retry_timeout: float = 30.0,
    ) -> None:
        super().__init__("gcp_batch", session_name)
        self.gcp = GcpClients(batch_client, logging_client, credentials, retry_timeout)
        self._list_filter_ok = True
        self._locations: dict[str, set[str]] = {}

    def output_url(self, app_id: str, request: GCPBatchJob) -> str | None:
        return request.outputs

    def can_array(self, app: AppDef, cfg: Mapping[str, Any]) -> bool:
        """One role of one replica, with a ``gs://`` ``output_path``: a trial's cancel is a
        mark in that bucket (GCP Batch has no call that stops one task)."""
        opts = self.typed(cfg, partial=True)
        return super().can_array(app, cfg) and str(opts.output_path or "").startswith("gs://")

    def array_request(
        self, info: AppDryRunInfo[GCPBatchJob], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[GCPBatchJob]:
        """One task group of ``size`` tasks, ``parallelism`` = ``max_parallel``: each task a
        run of its own (replica 0, no hosts file), its cell runner told to look for its
        cancel mark."""
        from google.cloud import batch_v1

        req = info.request
        job = batch_v1.Job.deserialize(batch_v1.Job.serialize(req.job_def))
        group = job.task_groups[0]
        env = dict(group.task_spec.environment.variables)
        for own in group.task_environments[:1]:
            env.update(own.variables)
        env[CANCEL_POLL_ENV] = str(CANCEL_POLL_SECONDS)
        group.task_spec.environment = batch_v1.Environment(variables=env)
        group.task_environments = []
        group.task_count = size
        group.parallelism = min(size, max_parallel or size)
        group.require_hosts_file = False
        return AppDryRunInfo(
            GCPBatchJob(req.name, req.project, req.location, job, req.outputs), _fmt
        )

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """``PROJECT:LOCATION:JOB:INDEX``: task ``INDEX`` of the job."""
        return [f"{app_id}:{i}" for i in range(size)]

    def _validate(self, app: AppDef, scheduler: str, cfg: GcpBatchOpts | None = None) -> None:
        super()._validate(app, scheduler, cfg)
        if len(app.roles) > 1:
            names = ", ".join(r.name for r in app.roles)
            raise InvalidRunConfigException(
                f"GCP Batch runs one task group per job, and this app has {len(app.roles)} roles"
                f" ({names}): merge them into one role or submit one job per role",
                "roles",
            )

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: GcpBatchOpts) -> None:
        """Every check the request makes, before an image is built."""
        cfg = self.typed(cfg)
        self._validate(app, scheduler, cfg)
        self._check(app, cfg)

    def _check(self, app: AppDef, cfg: GcpBatchOpts) -> _Checked:
        """The project, location, machine and limits the request will use, each checked."""
        project = self._project(cfg)
        location = cfg.location or DEFAULT_LOCATION
        if not _LOCATION_RE.match(location):
            raise InvalidRunConfigException(
                f"{location!r} is not a GCP location (e.g. us-central1, europe-west4)", "location"
            )
        if len(app.roles) != 1:
            self._validate(app, "gcp_batch", cfg)
        res = app.roles[0].resource
        if res.memMB < 0:
            raise InvalidRunConfigException(
                "GCP Batch needs memory for the role: give it a resource (-h NAME, e.g."
                " gcp_a2-highgpu-1g, or --memMB)",
                "memMB",
            )
        model = (cfg.provisioning_model or "standard").upper()
        if model not in ("STANDARD", "SPOT", "PREEMPTIBLE"):
            raise InvalidRunConfigException(
                f"provisioning_model {cfg.provisioning_model!r}: use standard or spot",
                "provisioning_model",
            )
        seconds = parse_duration(cfg.max_run_duration) if cfg.max_run_duration else None
        return _Checked(
            project, location, machine_type_for(res, cfg.machine_type or None), model, seconds
        )

    def image_opts(self, cfg: Mapping[str, Any], build: bool) -> Mapping[str, Any]:
        """An unknown location is found before the image is built and pushed."""
        if build:
            opts = self.typed(cfg, partial=True)
            self._check_location(self._project(opts), opts.location or DEFAULT_LOCATION)
        return cfg

    def _project(self, cfg: GcpBatchOpts) -> str:
        project = cfg.project or default_project()
        if not project:
            raise InvalidRunConfigException(
                "no GCP project: pass -cfg project=ID, or set GOOGLE_CLOUD_PROJECT (or run"
                " `gcloud config set project ID`)",
                "project",
            )
        if not _PROJECT_RE.match(project):
            raise InvalidRunConfigException(
                f"{project!r} is not a GCP project id (lowercase letters, digits and -)",
                "project",
            )
        return project

    def _submit_dryrun(self, app: AppDef, cfg: GcpBatchOpts) -> AppDryRunInfo[GCPBatchJob]:
        from google.cloud import batch_v1
        from google.protobuf import duration_pb2

        checked = self._check(app, cfg)
        role = app.roles[0]
        name = job_name(app.name)
        values = macros.Values(img_root="", app_id=name, replica_id=TASK_INDEX, rank0_env=RANK0_ENV)
        r = values.apply(role)
        res = r.resource
        outputs = upload_target(cfg.output_path, name, ("gs",))
        env = {
            **(output_env(REMOTE_OUTPUT_DIR, outputs) if outputs else {}),
            **r.env,
            "TORCHX_ROLE_IDX": "0",
            "TORCHX_ROLE_NAME": r.name,
        }
        task_envs = []
        for i in range(role.num_replicas):
            per = macros.Values(
                img_root="", app_id=name, replica_id=str(i), rank0_env=RANK0_ENV
            ).apply(role)
            own = {k: v for k, v in per.env.items() if v != env.get(k)}
            task_envs.append(batch_v1.Environment(variables={"TORCHX_REPLICA_IDX": str(i), **own}))
        volumes, binds, options = _mounts(r)
        if res.memMB > 0:
            options.append(f"--shm-size={res.memMB}m")
        container = batch_v1.Runnable.Container(
            image_uri=r.image,
            commands=task_command([r.entrypoint, *r.args]),
            entrypoint="",
            options=" ".join(["--net host", *options]),
            volumes=binds,
        )
        task_spec = batch_v1.TaskSpec(
            runnables=[
                batch_v1.Runnable(script=batch_v1.Runnable.Script(text=FIREWALL_SCRIPT)),
                batch_v1.Runnable(container=container),
            ],
            environment=batch_v1.Environment(variables=env),
            compute_resource=batch_v1.ComputeResource(
                cpu_milli=max(res.cpu, 1) * 1000, memory_mib=max(res.memMB, 0)
            ),
            max_retry_count=max(role.max_retries, 0),
            volumes=volumes,
        )
        if checked.max_run_seconds:
            task_spec.max_run_duration = duration_pb2.Duration(seconds=checked.max_run_seconds)
        group = batch_v1.TaskGroup(
            task_count=role.num_replicas,
            task_count_per_node=1,
            parallelism=role.num_replicas,
            require_hosts_file=True,
            task_environments=task_envs,
            task_spec=task_spec,
        )
        labels: dict[str, str] = {}
        for key, value in {**app.metadata, **(cfg.labels or {})}.items():
            labels[_label_key(str(key))] = label_value(str(value))
        # ours last: list finds our jobs by them, so no metadata key may replace them
        labels[LABEL_VERSION] = label_value(__version__.replace(".", "-"))
        labels[LABEL_APP_NAME] = label_value(name)
        labels[LABEL_USER] = label_value(cfg.user or getpass.getuser())
        job = batch_v1.Job(
            task_groups=[group],
            labels=labels,
            logs_policy=batch_v1.LogsPolicy(
                destination=batch_v1.LogsPolicy.Destination.CLOUD_LOGGING
            ),
        )
        policy = self._allocation_policy(res, cfg, checked)
        if policy is not None:
            job.allocation_policy = policy
        return AppDryRunInfo(
            GCPBatchJob(name, checked.project, checked.location, job, outputs), _fmt
        )

    def _allocation_policy(self, res: Resource, cfg: GcpBatchOpts, checked: _Checked) -> Any:
        from google.cloud import batch_v1

        Policy = batch_v1.AllocationPolicy
        mtype, model = checked.machine_type, checked.model
        policy = Policy()
        used = False
        instance = Policy.InstancePolicy()
        if mtype:
            instance.machine_type = mtype
        if model != "STANDARD":
            instance.provisioning_model = getattr(Policy.ProvisioningModel, model)
        if mtype or model != "STANDARD":
            policy.instances = [
                Policy.InstancePolicyOrTemplate(policy=instance, install_gpu_drivers=res.gpu > 0)
            ]
            used = True
        if cfg.service_account:
            policy.service_account = batch_v1.ServiceAccount(email=cfg.service_account)
            used = True
        if cfg.network or cfg.subnetwork:
            policy.network = Policy.NetworkPolicy(
                network_interfaces=[
                    Policy.NetworkInterface(
                        network=cfg.network or "", subnetwork=cfg.subnetwork or ""
                    )
                ]
            )
            used = True
        return policy if used else None

    def schedule(self, dryrun_info: AppDryRunInfo[GCPBatchJob]) -> str:
        from google.api_core import exceptions

        job = dryrun_info.request
        attempts = 0

        def create(**kwargs: Any) -> Any:
            # the job id is ours (random): ALREADY_EXISTS on a retry means an earlier attempt
            # that looked failed (a dropped connection) created it
            nonlocal attempts
            attempts += 1
            try:
                return self.gcp.batch.create_job(retry=None, timeout=self.gcp.timeout, **kwargs)
            except exceptions.Conflict:  # ALREADY_EXISTS (409)
                if attempts > 1:
                    return None
                raise

        try:
            self.gcp.call(
                f"cannot create the GCP Batch job {job.name}",
                create,
                parent=job.parent,
                job=job.job_def,
                job_id=job.name,
            )
        except GcpError as e:
            if e.reason in (*BAD_REQUEST, "NotFound"):
                self._check_location(job.project, job.location)
            raise
        return f"{job.project}:{job.location}:{job.name}"

    def _check_location(self, project: str, location: str) -> None:
        """Refuse a location GCP Batch does not list for the project (once per project); when
        the locations cannot be listed, the API's own error on create will say why."""
        if location in self._locations.get(project, ()):
            return
        try:
            resp = self.gcp.call(
                "cannot list GCP Batch locations",
                self.gcp.batch.list_locations,
                request={"name": f"projects/{project}"},
            )
            found = [loc.location_id for loc in getattr(resp, "locations", resp)]
        except GcpError as e:
            if e.reason in ("PermissionDenied", "Forbidden", "MethodNotImplemented", "NotFound"):
                return
            raise
        self._locations[project] = set(found)
        if found and location not in found:
            raise GcpError(
                f"GCP Batch has no location {location!r} in project {project}: use one of"
                f" {', '.join(sorted(found))} (-cfg location=...)"
            )

    def _get(self, project: str, location: str, name: str) -> Any:
        """The job, or None when GCP Batch does not know it."""
        from google.api_core import exceptions

        try:
            return self.gcp.batch.get_job(
                name=f"projects/{project}/locations/{location}/jobs/{name}",
                retry=None,
                timeout=self.gcp.timeout,
            )
        except exceptions.NotFound:
            return None

    def _tasks(self, job: Any) -> list[Any]:
        return list(
            self.gcp.call(
                f"cannot list the tasks of {job.name}",
                self.gcp.batch.list_tasks,
                request={"parent": f"{job.name}/taskGroups/{TASK_GROUP}", "page_size": 1000},
            )
        )

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self._describe([app_id], every_task=True)[app_id]

    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """One list of active jobs per project and location (every page), one get for each job
        that has left that list, and a task list only for jobs whose tasks differ in state or
        that hold sweep trials (one list per job, however many of its trials are asked)."""
        return self._describe(app_ids, every_task=False)

    def _describe(
        self, app_ids: list[str], every_task: bool
    ) -> dict[str, DescribeAppResponse | None]:
        out: dict[str, DescribeAppResponse | None] = dict.fromkeys(app_ids)
        groups: dict[tuple[str, str], dict[str, list[tuple[str, int | None]]]] = {}
        for app_id in app_ids:
            project, location, name, index = parse_trial_id(app_id)
            groups.setdefault((project, location), {}).setdefault(name, []).append((app_id, index))
        for (project, location), names in groups.items():
            active = self._active_jobs(project, location) if len(names) > 1 else {}
            for name, ids in names.items():
                job = active.get(name)
                if job is None:
                    job = self.gcp.call(
                        f"cannot describe {ids[0][0]}", self._get, project, location, name
                    )
                if job is None:
                    continue
                trials = any(index is not None for _, index in ids)
                mixed = len([c for c in _counts(job).values() if c]) > 1
                tasks = self._tasks(job) if trials or mixed or every_task else None
                by_index = _by_index(tasks) if trials else {}  # once for all the job's trials
                for app_id, index in ids:
                    if index is None:
                        out[app_id] = self._response(app_id, job, tasks)
                    else:
                        out[app_id] = self._trial_response(app_id, job, by_index, index)
        return out

    def _list_jobs(self, parent: str, filter_: str) -> Iterator[Any]:
        if filter_ and self._list_filter_ok:
            try:
                yield from self.gcp.call(
                    f"cannot list the jobs of {parent}",
                    self.gcp.batch.list_jobs,
                    request={"parent": parent, "filter": filter_, "page_size": 1000},
                )
                return
            except GcpError as e:
                if e.reason not in BAD_REQUEST:
                    raise
                # an API that does not take this filter: list everything, select here
                self._list_filter_ok = False
        yield from self.gcp.call(
            f"cannot list the jobs of {parent}",
            self.gcp.batch.list_jobs,
            request={"parent": parent, "page_size": 1000},
        )

    def _active_jobs(self, project: str, location: str) -> dict[str, Any]:
        states = " OR ".join(f'status.state="{s}"' for s in ACTIVE_JOB_STATES)
        filter_ = f"labels.{LABEL_VERSION}:* AND ({states})"
        out: dict[str, Any] = {}
        for job in self._list_jobs(f"projects/{project}/locations/{location}", filter_):
            if job.status.state.name in ACTIVE_JOB_STATES:
                out[job.name.rsplit("/", 1)[-1]] = job
        return out

    def _response(self, app_id: str, job: Any, tasks: list[Any] | None) -> DescribeAppResponse:
        state = JOB_STATES.get(job.status.state.name, AppState.UNKNOWN)
        role = _role(job)
        role_name, count = role.name, role.num_replicas
        replicas = self._replicas(job, tasks, role_name, count, state)
        resp = DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max((r.num_restarts for r in replicas), default=0),
            ui_url=_console_url(app_id),
            roles=[role],
            roles_statuses=[RoleStatus(role_name, replicas)],
            metadata=dict(job.labels),
            started=_started(job),
            ended=_ts(job.update_time) if is_terminal(state) else None,
        )
        failed = [r for r in replicas if r.state == AppState.FAILED]
        if failed:
            resp.msg = "; ".join(f"{role_name}-{r.id}: {r.structured_error_msg}" for r in failed)
        elif job.status.status_events and state != AppState.SUCCEEDED:
            resp.msg = waiting_reason(job.status.status_events[-1].description)
        return resp

    def _replicas(
        self, job: Any, tasks: list[Any] | None, role: str, count: int, state: AppState
    ) -> list[ReplicaStatus]:
        if tasks is None:
            counts = _counts(job)
            only = next((k for k, v in counts.items() if v), None)
            rstate = TASK_STATES.get(only, state) if only else _replica_default(state)
            return [ReplicaStatus(i, rstate, role, f"task-{i}") for i in range(count)]
        out = [ReplicaStatus(i, _replica_default(state), role, f"task-{i}") for i in range(count)]
        for idx, task in _by_index(tasks).items():
            if idx < count:
                out[idx] = _task_replica(task, idx, role)
        return out

    def _trial_response(
        self, app_id: str, job: Any, tasks: dict[int, Any], index: int
    ) -> DescribeAppResponse:
        """Task ``index`` of a sweep's job, read as a run of its own (replica 0). A trial
        that failed with the cell runner's ``CANCELLED_EXIT``, or that we marked cancelled, or
        that had not ended when its whole job was cancelled, is CANCELLED; a marked trial that
        has not started yet is too (its cell runner exits as soon as it starts). ``tasks``: the
        job's tasks by index, read once for all its trials."""
        role = _role(job)
        role.num_replicas = 1
        task = tasks.get(index)
        rep = (
            _task_replica(task, 0, role.name)
            if task is not None
            else ReplicaStatus(0, AppState.PENDING, role.name, "task-0")
        )
        events = list(task.status.status_events) if task is not None else []
        state, msg = rep.state, rep.structured_error_msg
        marked = cancel_mark("gcp_batch", app_id).exists()
        cancelled_at = _cancelled_at(job)
        ended_at = _ts(events[-1].event_time) if events and is_terminal(state) else None
        if state == AppState.FAILED and (rep.exit_code == CANCELLED_EXIT or marked):
            state, msg = AppState.CANCELLED, "cancelled"
        elif cancelled_at is not None and state != AppState.SUCCEEDED:
            if not is_terminal(state) or ended_at is None or ended_at >= cancelled_at:
                state, msg = AppState.CANCELLED, "cancelled with its sweep's job"
        elif marked and state == AppState.PENDING:
            state, msg = AppState.CANCELLED, "cancelled before it started"
        elif marked and state == AppState.RUNNING:
            msg = f"cancel requested: the trial stops within {CANCEL_POLL_SECONDS} s"
        rep.state = state
        started = next(
            (_ts(ev.event_time) for ev in events if ev.task_state.name == "RUNNING"), None
        )
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=rep.num_restarts,
            msg=msg,
            ui_url=_console_url(app_id),
            roles=[role],
            roles_statuses=[RoleStatus(role.name, [rep])],
            metadata=dict(job.labels),
            started=started,
            ended=(ended_at or _ts(job.update_time)) if is_terminal(state) else None,
        )

    def _cancel_existing(self, app_id: str) -> None:
        """``cancel_job`` where the API has it; else (older API versions) delete the job. A
        sweep trial gets a cancel mark in its job's bucket instead: its cell runner looks for
        it every few seconds (and at its start) and ends the task."""
        project, location, name, index = parse_trial_id(app_id)
        if index is not None:
            self._cancel_trial(app_id, project, location, name, index)
            return
        full = f"projects/{project}/locations/{location}/jobs/{name}"
        cancel = getattr(self.gcp.batch, "cancel_job", None)
        if cancel is not None:
            try:
                self.gcp.call(f"cannot cancel {app_id}", cancel, name=full)
                return
            except GcpError as e:
                if e.reason != "MethodNotImplemented":
                    raise
        self.gcp.call(f"cannot delete {app_id}", self.gcp.batch.delete_job, name=full)

    def _cancel_trial(
        self, app_id: str, project: str, location: str, name: str, index: int
    ) -> None:
        job = self.gcp.call(f"cannot describe {app_id}", self._get, project, location, name)
        if job is None:
            raise GcpError(f"cannot cancel {app_id}: GCP Batch has no job {name}")
        base = dict(job.task_groups[0].task_spec.environment.variables).get(OUTPUT_URL_ENV)
        if not base or not base.startswith("gs://"):
            raise GcpError(
                f"cannot cancel {app_id} alone: its job keeps no outputs in a bucket, where"
                f" a trial's cancel mark goes; cancel the whole sweep (or job"
                f" {project}:{location}:{name})"
            )
        mark = f"{trial_output(base, index)}{CELL_OWN}/{CANCEL_MARK}"
        bucket, _, key = mark.removeprefix("gs://").partition("/")
        self.gcp.call(
            f"cannot write the cancel mark {mark}",
            lambda: (
                self.gcp.storage.bucket(bucket)
                .blob(key)
                .upload_from_string(b"cancelled by torchx_nb\n")
            ),
            api="storage",
        )
        mark_cancelled("gcp_batch", app_id)

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """``cancel_job`` once: the tasks that have ended keep their end, and the others are
        marked cancelled here."""
        for trial_id in trial_ids:
            mark_cancelled("gcp_batch", trial_id)
        self._cancel_existing(array_id)
        return True

    def _delete_existing(self, app_id: str) -> None:
        if parse_trial_id(app_id)[3] is not None:
            raise GcpError(
                f"{app_id} is one task of a sweep's job: cancel it, or delete the job"
                f" {app_id.rpartition(':')[0]}"
            )
        self._cancel_existing(app_id)

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Replica ``k``'s lines from Cloud Logging (``batch_task_logs``, its task's entries):
        stdout is logged at INFO severity and stderr at ERROR, so ``streams`` picks by
        severity."""
        project, location, name, index = parse_trial_id(q.app_id)
        job = self.gcp.call(f"cannot describe {q.app_id}", self._get, project, location, name)
        if job is None:
            raise ValueError(f"unknown app {q.app_id!r}")
        group = job.task_groups[0]
        env = dict(group.task_spec.environment.variables)
        if q.role != env.get("TORCHX_ROLE_NAME", q.role):
            raise ValueError(f"{q.app_id} has no role {q.role!r}")
        count = 1 if index is not None else int(group.task_count)
        if not 0 <= q.k < count:
            raise ValueError(f"{q.app_id} has no replica {q.k} (it has {count})")
        k = q.k if index is None else index  # a sweep trial: its task's log
        filt = [
            f'logName="projects/{project}/logs/{LOG_NAME}"',
            f'labels.job_uid="{job.uid}"',
            f'labels.task_id="{job.uid}-{TASK_GROUP}-{k}"',
        ]
        if q.streams == Stream.STDOUT:
            filt.append("severity<ERROR")
        elif q.streams == Stream.STDERR:
            filt.append("severity>=ERROR")
        if q.until:
            filt.append(f'timestamp<="{_rfc3339(q.until)}"')
        # google-cloud-logging reads only the last 24 hours unless the filter names a time
        start = q.since or datetime.fromtimestamp(_ts(job.create_time) or 0, timezone.utc)
        return self._log_lines(project, location, name, filt, start, q.tail, index)

    def _log_lines(
        self,
        project: str,
        location: str,
        name: str,
        filt: list[str],
        since: datetime,
        should_tail: bool,
        task: int | None = None,
    ) -> Iterator[str]:
        """Entries from ``since`` on; with ``should_tail`` until the job (or a sweep trial's
        ``task``: its siblings may run on) has ended."""
        cursor = _rfc3339(since)
        seen: set[str] = set()
        ended_at: float | None = None
        while True:
            where = [*filt, f'timestamp>="{cursor}"']
            entries = self.gcp.call(
                "cannot read the job's logs from Cloud Logging",
                self.gcp.logging.list_entries,
                api="logging",
                resource_names=[f"projects/{project}"],
                filter_=" AND ".join(where),
                order_by="timestamp asc",
                page_size=1000,
            )
            for entry in entries:
                if entry.insert_id in seen:
                    continue
                stamp = _rfc3339(entry.timestamp)
                if stamp != cursor:
                    seen.clear()
                cursor = stamp
                seen.add(entry.insert_id)
                text = entry.payload if isinstance(entry.payload, str) else str(entry.payload)
                yield LogLine(text if text.endswith("\n") else text + "\n", _ts(entry.timestamp))
            if not should_tail:
                return
            if ended_at is not None and time.monotonic() - ended_at >= LOG_POLL_SECONDS:
                return
            if ended_at is None and self._has_ended(project, location, name, task):
                # Cloud Logging may receive the last lines after the job ended: one more look
                ended_at = time.monotonic()
            if tail_wait(LOG_POLL_SECONDS):
                return

    def _has_ended(self, project: str, location: str, name: str, task: int | None) -> bool:
        job = self.gcp.call("cannot describe the job", self._get, project, location, name)
        if job is None or is_terminal(JOB_STATES.get(job.status.state.name, AppState.UNKNOWN)):
            return True
        if task is None:
            return False
        found = self.gcp.call(
            "cannot describe the task",
            self.gcp.batch.get_task,
            name=f"{job.name}/taskGroups/{TASK_GROUP}/tasks/{task}",
        )
        return found.status.state.name in ("SUCCEEDED", "FAILED")

    def list(self, cfg: GcpBatchOpts | None = None) -> list[ListAppResponse]:
        """Our jobs (labelled ``torchx_version``) in every location, or in ``cfg.location``
        when given, every page."""
        cfg = self.typed(cfg, partial=True)
        project = self._project(cfg)
        location = cfg.location or "-"
        out: list[ListAppResponse] = []
        for job in self._list_jobs(
            f"projects/{project}/locations/{location}", f"labels.{LABEL_VERSION}:*"
        ):
            if LABEL_VERSION not in job.labels:
                continue
            parts = job.name.split("/")
            app_id = f"{parts[1]}:{parts[3]}:{parts[5]}"
            out.append(
                ListAppResponse(
                    app_id=app_id,
                    state=JOB_STATES.get(job.status.state.name, AppState.UNKNOWN),
                    name=job.labels.get(LABEL_APP_NAME, parts[5]),
                )
            )
        return out


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


def _role(job: Any) -> Role:
    """The app's one role as the job holds it (a replica per task)."""
    group = job.task_groups[0] if job.task_groups else None
    spec = group.task_spec if group else None
    env = dict(spec.environment.variables) if spec else {}
    container = next((r.container for r in spec.runnables if r.container), None) if spec else None
    commands = list(container.commands) if container else [""]
    return Role(
        name=env.get("TORCHX_ROLE_NAME", "node"),
        image=container.image_uri if container else "",
        entrypoint=commands[0] if commands else "",
        args=commands[1:],
        num_replicas=int(group.task_count) if group else 0,
        env=env,
        resource=Resource(
            cpu=int(spec.compute_resource.cpu_milli // 1000) if spec else 1,
            gpu=0,
            memMB=int(spec.compute_resource.memory_mib) if spec else 0,
        ),
        max_retries=int(spec.max_retry_count) if spec else 0,
    )


def _console_url(app_id: str) -> str:
    project, location, name, _ = parse_trial_id(app_id)
    return (
        f"https://console.cloud.google.com/batch/jobsDetail/regions/{location}/jobs/{name}"
        f"/details?project={project}"
    )


def _by_index(tasks: Iterable[Any] | None) -> dict[int, Any]:
    return {int(t.name.rsplit("/", 1)[-1]): t for t in tasks or ()}


def _task_replica(task: Any, idx: int, role: str) -> ReplicaStatus:
    """Replica ``idx`` from a task: its state, last exit code, restarts and failure."""
    tstate = TASK_STATES.get(task.status.state.name, AppState.UNKNOWN)
    events = list(task.status.status_events)
    exit_code = None
    for ev in reversed(events):
        if ev.task_execution and ev.task_execution.exit_code:
            exit_code = int(ev.task_execution.exit_code)
            break
    rep = ReplicaStatus(idx, tstate, role, f"task-{idx}", exit_code=exit_code)
    rep.num_restarts = max(sum(1 for ev in events if ev.task_state.name == "RUNNING") - 1, 0)
    if tstate == AppState.FAILED:
        last = events[-1].description if events else ""
        rep.structured_error_msg = (
            f"FAILED (exit code {exit_code})" if exit_code is not None else "FAILED"
        ) + (f": {last}" if last else "")
    return rep


def _job_event_time(job: Any, *states: str) -> float | None:
    """When the job first moved to one of ``states`` (from its status events)."""
    for ev in job.status.status_events:
        if ev.description.rstrip(".").split(" for job")[0].rsplit(" to ", 1)[-1] in states:
            return _ts(ev.event_time)
    return None


def _cancelled_at(job: Any) -> float | None:
    if job.status.state.name not in ("CANCELLATION_IN_PROGRESS", "CANCELLED"):
        return None
    return _job_event_time(job, "CANCELLATION_IN_PROGRESS", "CANCELLED") or _ts(job.update_time)


def _counts(job: Any) -> dict[str, int]:
    for status in job.status.task_groups.values():
        return {str(k): int(v) for k, v in status.counts.items()}
    return {}


def _replica_default(state: AppState) -> AppState:
    return AppState.PENDING if state == AppState.SUBMITTED else state


def _ts(value: Any) -> float | None:
    if not value:
        return None
    try:
        return float(value.timestamp())
    except (AttributeError, ValueError, OSError):
        return None


def _started(job: Any) -> float | None:
    return _job_event_time(job, "RUNNING")


def _rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def create_scheduler(session_name: str, **kwargs: Any) -> GcpBatchScheduler:
    return GcpBatchScheduler(session_name, **kwargs)
