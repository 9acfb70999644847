"""Submitting: a ``RunRequest`` prepared (the program, scheduler, options, workspace, the dry
run) and sent, recorded in the job store; TorchX's ``dryrun``/``run``/``schedule``."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchx_nb.jobstore import JobRecord
from torchx_nb.runner.core import RunnerCore
from torchx_nb.runner.requests import (
    _ROLE_NAME_RE,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_SESSION_ID,
    NO_WORKSPACE,
    AppValidationError,
    PreparedRun,
    RunRequest,
)
from torchx_nb.schedulers.abilities import (
    DefinesMetrics,
    DirWorkspaceMixin,
    LocalWorkspace,
    RunsEndHook,
    StoresOutputs,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import Scheduler
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
from torchx_nb.specs.program import CellProgram, program_of
from torchx_nb.workspace import WorkspaceMixin


class Submitting(RunnerCore):
    """Prepare and send runs, and record them."""

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
            packages=self.request_packages(request),
        )
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
        sched = self.get_scheduler(scheduler)
        metrics = sched.metric_definitions(info._cfg) if isinstance(sched, DefinesMetrics) else {}
        return PreparedRun(
            program_of(app) or app, info, scheduler, info._cfg, workspace, record, metrics
        )

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

    def request_packages(self, request: RunRequest) -> str:
        """What the job's environment layer holds: as asked, else ``[cli:run] packages``,
        else auto (checked: auto, none, or an existing requirements file)."""
        from torchx_nb import config
        from torchx_nb.environment.packages_option import check_packages_option

        value = request.packages or config.cli_defaults("run").get("packages") or "auto"
        return check_packages_option(str(value))

    def request_opts(self, request: RunRequest) -> Any:
        """The scheduler options ``request`` runs with: the front end's defaults, then
        ``-cfg``, then ``.torchxconfig``, resolved by the scheduler (its typed options, or a
        dict for a scheduler written TorchX's way)."""
        scheduler = self.request_scheduler(request)
        cfg = dict(request.scheduler_defaults.get(scheduler, {}))
        cfg.update(self.cfg_from_str(scheduler, *request.cfg))
        return self.resolve_opts(scheduler, self.cfg_with_config_files(scheduler, cfg))

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
        packages: str = "auto",
    ) -> AppDryRunInfo[Any]:
        """Build the scheduler's native request for ``app`` without submitting anything.

        By default (a dry run) the workspace is only listed, never built or pushed:
        ``info.workspace_preview`` says what would ship, and the request shows the cell script
        and the image name that the run will send. ``run`` passes ``build_workspace=True``.
        ``push``: variables (cloudpickle) sent into a cell's namespace; ``packages``: the
        environment (auto, none, or a requirements file)."""
        self._validate_app(app)
        from torchx_nb.notices import notify_url

        notify_url()  # a notice URL that can never be sent is one line now, not at the job's end
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
        plan = None
        if workspace:
            began = time.monotonic()
            folder, preview, plan = self._use_workspace(
                sched, scheduler, app, workspace, opts, build_workspace, push, packages
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
        info.environment = plan
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
        packages: str = "auto",
    ) -> tuple[LocalWorkspace | None, str | None, Any]:
        """Give the workspace to the scheduler as its abilities allow: patched onto each role's
        image (``WorkspaceMixin``; listed only, for a dry run), or as the folder the job runs
        from (``DirWorkspaceMixin``). A cell role then runs under the cell runner (its value,
        exception and outputs come back), its files beside the workspace: in the image, in the
        copied job folder, or, for a job that runs in place, in a private folder of the data
        dir written at build time. An image also gets the environment layer the program
        needs (``packages``). Returns the folder, the dry run's preview and the environment
        plan."""
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
            return folder, None if build else sched.preview_workspace(workspace, opts), None
        if isinstance(sched, WorkspaceMixin):
            plans: dict[str, Any] = {}
            for role in app.roles:
                extra = program_files(program, push) if program and role is cell_role else None
                if extra is not None:  # the runner names it when the cell needs a module it lacks
                    role.env["TORCHX_NB_BASE_IMAGE"] = role.image
                if role.image not in plans:
                    plans[role.image] = self._plan_environment(
                        sched, program or app, role.image, workspace, opts, packages, build
                    )
                plan = plans[role.image]
                try:
                    if extra is not None and plan is not None and plan.contents is not None:
                        from torchx_nb.environment.record import PLAN_FILE, plan_file

                        extra[PLAN_FILE] = plan_file(plan)  # the job warns when it differs
                    if build:
                        from torchx_nb.environment.layer import EnvironmentBuild

                        pickles = isinstance(program, CellProgram) and extra is not None
                        env = EnvironmentBuild(plan) if plan is not None and plan.add else None
                        sched.patch_image(role, workspace, opts, extra or {}, pickles, env)
                    else:
                        sched.plan_image(role, workspace, opts)
                finally:
                    if plan is not None:
                        plan.drop_head_start()  # one the build did not take, or a refusal
                if program is not None and extra is not None:
                    point_at_runner(role, program, "", push is not None)
            shown = next((p for p in plans.values() if p is not None), None)
            return None, None if build else sched.preview_workspace(workspace), shown
        raise TorchxNbError(
            f"{scheduler} cannot take a workspace; drop --workspace or use a scheduler"
            " that builds images"
        )

    def _plan_environment(
        self,
        sched: WorkspaceMixin[Any],
        program: Any,
        image: str,
        workspace: str,
        opts: Any,
        packages: str,
        build: bool,
    ) -> Any:
        """The environment plan of ``program`` on ``image``; its warnings (a module neither
        the kernel nor the image has) are shown once, before submit."""
        from torchx_nb.environment.plan import plan_environment

        plan = plan_environment(
            program,
            workspace,
            image,
            lambda: sched.read_base_image(image, workspace, opts),
            packages,
            build,
            sched.upload_target(workspace, opts) if build else None,
        )
        if plan is not None and build:
            for line in plan.warnings:
                _warn_plain(line)
        return plan

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

        info = self.dryrun(
            app,
            scheduler,
            cfg,
            workspace,
            parent_run_id,
            build_workspace=True,
            packages=check_packages_option(packages),
        )
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


def _plain(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
    return f"warning: {message}\n"


def _warn_plain(line: str) -> None:
    """Warn with ``line`` as the user reads it, ``warning: …``, without Python's
    ``file.py:123: UserWarning:`` prefix and source line (a handler that formats warnings
    its own way, as the CLI's, still does; warning filters still apply)."""
    before = warnings.formatwarning
    warnings.formatwarning = _plain
    try:
        warnings.warn(line, UserWarning, stacklevel=2)
    finally:
        warnings.formatwarning = before
