"""The Runner: one object through which the CLI, the magics and the server dryrun, run, watch,
list and cancel apps on any scheduler. Mirrors ``torchx.runner.Runner``, and records every
submission in the job store before ``run`` returns.

The seams it owns:

- **one submit path**: a ``RunRequest`` (what to run, where, with which options and
  workspace) goes through ``prepare`` (scheduler and options resolved once, workspace used as
  the scheduler's abilities allow, the dry run: one frozen ``PreparedRun``) and ``submit``
  (sent, recorded); the CLI, the magics and the Python API all call them;
- **abilities, not probes**: what a scheduler can do is read from the ability classes it
  derives from (``isinstance``);
- **one status refresher**: ``refresh`` asks each scheduler once per batch of handles, and the
  job store is written only when a state really changed.

The Runner is composed: it holds its parts — ``Submitting``, ``Watching``, ``Results``,
``Logs``, ``Noticing`` (job-end notices) and ``Attempts`` (a job's attempts across
preemptions), each in its own module — over one shared
``RunnerContext`` (``core``: session, job store, schedulers, options), and each of its
methods is one delegation to the part that does it (whose docstring it shows)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from torchx_nb.jobstore import JobStore
from torchx_nb.runner.attempts import Attempts
from torchx_nb.runner.core import RunnerContext
from torchx_nb.runner.logs import Logs
from torchx_nb.runner.noticing import Noticing
from torchx_nb.runner.requests import (
    DEFAULT_SCHEDULER,
    DEFAULT_SESSION,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_SESSION_ID,
    AppValidationError,
    NoSuchReplica,
    Options,
    PreparedRun,
    RunRequest,
)
from torchx_nb.runner.results import Results
from torchx_nb.runner.submitting import Submitting
from torchx_nb.runner.watching import Watching
from torchx_nb.schedulers import SchedulerFactory
from torchx_nb.schedulers.api import ListAppResponse, Scheduler
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppHandle,
    AppStatus,
    CfgVal,
    runopts,
)
from torchx_nb.specs.failure import FailureCard
from torchx_nb.specs.log_line import Stream
from torchx_nb.specs.preemption import AttemptLog


class Runner:
    """Submits apps to schedulers and answers for them by handle (``sched://session/app_id``):
    a small object holding its parts over one shared context; every method delegates."""

    def __init__(
        self,
        name: str = DEFAULT_SESSION,
        scheduler_factories: Mapping[str, SchedulerFactory] | None = None,
        component_defaults: Mapping[str, Mapping[str, str]] | None = None,
        scheduler_params: Mapping[str, Any] | None = None,
        jobstore: JobStore | None = None,
    ) -> None:
        ctx = RunnerContext(
            name, scheduler_factories, component_defaults, scheduler_params, jobstore
        )
        self._ctx = ctx
        self._logs = Logs(ctx)
        self._noticing = Noticing(ctx, self.failure_cards)
        self._attempts = Attempts(ctx)
        self._watching = Watching(ctx, self._noticing, self._attempts)
        self._results = Results(ctx, self._watching, self._logs)
        self._submitting = Submitting(ctx, self._noticing, self._attempts)
        ctx.on_store_opened = self._noticing.send_owed

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
        self._ctx.close()

    def name(self) -> str:
        """The session's name (TorchX's)."""
        return self._ctx.session

    @property
    def hand_off_notices(self) -> bool:
        """Whether job-end notices go to a sender process of their own (a short-lived
        command, the CLI, sets it: the process outlives it until the webhook answered)."""
        return self._ctx.hand_off_notices

    @hand_off_notices.setter
    def hand_off_notices(self, value: bool) -> None:
        self._ctx.hand_off_notices = value

    @property
    def jobstore(self) -> JobStore:
        return self._ctx.jobstore

    def scheduler_factories(self) -> dict[str, SchedulerFactory]:
        return self._ctx.scheduler_factories()

    def scheduler_backends(self) -> list[str]:
        return self._ctx.scheduler_backends()

    def get_scheduler(self, scheduler: str) -> Scheduler[Any]:
        return self._ctx.get_scheduler(scheduler)

    def scheduler_run_opts(self, scheduler: str) -> runopts:
        return self._ctx.scheduler_run_opts(scheduler)

    def cfg_from_str(self, scheduler: str, *cfg_literals: str) -> dict[str, CfgVal]:
        return self._ctx.cfg_from_str(scheduler, *cfg_literals)

    def cfg_with_config_files(
        self, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> dict[str, CfgVal]:
        return self._ctx.cfg_with_config_files(scheduler, cfg)

    def resolve_opts(self, scheduler: str, cfg: Any) -> Options:
        return self._ctx.resolve_opts(scheduler, cfg)

    def default_scheduler(self, preferred: str | None = None) -> str:
        return self._ctx.default_scheduler(preferred)

    @staticmethod
    def builtin_components() -> dict[str, Any]:
        return RunnerContext.builtin_components()

    @staticmethod
    def workspace_preview(path: str, max_rows: int = 50) -> str:
        return RunnerContext.workspace_preview(path, max_rows)

    def component_app(
        self,
        component: str,
        component_args: Sequence[str] | Mapping[str, Any],
        defaults: Mapping[str, str] | None = None,
    ) -> AppDef:
        return self._ctx.component_app(component, component_args, defaults)

    def uses_images(self, scheduler: str) -> bool:
        return self._ctx.uses_images(scheduler)

    def is_local(self, handle_or_scheduler: str) -> bool:
        return self._ctx.is_local(handle_or_scheduler)

    def prepare(self, request: RunRequest, build: bool = False) -> PreparedRun:
        return self._submitting.prepare(request, build)

    def submit(self, prepared: PreparedRun, **record: str | None) -> AppHandle:
        return self._submitting.submit(prepared, **record)

    def submit_array(
        self,
        prepared: PreparedRun,
        points: list[str],
        max_parallel: int | None,
        sweep: str,
    ) -> list[AppHandle]:
        return self._submitting.submit_array(prepared, points, max_parallel, sweep)

    def request_scheduler(self, request: RunRequest) -> str:
        return self._submitting.request_scheduler(request)

    def request_workspace(self, request: RunRequest) -> str | None:
        return self._submitting.request_workspace(request)

    def request_packages(self, request: RunRequest) -> str:
        return self._submitting.request_packages(request)

    def request_opts(self, request: RunRequest) -> Options:
        return self._submitting.request_opts(request)

    def request_app(self, request: RunRequest) -> AppDef:
        return self._submitting.request_app(request)

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
        return self._submitting.dryrun(
            app, scheduler, cfg, workspace, parent_run_id, build_workspace, push, packages
        )

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
        return self._submitting.run(
            app, scheduler, cfg, workspace, parent_run_id, packages, **record
        )

    def schedule(self, dryrun_info: AppDryRunInfo[Any], **record: str | None) -> AppHandle:
        return self._submitting.schedule(dryrun_info, **record)

    def run_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppHandle:
        return self._submitting.run_component(
            component, component_args, scheduler, cfg, workspace, parent_run_id
        )

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
        return self._submitting.dryrun_component(
            component, component_args, scheduler, cfg, workspace, parent_run_id, build_workspace
        )

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        return self._watching.status(app_handle)

    def status_many(self, app_handles: list[AppHandle]) -> dict[AppHandle, AppStatus | None]:
        return self._watching.status_many(app_handles)

    def refresh(
        self, app_handles: Iterable[AppHandle], record_unknown: bool = False
    ) -> dict[AppHandle, AppStatus | Exception | None]:
        return self._watching.refresh(app_handles, record_unknown)

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        return self._watching.wait(app_handle, wait_interval, timeout)

    def cancel(self, app_handle: AppHandle) -> AppStatus:
        return self._watching.cancel(app_handle)

    stop = cancel

    def cancel_array(self, app_handles: list[AppHandle]) -> None:
        return self._watching.cancel_array(app_handles)

    def delete(self, app_handle: AppHandle) -> None:
        return self._watching.delete(app_handle)

    def describe(self, app_handle: AppHandle) -> AppDef | None:
        return self._watching.describe(app_handle)

    def submitted_status(self, app_handle: AppHandle) -> AppStatus | None:
        return self._watching.submitted_status(app_handle)

    def output_store(self, app_handle: AppHandle) -> Any:
        return self._results.output_store(app_handle)

    def result(self, app_handle: AppHandle, status: AppStatus | None = None) -> Any:
        return self._results.result(app_handle, status)

    def result_repr(self, app_handle: AppHandle) -> str | None:
        return self._results.result_repr(app_handle)

    def failure_cards(
        self, app_handle: AppHandle, status: AppStatus | None = None, lines: int = 5
    ) -> list[FailureCard]:
        return self._results.failure_cards(app_handle, status, lines)

    def outputs(self, app_handle: AppHandle) -> Any:
        return self._results.outputs(app_handle)

    def environment(self, app_handle: AppHandle) -> Any:
        return self._results.environment(app_handle)

    def executed_notebook(self, app_handle: AppHandle, folder: str | Path) -> Path:
        return self._results.executed_notebook(app_handle, folder)

    def download(self, app_handle: AppHandle, dest: str | Path, progress: Any = None) -> Path:
        return self._results.download(app_handle, dest, progress)

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
        return self._logs.log_lines(
            app_handle, role_name, k, regex, since, until, should_tail, streams
        )

    def log_tail(
        self,
        app_handle: AppHandle,
        role_name: str | None,
        k: int = 0,
        n: int = 100,
        regex: str | None = None,
        streams: Stream | None = None,
    ) -> list[str]:
        return self._logs.log_tail(app_handle, role_name, k, n, regex, streams)

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
        return self._logs.log_window(app_handle, role_name, k, start, end, regex, streams, keep)

    def notice_line(self, app_handle: AppHandle) -> str | None:
        return self._noticing.notice_line(app_handle)

    def follow_notice(self, app_handle: AppHandle, on_line: Callable[[str], None]) -> None:
        return self._noticing.follow_notice(app_handle, on_line)

    def send_owed_notices(self, skip: frozenset[str] = frozenset()) -> list[str]:
        return self._noticing.send_owed(skip)

    def attempt_log(self, app_handle: AppHandle) -> AttemptLog:
        return self._attempts.attempt_log(app_handle)

    def attempt_lines(self, app_handle: AppHandle) -> list[str]:
        return self._attempts.attempt_lines(app_handle)

    def preempt(self, app_handle: AppHandle, grace: float | None = None) -> None:
        return self._attempts.preempt(app_handle, grace)

    def list(
        self, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> list[ListAppResponse]:
        return self._watching.list(scheduler, cfg)


def _show_parts_docs() -> None:
    """Each delegating method shows the docstring of the part's method it calls."""
    for part in (RunnerContext, Submitting, Watching, Results, Logs, Noticing, Attempts):
        for name, fn in vars(Runner).items():
            own = getattr(part, name, None)
            if name.startswith("_") or own is None or getattr(fn, "__doc__", None):
                continue
            target = fn.fget if isinstance(fn, property) else fn
            target = target.__func__ if isinstance(target, staticmethod) else target
            inner = own.fget if isinstance(own, property) else own
            target.__doc__ = inner.__doc__
    Runner.send_owed_notices.__doc__ = Noticing.send_owed.__doc__


_show_parts_docs()


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


__all__ = [
    "DEFAULT_SCHEDULER",
    "DEFAULT_SESSION",
    "ENV_JOB_ID",
    "ENV_PARENT_RUN_ID",
    "ENV_SESSION_ID",
    "AppValidationError",
    "NoSuchReplica",
    "PreparedRun",
    "RunRequest",
    "Runner",
    "get_runner",
]
