"""Submitting: a ``RunRequest`` prepared (the program, scheduler, options, workspace, the dry
run) and sent, recorded in the job store; TorchX's ``dryrun``/``run``/``schedule``."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from torchx_nb.jobstore import JobRecord
from torchx_nb.runner.entries import RunCall, SubmitEntries, current_run_call, run_call
from torchx_nb.runner.part import RunnerPart
from torchx_nb.runner.program_job import RunnerProgramJob
from torchx_nb.runner.requests import (
    _ROLE_NAME_RE,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_SESSION_ID,
    NO_WORKSPACE,
    AppValidationError,
    Build,
    Options,
    PreparedDryRun,
    PreparedRun,
    RunRequest,
)
from torchx_nb.schedulers.abilities import (
    DefinesMetrics,
    FolderWorkspace,
    RunsEndHook,
    StoresOutputs,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.outputs import trial_output
from torchx_nb.specs.api import (
    MISSING,
    AppDef,
    AppDryRunInfo,
    AppHandle,
    AppState,
    CfgVal,
    TorchxNbError,
    macros,
    make_app_handle,
)
from torchx_nb.specs.program import Program, program_of
from torchx_nb.workspace import WorkspaceMixin
from torchx_nb.workspace.use import WorkspaceUse


class Submitting(RunnerPart[SubmitEntries]):
    """Prepare and send runs, and record them, over the runner's shared context (a backend
    that runs its own end-of-job process gets it from ``noticing``; what a preempted job is
    sent again with is kept by ``attempts``). ``run``/``run_component`` go through the
    Runner's (a subclass's) ``dryrun``/``dryrun_component``/``schedule``."""

    def prepare(self, request: RunRequest, build: bool = False) -> PreparedRun:
        """Check everything in ``request`` and build the scheduler's exact request: the
        program and its app (from the cell, the notebook, the component or the AppDef), the
        scheduler and its options (the front end's defaults, then ``-cfg``, then
        ``.torchxconfig``, resolved once), the workspace. With ``build`` the workspace is
        built and pushed (for a run); without, nothing is (a dry run)."""
        import hashlib

        scheduler = self.request_scheduler(request)
        opts = self.request_opts(request)
        program, app = self._request_program(request)
        workspace = self.request_workspace(request)
        record: dict[str, str | None] = {
            "workspace": workspace,
            # a notebook job's own notebook, absolute: a server rooted anywhere lists it under
            # the right notebook and writes its executed copy beside it
            "notebook": str(Path(request.run_notebook).expanduser().resolve())
            if request.run_notebook
            else request.notebook,
        }
        if request.run_notebook is not None and request.parameters:
            record["params"] = json.dumps(dict(request.parameters), default=str)
        if request.cell is not None:
            record["cell_hash"] = hashlib.sha256(request.cell.encode()).hexdigest()[:16]
        return self._prepare(
            app,
            program,
            scheduler,
            opts,
            workspace,
            request.parent_run_id,
            build,
            request.push,
            self.request_packages(request),
            record,
        )

    def submit(self, prepared: PreparedRun, **record: str | None) -> AppHandle:
        """Send a prepared (built) run and record it in the job store (with ``record``: a
        sweep trial's ``sweep``, ``trial`` and ``params``)."""
        with _sending(prepared) as sent:
            sched = self.ctx.get_scheduler(prepared.scheduler)
            if isinstance(sched, RunsEndHook):
                sched.end_hook = self._noticing.end_hook()
            app_id = sched.schedule(prepared.info)
            handle = sent(make_app_handle(prepared.scheduler, self.ctx.session, app_id))
        outputs = None
        if isinstance(sched, StoresOutputs):
            with contextlib.suppress(Exception):
                outputs = sched.output_url(app_id, prepared.request)
        self.ctx.apps[handle] = prepared.app
        fields = {**prepared.record, **record}
        trial = fields.get("trial")
        self._record_submission(
            handle,
            prepared.scheduler,
            app_id,
            prepared.app,
            time.time(),
            fields,
            outputs=outputs,
            sweep=fields.get("sweep"),
            trial=int(str(trial)) if trial is not None else None,
            params=fields.get("params"),
            build_seconds=prepared.build.seconds if prepared.build else None,
        )
        self._attempts.keep_request(handle, prepared)
        return handle

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
        with _sending(prepared) as sent:
            sched = self.ctx.get_scheduler(prepared.scheduler)
            if not isinstance(sched, SubmitsArrays):
                raise TorchxNbError(f"{prepared.scheduler} has no native arrays")
            array = sched.array_request(prepared.info, len(points), max_parallel)
            array_id = sched.schedule(array)
            sent(make_app_handle(prepared.scheduler, self.ctx.session, array_id))
        base = None
        if isinstance(sched, StoresOutputs):
            with contextlib.suppress(Exception):
                base = sched.output_url(array_id, array.request)
        now = time.time()
        handles = []
        for i, (task_id, params) in enumerate(
            zip(sched.trial_ids(array_id, len(points)), points, strict=True)
        ):
            handle = make_app_handle(prepared.scheduler, self.ctx.session, task_id)
            self.ctx.apps[handle] = prepared.app
            handles.append(handle)
            self._record_submission(
                handle,
                prepared.scheduler,
                task_id,
                prepared.app,
                now,
                prepared.record,
                outputs=trial_output(base, i),
                sweep=sweep,
                trial=i,
                params=params,
                build_seconds=prepared.build.seconds if prepared.build else None,
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
            session=self.ctx.session,
            app_id=app_id,
            name=app.name,
            # a job that runs from a folder (local_cwd, Slurm) uses no image
            image=app.roles[0].image if app.roles and self.ctx.uses_images(scheduler) else "",
            submitted=submitted,
            state=AppState.SUBMITTED.name,
            updated=submitted,
            cell_hash=record.get("cell_hash"),
            notebook=record.get("notebook"),
            workspace=record.get("workspace"),
            **{"params": record.get("params"), **fields},
        )
        try:
            self.ctx.jobstore.add(row)  # SQLite's busy timeout waits for other writers
        except Exception as e:
            warnings.warn(
                f"{handle} was submitted but could not be recorded in the job store ({e});"
                " keep this handle to follow the job",
                stacklevel=3,
            )
        self.ctx.last_state[handle] = AppState.SUBMITTED.name

    def request_scheduler(self, request: RunRequest) -> str:
        """The scheduler ``request`` runs on: as named, else the front end's default, else
        ``[cli:run] scheduler``, else local_cwd."""
        return request.scheduler or self.ctx.default_scheduler(request.default_scheduler)

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
            sched = self.ctx.get_scheduler(self.request_scheduler(request))
            if not isinstance(sched, WorkspaceMixin):
                workspace = ""
        return None if workspace.strip().lower() in NO_WORKSPACE else workspace

    def request_packages(self, request: RunRequest) -> str:
        """What the job's environment layer holds: as asked, else ``[cli:run] packages``,
        else auto (checked: auto, none, or an existing requirements file)."""
        from torchx_nb import config
        from torchx_nb.environment.packages_option import check_packages_option

        value = request.packages or config.cli_defaults("run").get("packages") or "auto"
        return check_packages_option(str(value))

    def request_opts(self, request: RunRequest) -> Options:
        """The scheduler options ``request`` runs with: the front end's defaults, then
        ``-cfg``, then ``.torchxconfig``, resolved by the scheduler (its typed options, or a
        dict for a scheduler written TorchX's way)."""
        scheduler = self.request_scheduler(request)
        cfg = dict(request.scheduler_defaults.get(scheduler, {}))
        cfg.update(self.ctx.cfg_from_str(scheduler, *request.cfg))
        return self.ctx.resolve_opts(scheduler, self.ctx.cfg_with_config_files(scheduler, cfg))

    def request_app(self, request: RunRequest) -> AppDef:
        """The AppDef ``request`` names (nothing built): what a sweep checks before it
        chooses between a native array and one job per trial."""
        return self._request_program(request)[1]

    def _request_program(self, request: RunRequest) -> tuple[Program, AppDef]:
        """The program a request names and its AppDef, with the name, image and env
        overrides applied."""
        import torchx_nb

        if request.run_notebook is not None:
            from torchx_nb.components.notebook import notebook_app, notebook_program

            workspace = self.request_workspace(request)
            assert workspace is not None
            notebook = notebook_program(
                request.run_notebook, workspace, dict(request.parameters), request.cell_timeout
            )
            return notebook, notebook_app(
                notebook,
                name=request.name,
                image=request.image or torchx_nb.IMAGE,
                h=request.resource,
                env=dict(request.env),
            )
        if request.cell is not None:
            from torchx_nb.components.cell import cell_app, cell_program

            cell = cell_program(request.cell, (), request.j)
            return cell, cell_app(
                cell,
                name=request.name or "cell",
                image=request.image or torchx_nb.IMAGE,
                h=request.resource,
                env=dict(request.env),
            )
        if request.app is not None:
            app = copy.deepcopy(request.app)
        elif request.component:
            from torchx_nb import config

            defaults = {
                **config.component_defaults(request.component),
                **self.ctx.component_defaults.get(request.component, {}),
            }
            app = self.ctx.component_app(request.component, request.component_args, defaults)
        else:
            raise TorchxNbError("nothing to run: give a component, a cell or an AppDef")
        for role in app.roles:
            role.env.update(request.env)
            if request.image:
                role.image = request.image
        if request.name:
            app.name = request.name
        # an AppDef made from a cell or a notebook (the cell component) holds its program
        return program_of(app) or app, app

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

    def _prepare(
        self,
        app: AppDef,
        program: Program,
        scheduler: str,
        opts: Options,
        workspace: str | None,
        parent_run_id: str | None,
        build: bool,
        push: bytes | None,
        packages: str,
        record: Mapping[str, str | None],
    ) -> PreparedRun:
        """The prepared run of ``program`` as ``app`` on ``scheduler`` with its resolved
        ``opts``: the app checked, the workspace used as the scheduler's workspace ability
        does it (built and pushed with ``build``, else only listed), the exact request."""
        self._validate_app(app)
        from torchx_nb.notices import notify_url

        notify_url()  # a notice URL that can never be sent is one line now, not at the job's end
        app = copy.deepcopy(app)
        sched = self.ctx.get_scheduler(scheduler)
        job_id = make_app_handle(scheduler, self.ctx.session, macros.app_id)
        for role in app.roles:
            role.env[ENV_JOB_ID] = job_id
            role.env[ENV_SESSION_ID] = self.ctx.session_id
            parent = os.environ.get(ENV_PARENT_RUN_ID) or parent_run_id
            if parent:
                role.env[ENV_PARENT_RUN_ID] = parent
        sched._pre_build_validate(app, scheduler, opts)
        use: WorkspaceUse | None = None
        built: Build | None = None
        plan = None
        if workspace:
            if not Path(workspace).expanduser().is_dir():
                raise TorchxNbError(f"workspace {workspace!r} is not a folder")
            if not isinstance(sched, WorkspaceMixin):
                raise TorchxNbError(
                    f"{scheduler} cannot take a workspace; drop --workspace or use a scheduler"
                    " that builds images"
                )
            job = RunnerProgramJob(sched, app, program, workspace, opts, push, packages, build)
            began = time.monotonic()
            use = sched.use_workspace(app, workspace, opts, job, build)
            if build and use.patches_images:
                built = Build(time.monotonic() - began)  # the job's first phase, before submit
            plan = job.shown_plan()
        elif push is not None:
            raise TorchxNbError(
                "--push sends variables with the cell's files, which need a workspace: drop"
                " --workspace none"
            )
        if isinstance(sched, TakesTypedOptions):
            sched._validate(app, scheduler, opts)
        else:
            sched._validate(app, scheduler)
        folder = use.folder if isinstance(use, FolderWorkspace) else None
        info = sched.dryrun_typed(app, opts, folder)
        metrics = sched.metric_definitions(opts) if isinstance(sched, DefinesMetrics) else {}
        return PreparedRun(
            program,
            app,
            info,
            scheduler,
            opts,
            use,
            plan,
            built,
            dict(record),
            metrics,
            dry=not build and use is not None,
        )

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
        build_workspace: bool | None = None,
        push: bytes | None = None,
        packages: str | None = None,
    ) -> AppDryRunInfo[Any]:
        """Build the scheduler's native request for ``app`` without submitting anything
        (TorchX's call; ``prepare`` is the one a ``RunRequest`` takes): TorchX's
        ``AppDryRunInfo`` over the prepared run, which ``schedule`` sends.

        By default (a dry run) the workspace is only listed, never built or pushed, and the
        request shows the cell script and the image name that the run will send. ``run``
        asks for ``build_workspace=True`` (through ``entries.run_call``, so a subclass's
        override with TorchX's signature is called as TorchX calls it). ``push``: variables
        (cloudpickle) sent into a cell's namespace; ``packages``: the environment (auto,
        none, or a requirements file)."""
        call = current_run_call() or RunCall()
        prepared = self._prepare_app(
            app,
            scheduler,
            cfg,
            workspace,
            parent_run_id,
            call.build_workspace if build_workspace is None else build_workspace,
            push,
            call.packages if packages is None else packages,
            call.record,
        )
        return PreparedDryRun(prepared)

    def run(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
        packages: str = "auto",
        **record: str | None,
    ) -> AppHandle:
        """Submit ``app``; ``record`` (cell_hash, notebook) goes into the job store too;
        ``packages``: the environment (auto, none, or a requirements file)."""
        from torchx_nb.environment.packages_option import check_packages_option

        packages = check_packages_option(packages)
        # TorchX's calls, with TorchX's arguments: a subclass's override is called as TorchX
        # calls it; what a run adds reaches the Runner's own dryrun through run_call
        call = RunCall(True, packages, {"workspace": workspace, **record})
        with run_call(call):
            info = self._entries.dryrun(
                app, scheduler, cfg=cfg, workspace=workspace, parent_run_id=parent_run_id
            )
        return self._entries.schedule(info)

    def _prepare_app(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None,
        workspace: str | None,
        parent_run_id: str | None,
        build: bool,
        push: bytes | None,
        packages: str,
        record: Mapping[str, str | None],
    ) -> PreparedRun:
        """TorchX's calls (``dryrun``, ``run``): the program is the one ``app`` holds (a cell
        component's), else ``app`` itself; ``cfg`` is resolved once, here."""
        options = self.ctx.resolve_opts(scheduler, cfg)
        return self._prepare(
            app,
            program_of(app) or app,
            scheduler,
            options,
            workspace,
            parent_run_id,
            build,
            push,
            packages,
            record,
        )

    def schedule(self, dryrun_info: AppDryRunInfo[Any], **record: str | None) -> AppHandle:
        """Send a dryrun's request and record the submission in the job store (TorchX's
        call: ``dryrun_info`` is what ``dryrun`` returned)."""
        if not isinstance(dryrun_info, PreparedDryRun):
            raise TorchxNbError("this dryrun info was not made by Runner.dryrun")
        return self.submit(dryrun_info.prepared, **record)

    def run_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppHandle:
        """Build the named component and run it: TorchX's ``dryrun_component`` then
        ``schedule`` (a Runner subclass's, when it overrides them)."""
        with run_call(RunCall(True, record={"workspace": workspace})):
            info = self._entries.dryrun_component(
                component,
                component_args,
                scheduler,
                cfg=cfg,
                workspace=workspace,
                parent_run_id=parent_run_id,
            )
        return self._entries.schedule(info)

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
        app = self.ctx.component_app(component, component_args)
        with contextlib.ExitStack() as stack:
            if build_workspace:
                stack.enter_context(run_call(RunCall(True, record={"workspace": workspace})))
            return self._entries.dryrun(
                app, scheduler, cfg=cfg, workspace=workspace, parent_run_id=parent_run_id
            )


def _refuse_dry(prepared: PreparedRun) -> None:
    """A run prepared for a dry run is refused before anything is sent: its job would find
    none of its files (its workspace was only listed)."""
    if prepared.dry:
        raise TorchxNbError(
            "this run was prepared for a dry run: its workspace was only listed, nothing was"
            " built or written; prepare it with build=True (Runner.dryrun(...,"
            " build_workspace=True)) to submit it"
        )


# the prepared runs sent by this process (by their token, which a copy shares: a deep copy, a
# pickle's round trip) and their handles; None while one is being sent. Process-wide: a copy
# handed to another Runner (the magic's beside get_runner()'s) is the same request.
_SENT: dict[str, AppHandle | None] = {}
_SENT_LOCK = threading.Lock()


@contextlib.contextmanager
def _sending(prepared: PreparedRun) -> Iterator[Callable[[AppHandle], AppHandle]]:
    """Claim ``prepared`` for sending, or refuse it in one line (a dry run, a run sent already
    or being sent by another thread); yields the call that records its handle once sent. A
    send that fails releases the claim, so the same run can be tried again."""
    _refuse_dry(prepared)
    token = prepared.token
    with _SENT_LOCK:
        if token in _SENT:
            sent = _SENT[token]
            raise TorchxNbError(
                f"this prepared run was already submitted as {sent};"
                " prepare it again to send another job"
                if sent
                else "this prepared run is being submitted already; prepare it again to send"
                " another job"
            )
        _SENT[token] = None

    def record(handle: AppHandle) -> AppHandle:
        with _SENT_LOCK:
            _SENT[token] = handle
        return handle

    try:
        yield record
    except BaseException:
        with _SENT_LOCK:
            if _SENT.get(token) is None:
                del _SENT[token]
        raise
