"""The Runner's shared context: its session, job store, schedulers and their options, and
what it knows of the jobs it submitted; every part of the Runner works over one."""

from __future__ import annotations

import contextlib
import inspect
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from torchx_nb.jobstore import JobStore
from torchx_nb.runner.requests import (
    DEFAULT_SCHEDULER,
    Options,
    _params_from_env,
)
from torchx_nb.schedulers import (
    SchedulerFactory,
    builtin_scheduler_factories,
    get_scheduler_factories,
)
from torchx_nb.schedulers.abilities import (
    DirWorkspaceMixin,
)
from torchx_nb.schedulers.api import DescribeAppResponse, Scheduler
from torchx_nb.specs.api import (
    AppDef,
    AppHandle,
    AppStatus,
    CfgVal,
    RoleStatus,
    UnknownSchedulerException,
    parse_app_handle,
    runopts,
)


class RunnerContext:
    """What every part of the Runner shares: its session (``session``), its job store, its
    schedulers and their options, the AppDefs it submitted (``apps``) and the last state it
    recorded of each job (``last_state``)."""

    def __init__(
        self,
        name: str,
        factories: Mapping[str, SchedulerFactory] | None,
        component_defaults: Mapping[str, Mapping[str, str]] | None,
        params: Mapping[str, Any] | None,
        jobstore: JobStore | None,
    ) -> None:
        self.session = name
        self._explicit_factories = factories is not None
        self._all_factories: dict[str, SchedulerFactory] | None = (
            dict(factories) if factories is not None else None
        )
        self.component_defaults = dict(component_defaults or {})
        self._scheduler_params = {**_params_from_env(), **dict(params or {})}
        self._schedulers: dict[str, Scheduler[Any]] = {}
        self.apps: dict[AppHandle, AppDef] = {}
        self._jobstore = jobstore
        self.last_state: dict[AppHandle, str] = {}
        self._local: dict[str, bool] = {}
        self.session_id = secrets.token_hex(16)
        # a short-lived command (the CLI) hands its job-end notices to a sender process of
        # their own, which outlives it until the webhook answered (notices.Notifier)
        self.hand_off_notices = False
        # a short-lived command keeps its job store connections open until it exits (a
        # long-lived process opens one per call: ``JobStore``'s ``keep``)
        self.keep_store_connections = False
        #: called once, when the job store is first opened here (the Runner sends the
        #: notices the outbox still owes)
        self.on_store_opened: Callable[[], object] | None = None

    def close(self) -> None:
        """Close every scheduler this runner created."""
        for sched in self._schedulers.values():
            sched.close()
        self._schedulers.clear()

    @property
    def jobstore(self) -> JobStore:
        """The job store, opened on first use (then what its outbox owes is sent)."""
        if self._jobstore is None:
            self._jobstore = JobStore(keep=self.keep_store_connections)
            if self.on_store_opened is not None:
                self.on_store_opened()
        return self._jobstore

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
            sched = factory(self.session, **self._params_for(factory))
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

    def resolve_opts(self, scheduler: str, cfg: Any) -> Options:
        """The scheduler's options from ``cfg``, checked once by its resolver: an unknown key
        names the closest option; the result is the scheduler's typed structure
        (``TakesTypedOptions``: its ``Scheduler[Opts]`` parameter) or, for a scheduler written
        TorchX's way, a mapping."""
        return self.get_scheduler(scheduler).resolve_opts(cfg, strict=True)

    def default_scheduler(self, preferred: str | None = None) -> str:
        """``preferred`` (a front end's own default), else ``[cli:run] scheduler``, else
        local_cwd."""
        if preferred:
            return preferred
        from torchx_nb import config

        return config.cli_defaults("run").get("scheduler") or DEFAULT_SCHEDULER

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
        given = defaults if defaults is not None else self.component_defaults.get(component, {})
        args = list(component_args) if not isinstance(component_args, Mapping) else component_args
        return materialize_appdef(fn, args, dict(given), prog=f"torchx-nb run {component}")

    def scheduler_and_id(self, app_handle: AppHandle) -> tuple[Scheduler[Any], str, str]:
        """The handle's scheduler, its name, and the native id of its current attempt (a job
        submitted again after a preemption answers for its latest native job)."""
        parsed = parse_app_handle(app_handle)
        app_id = self.current_id(app_handle, parsed.app_id)
        return self.get_scheduler(parsed.scheduler_backend), parsed.scheduler_backend, app_id

    def current_id(self, app_handle: AppHandle, parsed_id: str) -> str:
        """The native id of the handle's current attempt (the handle's own id for a job the
        store does not know, or never submitted again)."""
        with contextlib.suppress(Exception):
            return self.jobstore.current_ids([app_handle]).get(app_handle, parsed_id)
        return parsed_id

    def current_ids(self, app_handles: list[AppHandle], parsed: list[str]) -> list[str]:
        """``current_id`` of many handles, in one read of the store."""
        try:
            found = self.jobstore.current_ids(app_handles)
        except Exception:
            return parsed
        return [found.get(h, p) for h, p in zip(app_handles, parsed, strict=True)]

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
