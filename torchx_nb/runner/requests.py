"""What a front end asks the runner for (``RunRequest``), what it makes of it
(``PreparedRun``), the runner's constants and its two errors."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    CfgVal,
    as_cfg,
)
from torchx_nb.specs.exceptions import AppValidationError as AppValidationError
from torchx_nb.specs.exceptions import NoSuchReplica as NoSuchReplica
from torchx_nb.specs.program import Program
from torchx_nb.specs.structured_opts import StructuredOpts
from torchx_nb.workspace.use import WorkspaceUse

if TYPE_CHECKING:  # a data type, imported lazily (environment/ is heavy to import)
    from torchx_nb.environment.plan import EnvPlan

#: a scheduler's resolved options: its typed structure (``TakesTypedOptions``: the type is its
#: ``Scheduler[Opts]`` parameter), or a mapping for a scheduler written TorchX's way
Options = StructuredOpts | Mapping[str, CfgVal]

DEFAULT_SESSION = "torchx"
DEFAULT_SCHEDULER = "local_cwd"
ENV_JOB_ID = "TORCHX_JOB_ID"
ENV_SESSION_ID = "TORCHX_INTERNAL_SESSION_ID"
ENV_PARENT_RUN_ID = "TORCHX_PARENT_RUN_ID"
NO_WORKSPACE = ("", "none")
_NOT_SCHEDULER_PARAMS = {
    "TORCHXCONFIG",
    ENV_JOB_ID,
    ENV_SESSION_ID,
    ENV_PARENT_RUN_ID,
    "TORCHX_TRACKERS",
}


def _check_replica(desc: DescribeAppResponse, role_name: str, k: int) -> None:
    """Refuse a role or replica the scheduler's describe says the job does not have (a role
    whose replicas are not known yet passes)."""
    replicas = {rs.role: len(rs.replicas) for rs in desc.roles_statuses}
    if not replicas:
        return
    if role_name not in replicas:
        raise NoSuchReplica(f"no role {role_name!r} (roles: {', '.join(replicas)})")
    count = replicas[role_name]
    if count and not 0 <= k < count:
        raise NoSuchReplica(f"role {role_name!r} has replicas 0..{count - 1}, not {k}")


_ROLE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def _params_from_env() -> dict[str, str]:
    """``TORCHX_FOO=bar`` → ``{"foo": "bar"}``, as TorchX passes them to scheduler factories."""
    return {
        key[len("TORCHX_") :].lower(): val
        for key, val in os.environ.items()
        if key.startswith("TORCHX_")
        and not key.startswith("TORCHX_NB_")
        and key not in _NOT_SCHEDULER_PARAMS
        and not key.startswith("TORCHX_TRACKER")
    }


@dataclass
class RunRequest:
    """What a front end asks to run: a component by name (with its arguments as the command
    line gives them, or a dict), a notebook cell's source, or an AppDef; where, with which
    options and workspace. Unset fields take the defaults every front end shares: the
    scheduler from ``default_scheduler``, else ``[cli:run] scheduler`` in ``.torchxconfig``,
    else local_cwd; the workspace from ``[cli:run] workspace``, else the current folder (used
    only when the scheduler can take one; ``""`` or ``"none"``: no workspace)."""

    component: str | None = None
    component_args: Sequence[str] | Mapping[str, Any] = ()
    cell: str | None = None
    app: AppDef | None = None
    scheduler: str | None = None
    default_scheduler: str | None = None
    cfg: Sequence[str] = ()
    scheduler_defaults: Mapping[str, Mapping[str, CfgVal]] = field(default_factory=dict)
    workspace: str | None = None
    name: str | None = None
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    j: str | None = None
    resource: str | None = None
    parent_run_id: str | None = None
    notebook: str | None = None
    push: bytes | None = None  # the kernel variables sent into a cell's namespace (cloudpickle)
    run_notebook: str | None = None  # a whole notebook to run (its folder is the workspace)
    parameters: Mapping[str, Any] = field(default_factory=dict)  # injected into it
    cell_timeout: float | None = None  # seconds each of its cells may take
    packages: str | None = None  # the environment: auto (the default), none, or a file


@dataclass(frozen=True)
class Build:
    """The image build a run made before it was submitted: its time (the job's first
    phase)."""

    seconds: float


@dataclass(frozen=True)
class PreparedRun:
    """A request made ready, one value made by ``Runner.prepare`` and consumed by
    ``Runner.submit``: what runs (``program``: a component's AppDef, a ``CellProgram`` or a
    ``NotebookProgram``; ``app``: the AppDef as it is sent), where (``scheduler``), with which
    options (``opts``: the scheduler's typed options, resolved once), how the workspace is
    used (``workspace_use``: the ability's own value, None without a workspace), the
    environment plan of the image (``environment``, an
    ``torchx_nb.environment.plan.EnvPlan``, or None), the image ``build`` (None for a dry
    run, or when no image was built), the scheduler's exact request (``info``, TorchX's
    ``AppDryRunInfo``; ``request`` is its native request) and what the job store records."""

    program: Program
    app: AppDef
    info: AppDryRunInfo[Any]
    scheduler: str
    opts: Options
    workspace_use: WorkspaceUse | None
    environment: EnvPlan | None
    build: Build | None
    record: Mapping[str, str | None]
    #: the metrics the scheduler's options define as ``{NAME: REGEX}`` (a ``DefinesMetrics``
    #: backend's, e.g. SageMaker's ``metric_definitions``): the notebook charts them beside
    #: those the magic names
    metric_definitions: Mapping[str, str] = field(default_factory=dict)
    #: made for a dry run (``Runner.prepare`` without ``build``): its workspace was only
    #: listed, nothing built, pushed or written, so it cannot be submitted
    dry: bool = False
    #: this run's identity, which its copies share (a deep copy, a pickle's round trip): the
    #: Runner sends a prepared run once, known by this token
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def request(self) -> Any:
        """The scheduler's native request (the dict, proto or script it sends)."""
        return self.info.request

    @property
    def workspace(self) -> str | None:
        """The workspace's folder (None: no workspace, the program travels in the request)."""
        return self.workspace_use.path if self.workspace_use is not None else None

    @property
    def preview(self) -> str | None:
        """What a dry run shows would ship (None for a build, or when nothing is copied)."""
        return self.workspace_use.preview if self.workspace_use is not None else None


class PreparedDryRun(AppDryRunInfo[Any]):
    """TorchX's ``AppDryRunInfo`` as ``Runner.dryrun`` returns it: a façade over the prepared
    run (its request, printed as the scheduler prints it; the AppDef and options as TorchX's
    code reads them), which ``Runner.schedule`` submits."""

    def __init__(self, prepared: PreparedRun) -> None:
        self.prepared = prepared

    @property
    def request(self) -> Any:
        return self.prepared.info.request

    @property
    def app(self) -> AppDef:
        return self.prepared.app

    @property
    def cfg(self) -> Mapping[str, CfgVal]:
        return as_cfg(self.prepared.opts)

    # TorchX 0.7.0's fields (it has no ``app``/``cfg`` properties): code written for it reads
    # them, as its Runner.schedule reads ``_scheduler``; read from the prepared run, kept on
    # nothing
    @property
    def _app(self) -> AppDef:  # type: ignore[override]
        return self.prepared.app

    @property
    def _cfg(self) -> Mapping[str, CfgVal]:  # type: ignore[override]
        return as_cfg(self.prepared.opts)

    @property
    def _scheduler(self) -> str:  # type: ignore[override]
        return self.prepared.scheduler

    @property
    def workspace_preview(self) -> str | None:
        """What would ship (a dry run's file table), as the prepared run has it."""
        return self.prepared.preview

    def __repr__(self) -> str:
        return repr(self.prepared.info)
