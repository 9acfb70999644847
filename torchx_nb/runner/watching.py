"""Watching: the status of jobs (one refresher for many handles), waiting, cancelling,
the job-end notice."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from torchx_nb.runner.core import _status_of
from torchx_nb.runner.entries import WatchEntries
from torchx_nb.runner.part import RunnerPart
from torchx_nb.schedulers.abilities import (
    DescribesMany,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import ListAppResponse, Scheduler
from torchx_nb.specs.api import (
    AppDef,
    AppHandle,
    AppState,
    AppStatus,
    CfgVal,
    ReplicaStatus,
    RoleStatus,
    TorchxNbError,
    UnknownAppException,
    is_terminal,
    make_app_handle,
    message_text,
    parse_app_handle,
)


class Watching(RunnerPart[WatchEntries]):
    """Status, refresh, wait, cancel, list, over the runner's shared context; what a status
    says of preemptions goes through ``attempts``, a job seen ending is told to
    ``noticing``; ``wait`` polls the Runner's (a subclass's) ``status``."""

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """Current status, or None when the scheduler no longer knows the app. The job store
        is updated when the state changed."""
        sched, _, app_id = self.ctx.scheduler_and_id(app_handle)
        return self._status_of_current(sched, app_handle, app_id)

    def _status_of_current(
        self, sched: Scheduler[Any], app_handle: AppHandle, app_id: str
    ) -> AppStatus | None:
        """``status`` of ``app_handle`` whose current attempt is the native ``app_id``."""
        desc = sched.describe(app_id)
        if desc is None:
            self.ctx.apps.pop(app_handle, None)
            return self._stored_status(app_handle)
        status = self._attempts.seen(app_handle, app_id, desc, _status_of(desc))
        self._record_state(app_handle, status)
        return status

    def _stored_status(self, app_handle: AppHandle) -> AppStatus | None:
        """An ended job its scheduler keeps nothing of (a removed container, a Kubernetes Job
        deleted by its TTL): the job store's record is the truth — its final state, message
        and times (its outputs give the failure cards). None for a job the store does not
        know ended."""
        try:
            rec = self.ctx.jobstore.get(app_handle)
        except Exception:
            return None
        if rec is None or not rec.is_terminal:
            return None
        from torchx_nb.runner.endings import roles_from_endings

        return AppStatus(
            AppState[rec.state],
            msg=rec.msg or "",
            started=rec.started,
            ended=rec.ended,
            roles=roles_from_endings(rec.endings),
        )

    def status_many(self, app_handles: list[AppHandle]) -> dict[AppHandle, AppStatus | None]:
        """Statuses of many apps of one scheduler: a single ``describe_many`` call where the
        backend can (``DescribesMany``), else ``status`` per app."""
        unique = list(dict.fromkeys(app_handles))
        if not unique:
            return {}
        sched = self.ctx.get_scheduler(parse_app_handle(unique[0]).scheduler_backend)
        parsed = [parse_app_handle(h).app_id for h in unique]
        # the current attempts' ids in one read of the store (not one per job: a kernel
        # watching 20 local jobs opened the store 40 times a second for them)
        current = self.ctx.current_ids(unique, parsed)
        if not isinstance(sched, DescribesMany):
            return {
                h: self._status_of_current(sched, h, app_id)
                for h, app_id in zip(unique, current, strict=True)
            }
        ids = dict(zip(current, unique, strict=True))
        found = sched.describe_many(list(ids))
        out: dict[AppHandle, AppStatus | None] = {}
        for app_id, handle in ids.items():
            desc = found.get(app_id)
            if desc is None:
                out[handle] = self._stored_status(handle)
                continue
            status = self._attempts.seen(handle, app_id, desc, _status_of(desc))
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
            self.ctx.jobstore.update_state(app_handle, AppState.UNKNOWN.name)

    def _record_state(self, app_handle: AppHandle, status: AppStatus) -> None:
        """Write a changed state to the job store. A state is remembered as written only once
        the store took it: a write that fails (the store locked past its timeout) is tried
        again at the next status call, so a job's end is never lost."""
        state = status.state.name
        if self.ctx.last_state.get(app_handle) == state:
            return
        try:
            msg = message_text(status.msg) or None
            ended = status.ended if status.is_terminal() else None
            started = status.started
            if started is None and status.state == AppState.RUNNING:
                started = time.time()  # the scheduler keeps no start time: when it was seen
            endings = None
            if status.is_terminal():
                from torchx_nb.runner.endings import endings_json

                endings = endings_json(status.roles)
            self.ctx.jobstore.update_state(
                app_handle, state, msg, ended=ended, started=started, endings=endings
            )
        except Exception as e:  # the store is a convenience; never fail a status call on it
            warnings.warn(f"could not update the job store: {e}", stacklevel=2)
            return
        self.ctx.last_state[app_handle] = state
        if status.is_terminal():
            self._noticing.notice(app_handle, status)

    def wait(
        self, app_handle: AppHandle, wait_interval: float = 10, timeout: float | None = None
    ) -> AppStatus | None:
        """Poll until the app is terminal (or unknown). Polls start at 50 ms and back off to
        ``wait_interval`` seconds, so short jobs return promptly."""
        delay = 0.05
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            status = self._entries.status(app_handle)
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
        sched, _, app_id = self.ctx.scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            raise UnknownAppException(app_handle)
        status = _status_of(desc)
        if desc.ended_preempted:  # preempted, its next attempt not sent yet: it ends here
            status.state, status.msg = AppState.CANCELLED, "cancelled while preempted"
            self._record_state(app_handle, status)
            # another watcher may have sent the next attempt meanwhile: it is stopped too
            with contextlib.suppress(Exception):
                rec = self.ctx.jobstore.get(app_handle)
                if rec is not None and rec.app_id and rec.app_id != app_id:
                    sched._cancel_existing(rec.app_id)
        elif not is_terminal(status.state):
            sched._cancel_existing(app_id)
        return status

    stop = cancel

    def cancel_array(self, app_handles: list[AppHandle]) -> None:
        """Cancel every trial of the native arrays ``app_handles`` belong to that has not
        ended (a sweep's Cancel all): one call per array where the backend has one."""
        by_backend: dict[str, list[str]] = {}
        for handle in app_handles:
            _, backend, app_id = self.ctx.scheduler_and_id(handle)
            by_backend.setdefault(backend, []).append(app_id)
        for backend, app_ids in by_backend.items():
            sched = self.ctx.get_scheduler(backend)
            if not isinstance(sched, SubmitsArrays):
                raise TorchxNbError(f"{backend} has no native arrays")
            sched.cancel_arrays(app_ids)

    def delete(self, app_handle: AppHandle) -> None:
        sched, _, app_id = self.ctx.scheduler_and_id(app_handle)
        sched.delete(app_id)

    def describe(self, app_handle: AppHandle) -> AppDef | None:
        """The AppDef: this runner's own copy if it launched the app, else the scheduler's
        reconstruction."""
        sched, _, app_id = self.ctx.scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            return None
        self._record_state(app_handle, _status_of(desc))  # what it learned, as status records it
        if app_handle in self.ctx.apps:
            return self.ctx.apps[app_handle]
        return AppDef(name=app_id, roles=desc.roles, metadata=desc.metadata)

    def submitted_status(self, app_handle: AppHandle) -> AppStatus | None:
        """A job this runner just submitted, as submitted: its roles and replicas from the
        AppDef, no scheduler call (watchers start from it; the poller asks at once). None for
        a job this runner did not submit."""
        app = self.ctx.apps.get(app_handle)
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

    def list(
        self, scheduler: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> list[ListAppResponse]:
        """The scheduler's own list of our apps, with handles filled in. A ``TakesTypedOptions``
        scheduler gets its options (required ones may be missing: e.g. every queue)."""
        sched = self.ctx.get_scheduler(scheduler)
        if isinstance(sched, TakesTypedOptions):
            apps = sched.list(sched.given_opts(cfg))
        else:
            apps = sched.list()
        for app in apps:
            app.app_handle = make_app_handle(scheduler, self.ctx.session, app.app_id)
        return apps
