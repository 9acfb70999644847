"""The Runner: one object through which the CLI, the magics and the server dryrun, run, watch,
list and cancel apps on any scheduler. Mirrors ``torchx.runner.Runner``, and records every
submission in the job store before ``run`` returns.

The seams it owns:

- **one submit path**: a ``RunRequest`` (what to run, where, with which options and
  workspace) goes through ``prepare`` (scheduler and options resolved once, workspace used as
  the scheduler's abilities allow, the dry run) and ``submit`` (sent, recorded); the CLI, the
  magics and the Python API all call them;
- **abilities, not probes**: what a scheduler can do is read from the ability classes it
  derives from (``isinstance``);
- **one status refresher**: ``refresh`` asks each scheduler once per batch of handles, and the
  job store is written only when a state really changed."""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import os
import re
import secrets
import sys
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.schedulers import (
    SchedulerFactory,
    builtin_scheduler_factories,
    get_scheduler_factories,
)
from torchx_nb.schedulers.abilities import (
    DescribesMany,
    DirWorkspaceMixin,
    LocalWorkspace,
    RunsEndHook,
    StoresOutputs,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler
from torchx_nb.schedulers.outputs import trial_output
from torchx_nb.specs.api import (
    MISSING,
    AppDef,
    AppDryRunInfo,
    AppHandle,
    AppState,
    AppStatus,
    CfgVal,
    InvalidRunConfigException,
    ReplicaStatus,
    RoleStatus,
    TorchxNbError,
    UnknownAppException,
    UnknownSchedulerException,
    is_terminal,
    macros,
    make_app_handle,
    message_text,
    parse_app_handle,
    runopts,
)
from torchx_nb.specs.failure import FailureCard, torchelastic_exception
from torchx_nb.specs.log_line import Stream
from torchx_nb.specs.program import CellProgram, Program, program_of
from torchx_nb.workspace import WorkspaceMixin

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


class AppValidationError(TorchxNbError, ValueError):
    """The AppDef cannot run anywhere (no entrypoint, no replicas, no roles)."""


class NoSuchReplica(TorchxNbError, LookupError):
    """The job has no such role, or no such replica of it."""


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


@dataclass
class PreparedRun:
    """A request made ready: what will run (``program``: a component's AppDef or a cell),
    where, with which options and workspace, the scheduler's exact request (``info``) and
    what to record."""

    program: Program
    info: AppDryRunInfo[Any]
    scheduler: str
    opts: Any
    workspace: str | None
    record: dict[str, str | None]

    @property
    def app(self) -> AppDef:
        assert self.info.app is not None
        return self.info.app


class Runner:
    """Submits apps to schedulers and answers for them by handle (``sched://session/app_id``)."""

    def __init__(
        self,
        name: str = DEFAULT_SESSION,
        scheduler_factories: Mapping[str, SchedulerFactory] | None = None,
        component_defaults: Mapping[str, Mapping[str, str]] | None = None,
        scheduler_params: Mapping[str, Any] | None = None,
        jobstore: JobStore | None = None,
    ) -> None:
        self._name = name
        self._explicit_factories = scheduler_factories is not None
        self._all_factories: dict[str, SchedulerFactory] | None = (
            dict(scheduler_factories) if scheduler_factories is not None else None
        )
        self._component_defaults = dict(component_defaults or {})
        self._scheduler_params = {**_params_from_env(), **dict(scheduler_params or {})}
        self._schedulers: dict[str, Scheduler[Any]] = {}
        self._apps: dict[AppHandle, AppDef] = {}
        self._jobstore = jobstore
        self._last_state: dict[AppHandle, str] = {}
        self._local: dict[str, bool] = {}
        self._session_id = secrets.token_hex(16)

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every scheduler this runner created."""
        for sched in self._schedulers.values():
            sched.close()
        self._schedulers.clear()

    def name(self) -> str:
        return self._name

    @property
    def jobstore(self) -> JobStore:
        if self._jobstore is None:
            self._jobstore = JobStore()
        return self._jobstore

    # ---- schedulers and their options --------------------------------------------------

    def scheduler_factories(self) -> dict[str, SchedulerFactory]:
        """Every backend, built-in and from entry points (scanned once, on first need)."""
        if self._all_factories is None:
            self._all_factories = dict(get_scheduler_factories())
        return self._all_factories

    def _factory(self, scheduler: str) -> SchedulerFactory | None:
        """A built-in backend is found without scanning entry points, unless a plugin might
        shadow it: plugins never replace built-in names, so the scan can be skipped."""
        if self._all_factories is None and not self._explicit_factories:
            builtin = builtin_scheduler_factories().get(scheduler)
            if builtin is not None:
                return builtin
        return self.scheduler_factories().get(scheduler)

    def scheduler_backends(self) -> list[str]:
        return list(self.scheduler_factories())

    def get_scheduler(self, scheduler: str) -> Scheduler[Any]:
        """The (cached) scheduler instance for a backend name."""
        sched = self._schedulers.get(scheduler)
        if sched is None:
            factory = self._factory(scheduler)
            if factory is None:
                raise UnknownSchedulerException(scheduler, list(self.scheduler_factories()))
            sched = factory(self._name, **self._params_for(factory))
            self._schedulers[scheduler] = sched
        return sched

    def _params_for(self, factory: SchedulerFactory) -> dict[str, Any]:
        """The scheduler params (from code and ``TORCHX_*`` variables) the factory accepts, as
        TorchX passes them to ``create_scheduler``."""
        params = self._scheduler_params
        if not params:
            return {}
        module = getattr(factory, "module", None)
        target: Any = factory
        if module:
            import importlib

            target = getattr(importlib.import_module(module), "create_scheduler", factory)
        sig = inspect.signature(target)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
            return dict(params)
        return {k: v for k, v in params.items() if k in sig.parameters and k != "session_name"}

    def scheduler_run_opts(self, scheduler: str) -> runopts:
        return self.get_scheduler(scheduler).run_opts()

    def cfg_from_str(self, scheduler: str, *cfg_literals: str) -> dict[str, CfgVal]:
        """Parse ``-cfg`` literals strictly: unknown options and bad values raise."""
        opts = self.scheduler_run_opts(scheduler)
        cfg: dict[str, CfgVal] = {}
        for literal in cfg_literals:
            cfg.update(opts.cfg_from_str(literal, strict=True))
        return cfg

    def cfg_with_config_files(
        self, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> dict[str, CfgVal]:
        """``cfg`` completed from ``.torchxconfig`` files (explicit values win)."""
        from torchx_nb import config

        return config.apply_runopts(scheduler, dict(cfg or {}), self.scheduler_run_opts(scheduler))

    def resolve_opts(self, scheduler: str, cfg: Mapping[str, CfgVal] | None) -> Any:
        """The scheduler's options from ``cfg``, checked once: an unknown key names the closest
        option; the result is the scheduler's typed structure (``TakesTypedOptions``) or a dict."""
        sched = self.get_scheduler(scheduler)
        if isinstance(sched, TakesTypedOptions) and isinstance(cfg, sched.opts_type):
            return cfg
        given = dict(cfg.items()) if cfg is not None else {}
        opts = sched.run_opts()
        unknown = opts.unknown_keys(given)
        if unknown:
            key = unknown[0]
            hint = opts.suggest(key)
            raise InvalidRunConfigException(
                f"{scheduler} has no option {key!r}"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f" (see `torchx-nb runopts {scheduler}`)",
                key,
                given,
            )
        return sched.resolve_opts(given)

    # ---- the one submit path -----------------------------------------------------------

    def default_scheduler(self, preferred: str | None = None) -> str:
        """``preferred`` (a front end's own default), else ``[cli:run] scheduler``, else
        local_cwd."""
        if preferred:
            return preferred
        from torchx_nb import config

        return config.cli_defaults("run").get("scheduler") or DEFAULT_SCHEDULER

    def prepare(self, request: RunRequest, build: bool = False) -> PreparedRun:
        """Check everything in ``request`` and build the scheduler's exact request: the app
        (from the cell, the component or the AppDef), the scheduler and its options (the front
        end's defaults, then ``-cfg``, then ``.torchxconfig``), the workspace. With ``build``
        the workspace is built and pushed (for a run); without, nothing is (a dry run)."""
        import hashlib

        scheduler = self.request_scheduler(request)
        opts = self.request_opts(request)
        app = self._request_app(request)
        workspace = self.request_workspace(request)
        info = self.dryrun(
            app,
            scheduler,
            opts,
            workspace,
            request.parent_run_id,
            build_workspace=build,
            push=request.push,
        )
        record: dict[str, str | None] = {
            "workspace": workspace,
            "notebook": request.notebook or request.run_notebook,
        }
        if request.run_notebook is not None and request.parameters:
            record["params"] = json.dumps(dict(request.parameters), default=str)
        if request.cell is not None:
            record["cell_hash"] = hashlib.sha256(request.cell.encode()).hexdigest()[:16]
        return PreparedRun(program_of(app) or app, info, scheduler, info._cfg, workspace, record)

    def submit(self, prepared: PreparedRun, **record: str | None) -> AppHandle:
        """Send a prepared (built) run and record it in the job store (with ``record``: a
        sweep trial's ``sweep``, ``trial`` and ``params``)."""
        return self.schedule(prepared.info, **{**prepared.record, **record})

    def submit_array(
        self,
        prepared: PreparedRun,
        points: list[str],
        max_parallel: int | None,
        sweep: str,
    ) -> list[AppHandle]:
        """Send a prepared run as one native array of ``len(points)`` tasks (its scheduler
        ``SubmitsArrays``), and record each task as a trial of ``sweep`` (``points``: each
        trial's parameters as JSON). Returns the trials' handles, in index order."""
        sched = self.get_scheduler(prepared.scheduler)
        if not isinstance(sched, SubmitsArrays):
            raise TorchxNbError(f"{prepared.scheduler} has no native arrays")
        info = prepared.info
        array = sched.array_request(info, len(points), max_parallel)
        array._app, array._cfg, array._scheduler = info._app, info._cfg, info._scheduler
        array_id = sched.schedule(array)
        base = None
        if isinstance(sched, StoresOutputs):
            with contextlib.suppress(Exception):
                base = sched.output_url(array_id, array.request)
        app = info._app or AppDef(name=array_id)
        now = time.time()
        handles = []
        for i, (task_id, params) in enumerate(
            zip(sched.trial_ids(array_id, len(points)), points, strict=True)
        ):
            handle = make_app_handle(prepared.scheduler, self._name, task_id)
            self._apps[handle] = app
            handles.append(handle)
            self._record_submission(
                handle,
                prepared.scheduler,
                task_id,
                app,
                now,
                prepared.record,
                outputs=trial_output(base, i),
                sweep=sweep,
                trial=i,
                params=params,
                build_seconds=prepared.info.build_seconds,
            )
        return handles

    def _record_submission(
        self,
        handle: AppHandle,
        scheduler: str,
        app_id: str,
        app: AppDef,
        submitted: float,
        record: Mapping[str, str | None],
        **fields: Any,
    ) -> None:
        """The one job-record builder: a submission into the job store (a store that cannot
        take it is one warning: the job runs, and its handle is printed)."""
        row = JobRecord(
            handle=handle,
            scheduler=scheduler,
            session=self._name,
            app_id=app_id,
            name=app.name,
            # a job that runs from a folder (local_cwd, Slurm) uses no image
            image=app.roles[0].image if app.roles and self.uses_images(scheduler) else "",
            submitted=submitted,
            state=AppState.SUBMITTED.name,
            updated=submitted,
            cell_hash=record.get("cell_hash"),
            notebook=record.get("notebook"),
            workspace=record.get("workspace"),
            **{"params": record.get("params"), **fields},
        )
        try:
            self.jobstore.add(row)  # SQLite's busy timeout waits for other writers
        except Exception as e:
            warnings.warn(
                f"{handle} was submitted but could not be recorded in the job store ({e});"
                " keep this handle to follow the job",
                stacklevel=3,
            )
        self._last_state[handle] = AppState.SUBMITTED.name

    def request_scheduler(self, request: RunRequest) -> str:
        """The scheduler ``request`` runs on: as named, else the front end's default, else
        ``[cli:run] scheduler``, else local_cwd."""
        return request.scheduler or self.default_scheduler(request.default_scheduler)

    def request_workspace(self, request: RunRequest) -> str | None:
        """The folder ``request`` ships: as given, else ``[cli:run] workspace``, else the
        current folder (for a scheduler that takes one); None for none."""
        from torchx_nb import config
        from torchx_nb.errors import current_folder

        workspace = request.workspace
        if request.run_notebook is not None:
            if workspace is not None and workspace.strip().lower() in NO_WORKSPACE:
                raise TorchxNbError(
                    "a notebook job runs from its workspace: drop --workspace none (the"
                    " notebook's folder is the default)"
                )
            return workspace or str(Path(request.run_notebook).expanduser().resolve().parent)
        if workspace is None:
            defaulted = config.cli_defaults("run").get("workspace")
            workspace = defaulted if defaulted is not None else current_folder()
            sched = self.get_scheduler(self.request_scheduler(request))
            if not isinstance(sched, WorkspaceMixin):
                workspace = ""
        return None if workspace.strip().lower() in NO_WORKSPACE else workspace

    def request_opts(self, request: RunRequest) -> Mapping[str, CfgVal]:
        """The scheduler options ``request`` runs with: the front end's defaults, then
        ``-cfg``, then ``.torchxconfig``, resolved against the scheduler's runopts."""
        scheduler = self.request_scheduler(request)
        cfg = dict(request.scheduler_defaults.get(scheduler, {}))
        cfg.update(self.cfg_from_str(scheduler, *request.cfg))
        opts: Mapping[str, CfgVal] = self.resolve_opts(
            scheduler, self.cfg_with_config_files(scheduler, cfg)
        )
        return opts

    def request_app(self, request: RunRequest) -> AppDef:
        """The AppDef ``request`` names (nothing built): what a sweep checks before it
        chooses between a native array and one job per trial."""
        return self._request_app(request)

    def _request_app(self, request: RunRequest) -> AppDef:
        """The AppDef a request names, with its name, image and env overrides applied."""
        if request.run_notebook is not None:
            import torchx_nb
            from torchx_nb.components.notebook import notebook_app, notebook_program

            workspace = self.request_workspace(request)
            assert workspace is not None
            program = notebook_program(
                request.run_notebook, workspace, dict(request.parameters), request.cell_timeout
            )
            return notebook_app(
                program,
                name=request.name,
                image=request.image or torchx_nb.IMAGE,
                h=request.resource,
                env=dict(request.env),
            )
        if request.cell is not None:
            from torchx_nb.components.cell import cell as cell_component

            kwargs: dict[str, Any] = {
                "source": request.cell,
                "env": dict(request.env),
                "j": request.j,
                "h": request.resource,
            }
            if request.name:
                kwargs["name"] = request.name
            if request.image:
                kwargs["image"] = request.image
            return cell_component(**kwargs)
        if request.app is not None:
            app = copy.deepcopy(request.app)
        elif request.component:
            from torchx_nb import config

            defaults = {
                **config.component_defaults(request.component),
                **self._component_defaults.get(request.component, {}),
            }
            app = self.component_app(request.component, request.component_args, defaults)
        else:
            raise TorchxNbError("nothing to run: give a component, a cell or an AppDef")
        for role in app.roles:
            role.env.update(request.env)
            if request.image:
                role.image = request.image
        if request.name:
            app.name = request.name
        return app

    # ---- dry run and run (TorchX's API) ------------------------------------------------

    def _validate_app(self, app: AppDef) -> None:
        if not app.roles:
            raise AppValidationError(f"app {app.name!r} has no roles")
        for role in app.roles:
            if not _ROLE_NAME_RE.fullmatch(role.name) or ".." in role.name:
                raise AppValidationError(
                    f"role name {role.name!r} is not allowed: use letters, digits, '_', '.' and"
                    " '-' (it names log folders and containers)"
                )
            if not role.entrypoint or role.entrypoint == MISSING:
                raise AppValidationError(f"role {role.name!r} has no entrypoint")
            if role.num_replicas <= 0:
                raise AppValidationError(
                    f"role {role.name!r} needs at least one replica (num_replicas={role.num_replicas})"
                )

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
        build_workspace: bool = False,
        push: bytes | None = None,
    ) -> AppDryRunInfo[Any]:
        """Build the scheduler's native request for ``app`` without submitting anything.

        By default (a dry run) the workspace is only listed, never built or pushed:
        ``info.workspace_preview`` says what would ship, and the request shows the cell script
        and the image name that the run will send. ``run`` passes ``build_workspace=True``.
        ``push``: variables (cloudpickle) sent into a cell's namespace."""
        self._validate_app(app)
        app = copy.deepcopy(app)
        sched = self.get_scheduler(scheduler)
        job_id = make_app_handle(scheduler, self._name, macros.app_id)
        for role in app.roles:
            role.env[ENV_JOB_ID] = job_id
            role.env[ENV_SESSION_ID] = self._session_id
            parent = os.environ.get(ENV_PARENT_RUN_ID) or parent_run_id
            if parent:
                role.env[ENV_PARENT_RUN_ID] = parent
        opts = self.resolve_opts(scheduler, cfg)
        sched._pre_build_validate(app, scheduler, opts)
        folder: LocalWorkspace | None = None
        preview: str | None = None
        built: float | None = None
        if workspace:
            began = time.monotonic()
            folder, preview = self._use_workspace(
                sched, scheduler, app, workspace, opts, build_workspace, push
            )
            if build_workspace and not isinstance(sched, DirWorkspaceMixin):
                built = time.monotonic() - began  # the job's first phase, before submit
        elif push is not None:
            raise TorchxNbError(
                "--push sends variables with the cell's files, which need a workspace: drop"
                " --workspace none"
            )
        if isinstance(sched, TakesTypedOptions):
            sched._validate(app, scheduler, opts)
        else:
            sched._validate(app, scheduler)
        info = sched.submit_dryrun(app, opts, folder)
        info._scheduler = scheduler
        info.workspace_preview = preview
        info.build_seconds = built
        return info

    def _use_workspace(
        self,
        sched: Scheduler[Any],
        scheduler: str,
        app: AppDef,
        workspace: str,
        opts: Any,
        build: bool,
        push: bytes | None = None,
    ) -> tuple[LocalWorkspace | None, str | None]:
        """Give the workspace to the scheduler as its abilities allow: patched onto each role's
        image (``WorkspaceMixin``; listed only, for a dry run), or as the folder the job runs
        from (``DirWorkspaceMixin``). A cell role then runs under the cell runner (its value,
        exception and outputs come back), its files beside the workspace: in the image, in the
        copied job folder, or, for a job that runs in place, in a private folder of the data
        dir written at build time. Returns the folder and the dry run's preview."""
        from torchx_nb.components.programs import point_at_runner, program_files

        path = Path(workspace).expanduser()
        if not path.is_dir():
            raise TorchxNbError(f"workspace {workspace!r} is not a folder")
        program = program_of(app)
        cell_role = app.roles[0] if program is not None else None
        if isinstance(sched, DirWorkspaceMixin):
            copied: dict[str, bytes] = {}
            if program is not None and cell_role is not None:
                files = program_files(program, push)
                if sched.copies_workspace(opts):
                    copied.update(files)
                    point_at_runner(cell_role, program, "", push is not None)
                else:
                    here = _cell_folder(sched.files_folder(workspace, opts), files, build)
                    point_at_runner(cell_role, program, str(here), push is not None)
            folder = LocalWorkspace(str(path.resolve()), copied)
            return folder, None if build else sched.preview_workspace(workspace, opts)
        if isinstance(sched, WorkspaceMixin):
            for role in app.roles:
                extra = program_files(program, push) if program and role is cell_role else None
                if extra is not None:  # the runner names it when the cell needs a module it lacks
                    role.env["TORCHX_NB_BASE_IMAGE"] = role.image
                if build:
                    pickles = isinstance(program, CellProgram) and extra is not None
                    sched.patch_image(role, workspace, opts, extra or {}, pickles)
                else:
                    sched.plan_image(role, workspace, opts)
                if program is not None and extra is not None:
                    point_at_runner(role, program, "", push is not None)
            return None, None if build else sched.preview_workspace(workspace)
        raise TorchxNbError(
            f"{scheduler} cannot take a workspace; drop --workspace or use a scheduler"
            " that builds images"
        )

    def run(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
        **record: str | None,
    ) -> AppHandle:
        """Submit ``app``; ``record`` (cell_hash, notebook) goes into the job store too."""
        info = self.dryrun(app, scheduler, cfg, workspace, parent_run_id, build_workspace=True)
        return self.schedule(info, workspace=workspace, **record)

    def schedule(self, dryrun_info: AppDryRunInfo[Any], **record: str | None) -> AppHandle:
        """Send a dryrun's request and record the submission in the job store."""
        scheduler = dryrun_info._scheduler
        if scheduler is None:
            raise TorchxNbError("this dryrun info was not made by Runner.dryrun")
        sched = self.get_scheduler(scheduler)
        if isinstance(sched, RunsEndHook):
            sched.end_hook = self._end_hook()
        app_id = sched.schedule(dryrun_info)
        handle = make_app_handle(scheduler, self._name, app_id)
        outputs = None
        if isinstance(sched, StoresOutputs):
            with contextlib.suppress(Exception):
                outputs = sched.output_url(app_id, dryrun_info.request)
        app = dryrun_info._app or AppDef(name=app_id)
        self._apps[handle] = app
        self._record_submission(
            handle,
            scheduler,
            app_id,
            app,
            time.time(),
            record,
            outputs=outputs,
            sweep=record.get("sweep"),
            trial=int(str(record["trial"])) if record.get("trial") is not None else None,
            params=record.get("params"),
            build_seconds=dryrun_info.build_seconds,
        )
        return handle

    def run_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppHandle:
        info = self.dryrun_component(
            component, component_args, scheduler, cfg, workspace, parent_run_id, True
        )
        return self.schedule(info, workspace=workspace)

    def dryrun_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
        build_workspace: bool = False,
    ) -> AppDryRunInfo[Any]:
        """Build the named component from CLI-style (or dict) args, then dryrun it."""
        app = self.component_app(component, component_args)
        return self.dryrun(app, scheduler, cfg, workspace, parent_run_id, build_workspace)

    @staticmethod
    def builtin_components() -> dict[str, Any]:
        """The built-in components by name (``utils.echo``, ``dist.ddp``, ``cell``…)."""
        from torchx_nb.components import builtin_components

        return dict(builtin_components())

    @staticmethod
    def workspace_preview(path: str, max_rows: int = 50) -> str:
        """What a job would ship from the folder ``path``: the files, sizes and what is left
        out (secrets, our state, ``.git/``) and why; nothing is built or written."""
        from torchx_nb.workspace.collect import collect_workspace

        return collect_workspace(path).preview(max_rows=max_rows)

    def component_app(
        self,
        component: str,
        component_args: Sequence[str] | Mapping[str, Any],
        defaults: Mapping[str, str] | None = None,
    ) -> AppDef:
        """The AppDef of a component from its arguments (``defaults``: the component's
        defaults from ``.torchxconfig`` or code, below the arguments)."""
        from torchx_nb.components import get_component
        from torchx_nb.specs.builders import materialize_appdef

        fn = get_component(component)
        given = defaults if defaults is not None else self._component_defaults.get(component, {})
        args = list(component_args) if not isinstance(component_args, Mapping) else component_args
        return materialize_appdef(fn, args, dict(given), prog=f"torchx-nb run {component}")

    # ---- status ------------------------------------------------------------------------

    def _scheduler_and_id(self, app_handle: AppHandle) -> tuple[Scheduler[Any], str, str]:
        parsed = parse_app_handle(app_handle)
        return self.get_scheduler(parsed.scheduler_backend), parsed.scheduler_backend, parsed.app_id

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """Current status, or None when the scheduler no longer knows the app. The job store
        is updated when the state changed."""
        sched, _, app_id = self._scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            self._apps.pop(app_handle, None)
            return None
        status = _status_of(desc)
        self._record_state(app_handle, status)
        return status

    def status_many(self, app_handles: list[AppHandle]) -> dict[AppHandle, AppStatus | None]:
        """Statuses of many apps of one scheduler: a single ``describe_many`` call where the
        backend can (``DescribesMany``), else ``status`` per app."""
        unique = list(dict.fromkeys(app_handles))
        if not unique:
            return {}
        sched, _, _ = self._scheduler_and_id(unique[0])
        if not isinstance(sched, DescribesMany):
            return {h: self.status(h) for h in unique}
        ids = {parse_app_handle(h).app_id: h for h in unique}
        found = sched.describe_many(list(ids))
        out: dict[AppHandle, AppStatus | None] = {}
        for app_id, handle in ids.items():
            desc = found.get(app_id)
            if desc is None:
                out[handle] = None
                continue
            status = _status_of(desc)
            self._record_state(handle, status)
            out[handle] = status
        return out

    def refresh(
        self, app_handles: Iterable[AppHandle], record_unknown: bool = False
    ) -> dict[AppHandle, AppStatus | Exception | None]:
        """The one status refresher (the kernel's poller, the server and the job list use it):
        handles grouped by scheduler, one batched call per scheduler (``status_many``); a
        scheduler that fails gives its handles the exception instead of failing the others.
        With ``record_unknown``, a job its scheduler no longer knows is recorded UNKNOWN."""
        groups: dict[str, list[AppHandle]] = {}
        for handle in dict.fromkeys(app_handles):
            groups.setdefault(parse_app_handle(handle).scheduler_backend, []).append(handle)
        out: dict[AppHandle, AppStatus | Exception | None] = {}
        for handles in groups.values():
            try:
                found = self.status_many(handles)
            except Exception as e:
                out.update(dict.fromkeys(handles, e))
                continue
            out.update(found)
            if record_unknown:
                for handle, status in found.items():
                    if status is None:
                        self._record_unknown(handle)
        return out

    def _record_unknown(self, app_handle: AppHandle) -> None:
        with contextlib.suppress(Exception):
            self.jobstore.update_state(app_handle, AppState.UNKNOWN.name)

    def uses_images(self, scheduler: str) -> bool:
        """Whether the scheduler runs images; one that runs from a folder (local_cwd, Slurm:
        ``DirWorkspaceMixin``) ignores ``role.image``."""
        return not isinstance(self.get_scheduler(scheduler), DirWorkspaceMixin)

    def is_local(self, handle_or_scheduler: str) -> bool:
        """Whether the scheduler (named, or of a handle) runs jobs on this machine, where a
        status is cheap to ask for: the one definition of "local" the watchers use."""
        name = handle_or_scheduler
        if "://" in name:
            name = parse_app_handle(name).scheduler_backend
        local = self._local.get(name)
        if local is None:
            try:
                local = bool(self.get_scheduler(name).is_local)
            except Exception:
                local = False
            self._local[name] = local
        return local

    def _record_state(self, app_handle: AppHandle, status: AppStatus) -> None:
        """Write a changed state to the job store. A state is remembered as written only once
        the store took it: a write that fails (the store locked past its timeout) is tried
        again at the next status call, so a job's end is never lost."""
        state = status.state.name
        if self._last_state.get(app_handle) == state:
            return
        try:
            msg = message_text(status.msg) or None
            ended = status.ended if status.is_terminal() else None
            started = status.started
            if started is None and status.state == AppState.RUNNING:
                started = time.time()  # the scheduler keeps no start time: when it was seen
            self.jobstore.update_state(app_handle, state, msg, ended=ended, started=started)
        except Exception as e:  # the store is a convenience; never fail a status call on it
            warnings.warn(f"could not update the job store: {e}", stacklevel=2)
            return
        self._last_state[app_handle] = state
        if status.is_terminal():
            self._notice(app_handle, status)

    def _end_hook(self) -> list[str] | None:
        """What a backend's own end-of-job process runs (``RunsEndHook``), when a job-end
        notice is configured: ``torchx-nb watch`` of the job, which claims and sends it as any
        watcher does. None without a notice: no extra process at every job's end."""
        from torchx_nb.notices import notify_url

        try:
            if notify_url() is None:
                return None
        except Exception:
            return None
        return [sys.executable, "-m", "torchx_nb.cli", "watch", "--no-log"]

    def _notice(self, app_handle: AppHandle, status: AppStatus) -> None:
        """The job-end notice, when one is configured: claimed in the job store (so one
        watcher sends it, whichever sees the end first), then built and sent on the
        notifier's thread, never this one's."""
        from torchx_nb.notices import notifier, notify_url, payload

        try:
            url = notify_url()
            if url is None or not self.jobstore.claim_notice(app_handle):
                return
        except Exception as e:
            warnings.warn(f"no job-end notice for {app_handle}: {e}", stacklevel=3)
            return

        def build() -> dict[str, Any]:
            rec = self.jobstore.get(app_handle)
            cards = (
                self.failure_cards(app_handle, status) if status.state == AppState.FAILED else []
            )
            name = rec.name if rec else parse_app_handle(app_handle).app_id
            ended = (rec.ended if rec else None) or status.ended or time.time()
            duration = ended - rec.submitted if rec else None
            return payload(app_handle, name, status.state.name, duration, cards)

        notifier().submit(url, build)

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Poll until the app is terminal (or unknown). Polls start at 50 ms and back off to
        ``wait_interval`` seconds, so short jobs return promptly."""
        delay = 0.05
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            status = self.status(app_handle)
            if status is None or is_terminal(status.state):
                return status
            if deadline and time.monotonic() > deadline:
                return status
            time.sleep(delay)
            delay = min(delay * 1.5, wait_interval)

    def cancel(self, app_handle: AppHandle) -> AppStatus:
        """Ask the scheduler to stop the app if it is still running; returns at once with the
        status it had (one describe). An app the scheduler does not know is
        ``UnknownAppException``."""
        sched, _, app_id = self._scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            raise UnknownAppException(app_handle)
        status = _status_of(desc)
        if not is_terminal(status.state):
            sched._cancel_existing(app_id)
        return status

    stop = cancel

    def cancel_array(self, app_handles: list[AppHandle]) -> None:
        """Cancel every trial of the native arrays ``app_handles`` belong to that has not
        ended (a sweep's Cancel all): one call per array where the backend has one."""
        by_backend: dict[str, list[str]] = {}
        for handle in app_handles:
            _, backend, app_id = self._scheduler_and_id(handle)
            by_backend.setdefault(backend, []).append(app_id)
        for backend, app_ids in by_backend.items():
            sched = self.get_scheduler(backend)
            if not isinstance(sched, SubmitsArrays):
                raise TorchxNbError(f"{backend} has no native arrays")
            sched.cancel_arrays(app_ids)

    def delete(self, app_handle: AppHandle) -> None:
        sched, _, app_id = self._scheduler_and_id(app_handle)
        sched.delete(app_id)

    def describe(self, app_handle: AppHandle) -> AppDef | None:
        """The AppDef: this runner's own copy if it launched the app, else the scheduler's
        reconstruction."""
        sched, _, app_id = self._scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            return None
        if app_handle in self._apps:
            return self._apps[app_handle]
        return AppDef(name=app_id, roles=desc.roles, metadata=desc.metadata)

    def submitted_status(self, app_handle: AppHandle) -> AppStatus | None:
        """A job this runner just submitted, as submitted: its roles and replicas from the
        AppDef, no scheduler call (watchers start from it; the poller asks at once). None for
        a job this runner did not submit."""
        app = self._apps.get(app_handle)
        if app is None:
            return None
        state = AppState.SUBMITTED
        return AppStatus(
            state,
            roles=[
                RoleStatus(
                    role.name,
                    [ReplicaStatus(i, state, role.name, "") for i in range(role.num_replicas)],
                )
                for role in app.roles
            ],
        )

    # ---- results and outputs -----------------------------------------------------------

    def output_store(self, app_handle: AppHandle) -> Any:
        """Where the job keeps its output folder, from its own record in the job store (a job
        not submitted from here has none to read)."""
        from torchx_nb.results import NoResult, store_for

        record = self.jobstore.get(app_handle)
        if record is None:
            raise UnknownAppException(app_handle)
        if not record.outputs:
            raise NoResult(
                f"{app_handle} keeps no outputs: its scheduler stores them only with"
                " -cfg output_path=s3://BUCKET/PREFIX (gs:// on gcp_batch), set when it was"
                " submitted"
            )
        return store_for(record.outputs)

    def result(self, app_handle: AppHandle, status: AppStatus | None = None) -> Any:
        """The value of the cell the job ran (or the exception it raised, re-raised here with
        the remote traceback as its cause). Unpickling runs code: only for a job in this job
        store, read from its recorded output location. ``status``: its final status, for the
        message when there is no result."""
        from torchx_nb.results import load_result

        store = self.output_store(app_handle)
        if status is None:
            status = self.status(app_handle)
        return load_result(store, status, app_handle)

    def result_repr(self, app_handle: AppHandle) -> str | None:
        """The short repr of the job's result (``raised TYPE: message`` for an exception), as
        the job wrote it: nothing is unpickled, so any surface may show it. None when the job
        keeps no outputs or left no result."""
        from torchx_nb.results import result_repr, store_for

        record = self.jobstore.get(app_handle)
        if record is None or not record.outputs:
            return None
        return result_repr(store_for(record.outputs))

    def failure_cards(
        self, app_handle: AppHandle, status: AppStatus | None = None, lines: int = 5
    ) -> list[FailureCard]:
        """A card per failing replica of a FAILED job, the first failure first: one that
        raised, then one that ran out of memory, then other exit codes, then replicas killed
        by a signal (usually the others being stopped). Each holds its exit code and signal,
        the exception line the cell runner wrote for it, and its last ``lines`` log lines
        (masked). Any part its backend cannot give is left out, never guessed."""
        from torchx_nb.redact import redact_lines
        from torchx_nb.results import exception_lines, store_for

        if status is None:
            status = self.status(app_handle)
        if status is None or status.state != AppState.FAILED:
            return []
        raised: dict[int, str] = {}
        record = self.jobstore.get(app_handle)
        if record is not None and record.outputs:
            with contextlib.suppress(Exception):
                raised = exception_lines(store_for(record.outputs))
        failing = [
            (rs.role, r) for rs in status.roles for r in rs.replicas if r.state == AppState.FAILED
        ]
        cards = []
        for i, (role, rep) in enumerate(failing):
            exception = raised.get(rep.id)
            if exception is None and i == 0 and raised:  # ranks need not be replica ids (-j)
                exception = raised[min(raised)]
            if exception is None:  # a Python entry point under torchrun: its error file
                exception = torchelastic_exception(rep.structured_error_msg)
            tail: list[str] = []
            if lines > 0:
                with contextlib.suppress(Exception):
                    found = self.log_tail(app_handle, role, rep.id, lines)
                    tail = [line.rstrip("\n") for line in redact_lines(found)]
            cards.append(FailureCard(role, rep.id, rep.exit_code, rep.oom, exception, tail))

        def first(card: FailureCard) -> tuple[int, str, int]:
            rank = 0 if card.exception else 1 if card.oom else 3 if card.signal else 2
            return rank, card.role, card.replica

        return sorted(cards, key=first)

    def outputs(self, app_handle: AppHandle) -> Any:
        """The files the job wrote to ``$TORCHX_OUTPUT_DIR`` (``OutputFile``: path, size). A
        local folder that is gone after the job ended is ``NoResult``, not an empty list."""
        from torchx_nb.results import LocalStore, NoResult, folder_gone, outputs

        store = self.output_store(app_handle)
        if isinstance(store, LocalStore) and not store.root.is_dir():
            record = self.jobstore.get(app_handle)
            if record is not None and record.is_terminal:
                raise NoResult(folder_gone(store, app_handle))
        return outputs(store)

    def executed_notebook(self, app_handle: AppHandle, folder: str | Path) -> Path:
        """The executed notebook of a notebook job, fetched into ``folder`` under a name
        that overwrites nothing (``NAME.executed.ipynb``); returns its path."""
        from torchx_nb.results import fetch_notebook

        record = self.jobstore.get(app_handle)
        name = Path(record.notebook).name if record is not None and record.notebook else None
        return fetch_notebook(self.output_store(app_handle), Path(folder).expanduser(), name)

    def download(self, app_handle: AppHandle, dest: str | Path, progress: Any = None) -> Path:
        """Copy the job's output files into ``dest``, keeping their paths; returns ``dest``."""
        from torchx_nb.results import download

        return download(self.output_store(app_handle), Path(dest).expanduser(), progress)

    # ---- logs --------------------------------------------------------------------------

    def log_lines(
        self,
        app_handle: AppHandle,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of ``role_name``; raises UnknownAppException for an app the
        scheduler does not know and NoSuchReplica for a role or replica the job does not have,
        from one describe."""
        sched, app_id, role_name = self._known_replica(app_handle, role_name, k)
        return sched.log_iter(app_id, role_name, k, regex, since, until, should_tail, streams)

    def log_tail(
        self,
        app_handle: AppHandle,
        role_name: str | None,
        k: int = 0,
        n: int = 100,
        regex: str | None = None,
        streams: Stream | None = None,
    ) -> list[str]:
        """The last ``n`` lines (that ``regex`` finds, in RE2 syntax) of a replica's log (of
        the first role when ``role_name`` is None): read from the end of the file where the
        backend's logs are files (``KeepsLogFiles``), else through ``log_iter`` keeping the last
        ``n``. One describe."""
        from collections import deque

        from torchx_nb.schedulers.abilities import KeepsLogFiles
        from torchx_nb.schedulers.logs import tail_lines
        from torchx_nb.user_regex import compile_regex

        sched, app_id, role = self._known_replica(app_handle, role_name, k)
        pattern = compile_regex(regex) if regex else None
        if isinstance(sched, KeepsLogFiles):
            path = sched.log_file(app_id, role, k, streams)
            if path is not None:
                return tail_lines(path, n, pattern) if path.exists() else []
        window: deque[str] = deque(maxlen=n)
        for line in sched.log_iter(app_id, role, k, streams=streams):
            if pattern is None or pattern.search(line):
                window.append(line)
        return list(window)

    def log_window(
        self,
        app_handle: AppHandle,
        role_name: str | None,
        k: int = 0,
        start: int = 0,
        end: int | None = None,
        regex: str | None = None,
        streams: Stream | None = None,
        keep: int = 5000,
    ) -> list[str]:
        """The last ``keep`` of lines ``start`` up to ``end`` (0-based, counted before the
        filter; None: to the log's end) of a replica's log that ``regex`` finds."""
        import itertools
        from collections import deque

        from torchx_nb.user_regex import compile_regex

        sched, app_id, role = self._known_replica(app_handle, role_name, k)
        pattern = compile_regex(regex) if regex else None
        lines = itertools.islice(sched.log_iter(app_id, role, k, streams=streams), start, end)
        return list(
            deque((line for line in lines if pattern is None or pattern.search(line)), keep)
        )

    def _known_replica(
        self, app_handle: AppHandle, role_name: str | None, k: int
    ) -> tuple[Scheduler[Any], str, str]:
        """The scheduler, app id and role (the first one when None) of a replica the job has,
        from one describe."""
        sched, _, app_id = self._scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            raise UnknownAppException(app_handle)
        if role_name is None:
            roles = [rs.role for rs in desc.roles_statuses] or [r.name for r in desc.roles]
            role_name = roles[0] if roles else app_id
        _check_replica(desc, role_name, k)
        return sched, app_id, role_name

    # ---- list --------------------------------------------------------------------------

    def list(
        self, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> list[ListAppResponse]:
        """The scheduler's own list of our apps, with handles filled in. A ``TakesTypedOptions``
        scheduler gets its options (required ones may be missing: e.g. every queue)."""
        sched = self.get_scheduler(scheduler)
        if isinstance(sched, TakesTypedOptions):
            apps = sched.list(sched.opts_type.from_cfg(dict(cfg or {}), partial=True))
        else:
            apps = sched.list()
        for app in apps:
            app.app_handle = make_app_handle(scheduler, self._name, app.app_id)
        return apps


def _cell_folder(root: Path, files: Mapping[str, bytes], write: bool) -> Path:
    """A private folder under ``root`` holding ``files`` (named by their content, so reused),
    for a cell that runs in place; written only when ``write`` (a run, not a dry run)."""
    import hashlib

    digest = hashlib.sha256()
    for name, data in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    from torchx_nb.paths import private_dir

    folder = root / digest.hexdigest()[:24]
    if write and not folder.is_dir():
        private_dir(root)
        tmp = private_dir(folder.with_name(f"{folder.name}.{os.getpid()}.tmp"))
        for name, data in files.items():
            target = tmp / name
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, 0o600)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process made it first, with the same content
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def get_runner(
    name: str | None = None,
    component_defaults: Mapping[str, Mapping[str, str]] | None = None,
    **scheduler_params: Any,
) -> Runner:
    """A Runner for the default session ``torchx`` (custom session names are deprecated, as in
    TorchX)."""
    if name:
        warnings.warn("custom session names are deprecated", FutureWarning, stacklevel=2)
    return Runner(name or DEFAULT_SESSION, None, component_defaults, scheduler_params)


def _status_of(desc: DescribeAppResponse) -> AppStatus:
    """The status as people see it: every message masked (``redact``) here, once, so the
    widgets, the snapshot, the job store, the CLI and the REST API show no secret."""
    from torchx_nb.redact import redact_text

    return AppStatus(
        state=desc.state,
        num_restarts=desc.num_restarts,
        msg=redact_text(desc.msg),
        structured_error_msg=redact_text(desc.structured_error_msg),
        ui_url=redact_text(desc.ui_url) if desc.ui_url else desc.ui_url,
        roles=[
            RoleStatus(
                rs.role,
                [
                    replace(r, structured_error_msg=redact_text(r.structured_error_msg))
                    for r in rs.replicas
                ],
            )
            for rs in desc.roles_statuses
        ],
        started=desc.started,
        ended=desc.ended,
    )
