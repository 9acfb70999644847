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

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

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
    PreparedRun,
    RunRequest,
)
from torchx_nb.runner.results import Results
from torchx_nb.runner.submitting import Submitting
from torchx_nb.runner.watching import Watching
from torchx_nb.schedulers import SchedulerFactory

P = ParamSpec("P")
R = TypeVar("R")


def _delegate(
    part: str, method: Callable[Concatenate[Any, P], R]
) -> Callable[Concatenate[Runner, P], R]:
    """The Runner's method that calls ``method`` of its part ``part`` (an attribute holding
    the part), typed, named and documented as ``method``: each of its methods is one line."""
    name = method.__name__

    @functools.wraps(method)
    def delegated(self: Runner, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, getattr(getattr(self, part), name)(*args, **kwargs))

    return delegated


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
        # TorchX's composite calls (run, run_component, wait) go through this Runner's own
        # methods, so a subclass's override of schedule, dryrun or status is the one called
        self._watching = Watching(ctx, self._noticing, self._attempts, entries=self)
        self._results = Results(ctx, self._watching, self._logs)
        self._submitting = Submitting(ctx, self._noticing, self._attempts, entries=self)
        ctx.on_store_opened = self._noticing.send_owed

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
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
    def keep_store_connections(self) -> bool:
        """Whether the job store, once opened, keeps each thread's connection until the
        process ends (a short-lived command, the CLI, sets it: ``JobStore``'s ``keep``)."""
        return self._ctx.keep_store_connections

    @keep_store_connections.setter
    def keep_store_connections(self, value: bool) -> None:
        self._ctx.keep_store_connections = value

    @property
    def jobstore(self) -> JobStore:
        """The job store (the shared context's, opened on first use)."""
        return self._ctx.jobstore

    # each method below is its part's (signature and docstring shown as the part's)

    # the shared context: schedulers, options, components
    scheduler_factories = _delegate("_ctx", RunnerContext.scheduler_factories)
    scheduler_backends = _delegate("_ctx", RunnerContext.scheduler_backends)
    get_scheduler = _delegate("_ctx", RunnerContext.get_scheduler)
    scheduler_run_opts = _delegate("_ctx", RunnerContext.scheduler_run_opts)
    cfg_from_str = _delegate("_ctx", RunnerContext.cfg_from_str)
    cfg_with_config_files = _delegate("_ctx", RunnerContext.cfg_with_config_files)
    resolve_opts = _delegate("_ctx", RunnerContext.resolve_opts)
    default_scheduler = _delegate("_ctx", RunnerContext.default_scheduler)
    builtin_components = staticmethod(RunnerContext.builtin_components)
    workspace_preview = staticmethod(RunnerContext.workspace_preview)
    component_app = _delegate("_ctx", RunnerContext.component_app)
    uses_images = _delegate("_ctx", RunnerContext.uses_images)
    is_local = _delegate("_ctx", RunnerContext.is_local)
    # submitting
    prepare = _delegate("_submitting", Submitting.prepare)
    submit = _delegate("_submitting", Submitting.submit)
    submit_array = _delegate("_submitting", Submitting.submit_array)
    request_scheduler = _delegate("_submitting", Submitting.request_scheduler)
    request_workspace = _delegate("_submitting", Submitting.request_workspace)
    request_packages = _delegate("_submitting", Submitting.request_packages)
    request_opts = _delegate("_submitting", Submitting.request_opts)
    request_app = _delegate("_submitting", Submitting.request_app)
    dryrun = _delegate("_submitting", Submitting.dryrun)
    run = _delegate("_submitting", Submitting.run)
    schedule = _delegate("_submitting", Submitting.schedule)
    run_component = _delegate("_submitting", Submitting.run_component)
    dryrun_component = _delegate("_submitting", Submitting.dryrun_component)
    # watching
    status = _delegate("_watching", Watching.status)
    status_many = _delegate("_watching", Watching.status_many)
    refresh = _delegate("_watching", Watching.refresh)
    wait = _delegate("_watching", Watching.wait)
    cancel = _delegate("_watching", Watching.cancel)
    stop = cancel
    cancel_array = _delegate("_watching", Watching.cancel_array)
    delete = _delegate("_watching", Watching.delete)
    describe = _delegate("_watching", Watching.describe)
    submitted_status = _delegate("_watching", Watching.submitted_status)
    # results
    output_store = _delegate("_results", Results.output_store)
    result = _delegate("_results", Results.result)
    result_repr = _delegate("_results", Results.result_repr)
    failure_cards = _delegate("_results", Results.failure_cards)
    outputs = _delegate("_results", Results.outputs)
    environment = _delegate("_results", Results.environment)
    executed_notebook = _delegate("_results", Results.executed_notebook)
    download = _delegate("_results", Results.download)
    # logs
    log_lines = _delegate("_logs", Logs.log_lines)
    log_tail = _delegate("_logs", Logs.log_tail)
    log_window = _delegate("_logs", Logs.log_window)
    # job-end notices
    notice_line = _delegate("_noticing", Noticing.notice_line)
    follow_notice = _delegate("_noticing", Noticing.follow_notice)
    send_owed_notices = _delegate("_noticing", Noticing.send_owed)
    # attempts across preemptions
    attempt_log = _delegate("_attempts", Attempts.attempt_log)
    attempt_lines = _delegate("_attempts", Attempts.attempt_lines)
    preempt = _delegate("_attempts", Attempts.preempt)
    list = _delegate("_watching", Watching.list)


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
