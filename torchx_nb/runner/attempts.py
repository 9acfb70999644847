"""Attempts: a job's handle stays its handle across preemptions. Each preemption its backend
reports is kept in the job store as the end of an attempt; a job its backend will not run again
after a preemption (Slurm's PreemptMode=CANCEL, a retry counter spent) is submitted again as the
next attempt of the same handle; a job preempted more often than its ``max_preemptions`` fails
with one line; ``preempt`` preempts a running job the way its backend would.

A job's end (and so its notice) is recorded only at the real end: the status that says a native
job ended with its preemption is never written as the job's state."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import replace

from torchx_nb.runner.checkpoints import Restores
from torchx_nb.runner.core import RunnerContext
from torchx_nb.runner.requests import PreparedRun
from torchx_nb.schedulers.abilities import Preemptible, StoresOutputs, SubmitsAgain
from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.specs.api import (
    AppHandle,
    AppState,
    AppStatus,
    UnknownAppException,
    is_terminal,
    message_text,
)
from torchx_nb.specs.exceptions import NotPreemptible
from torchx_nb.specs.preemption import (
    DEFAULT_MAX_PREEMPTIONS,
    AttemptLog,
    Preemption,
    limit_line,
)
from torchx_nb.specs.structured_opts import PreemptionOpts


class Attempts:
    """The attempts of a job under its one handle, over the runner's shared context (the
    handle's current native id is the context's ``current_id``)."""

    def __init__(self, ctx: RunnerContext) -> None:
        self.ctx = ctx
        # what this process submitted, sent again when a preempted job is
        self._requests: dict[AppHandle, PreparedRun] = {}
        self._told: dict[AppHandle, str] = {}  # an ended job's preemptions, in words
        # what a backend last listed of a job's preemptions, and what the store made of it
        self._seen: dict[AppHandle, tuple[object, tuple[int, int, Preemption | None]]] = {}
        self._stopped: set[AppHandle] = set()  # jobs stopped past their preemption limit
        self._restores = Restores()  # each job's checkpoint ledger: what each attempt restored

    def keep_request(self, handle: AppHandle, prepared: PreparedRun) -> None:
        """What a resubmission of ``handle`` by this process sends again, and the job's
        preemption limit (its ``max_preemptions`` option) for every watcher."""
        self._requests[handle] = prepared
        opts = prepared.opts
        if isinstance(opts, PreemptionOpts) and opts.max_preemptions is not None:
            with contextlib.suppress(Exception):
                self.ctx.jobstore.set_max_preemptions(handle, int(opts.max_preemptions))

    def seen(
        self, app_handle: AppHandle, app_id: str, desc: DescribeAppResponse, status: AppStatus
    ) -> AppStatus:
        """``status`` as the job's attempts make it: the preemptions ``desc`` lists kept (once);
        past the job's limit, FAILED with the limit's line (a native job still running is
        cancelled); a native job that ended with its preemption submitted again (the status
        is then the new attempt's, never the native job's end)."""
        if not desc.preemptions and not desc.ended_preempted:
            return self._ended_story(app_handle, status)
        # a backend lists a job's preemptions at every describe: the store is written (and
        # read) only when what it lists changed
        key = (app_id, tuple((p.at, p.resumed_at) for p in desc.preemptions))
        seen = self._seen.get(app_handle)
        if seen is not None and seen[0] == key and not desc.ended_preempted:
            total, limit, last = seen[1]
        else:
            try:
                store = self.ctx.jobstore
                total = store.record_preemptions(
                    app_handle, app_id, desc.preemptions, ended=desc.ended_preempted
                )
                rec = store.get(app_handle)
                log = store.attempt_log(app_handle)
            except Exception as e:  # the store is a convenience: the backend's status stands
                warnings.warn(f"could not keep the preemptions of {app_handle}: {e}", stacklevel=3)
                return status
            limit = DEFAULT_MAX_PREEMPTIONS
            if rec is not None and rec.max_preemptions is not None:
                limit = rec.max_preemptions
            last = log.events[-1] if log.events else None
            self._seen[app_handle] = (key, (total, limit, last))
        if total > limit:
            if app_handle not in self._stopped:  # once: no next attempt, it ends here
                self._stopped.add(app_handle)
                with contextlib.suppress(Exception):
                    store = self.ctx.jobstore
                    store.record_preemptions(app_handle, app_id, desc.preemptions, ended=True)
                    store.end_current(app_handle, "cancelled", "stopped at its preemption limit")
                if not is_terminal(status.state):
                    with contextlib.suppress(Exception):
                        self.ctx.scheduler_and_id(app_handle)[0]._cancel_existing(app_id)
            return replace(status, state=AppState.FAILED, msg=limit_line(total, limit, last))
        if desc.ended_preempted:
            return self._submit_again(app_handle, app_id, self.attempt_log(app_handle), status)
        if last is not None and not is_terminal(status.state) and not message_text(status.msg):
            if last.resumed_at is not None:  # where it resumed from: the job's ledger says
                with contextlib.suppress(Exception):
                    last = self.attempt_log(app_handle).events[-1]
            return replace(status, msg=last.text())
        return self._ended_story(app_handle, status)

    def _ended_story(self, app_handle: AppHandle, status: AppStatus) -> AppStatus:
        """An ended job that was preempted says so in its message (the card, the widget, the
        CLI, the notice read it): each preemption, when it resumed and from which checkpoint."""
        if not is_terminal(status.state) or message_text(status.msg):
            return status
        told = self._told.get(app_handle)
        if told is None:
            told = ""
            with contextlib.suppress(Exception):
                rec = self.ctx.jobstore.get(app_handle)
                if rec is not None and (rec.attempt > 1 or rec.preemptions):
                    told = "; ".join(self.attempt_log(app_handle, fresh=True).story())
            self._told[app_handle] = told
        return replace(status, msg=told) if told else status

    def _submit_again(
        self, app_handle: AppHandle, app_id: str, log: AttemptLog, status: AppStatus
    ) -> AppStatus:
        """The next attempt of a job whose native job ended with its preemption: submitted by
        one watcher only (the store's claim); the others see it pending meanwhile."""
        # the attempts sent (a claim, not sent yet, has no native id): a claim left by a
        # watcher that vanished midway is taken over once stale (``claim_attempt``)
        sent = [a for a in log.attempts if a.app_id]
        last = sent[-1] if sent else None
        said = log.events[-1].text() if log.events else "preempted"
        if last is None or last.app_id != app_id or last.ended_why != "preempted":
            return replace(status, state=AppState.PENDING, msg=f"{said}; submitted again")
        n = last.n + 1
        store = self.ctx.jobstore
        rec = store.get(app_handle)
        if rec is not None and rec.is_terminal:  # cancelled meanwhile: no next attempt
            return replace(status, state=AppState[rec.state], msg=rec.msg)
        if not store.claim_attempt(app_handle, n):
            return replace(
                status, state=AppState.PENDING, msg=f"{said}; being submitted again as attempt {n}"
            )
        sched, backend, _ = self.ctx.scheduler_and_id(app_handle)
        prepared = self._requests.get(app_handle)
        try:
            if isinstance(sched, SubmitsAgain):
                new_id = sched.submit_again(app_id)
            elif prepared is not None:
                new_id = sched.schedule(prepared.info)
            else:  # the process that submitted it does; this one must not end the job
                store.drop_claim(app_handle, n)
                return replace(
                    status,
                    state=AppState.PENDING,
                    msg=f"{said}; the kernel or command that submitted it submits it again"
                    f" ({backend} keeps nothing to submit it from): run it again if that is gone",
                )
        except Exception as e:
            store.drop_claim(app_handle, n)
            return replace(
                status, state=AppState.FAILED, msg=f"{said}; submitting it again failed: {e}"
            )
        msg = f"{said}; submitted again as attempt {n}"
        outputs = None  # the new native job's outputs: a cell's result is the last attempt's
        with contextlib.suppress(Exception):
            if isinstance(sched, SubmitsAgain):  # kept as the first's were (SubmitsAgain)
                if rec is not None and rec.outputs and app_id in rec.outputs:
                    outputs = rec.outputs.replace(app_id, new_id)
            elif isinstance(sched, StoresOutputs) and prepared is not None:
                outputs = sched.output_url(new_id, prepared.request)
        if not store.start_attempt(app_handle, n, new_id, msg, outputs):
            with contextlib.suppress(Exception):  # cancelled while it was being sent
                sched._cancel_existing(new_id)
            ended = store.get(app_handle)
            return replace(
                status,
                state=AppState[ended.state] if ended else AppState.CANCELLED,
                msg=ended.msg if ended else "",
            )
        self.ctx.last_state[app_handle] = AppState.SUBMITTED.name
        return AppStatus(AppState.SUBMITTED, msg=msg, roles=[])

    def attempt_log(self, app_handle: AppHandle, fresh: bool = False) -> AttemptLog:
        """Every attempt of the job and the story they tell (from the job store), each
        preemption's next attempt resumed from what the job's checkpoint ledger says it
        restored (read lazily: ``checkpoints``; an ended job's ledger read whole)."""
        store = self.ctx.jobstore
        attempts = store.attempts(app_handle)
        log = AttemptLog.of(attempts)
        if any(e.resumed_at is not None for e in log.events):
            rec = store.get(app_handle)
            outputs, ended = (rec.outputs, rec.is_terminal) if rec else (None, False)
            found = self._restores.of(app_handle, outputs, log, fresh=fresh or ended)
            if found:
                return AttemptLog.of(attempts, found)
        return log

    def attempt_lines(self, app_handle: AppHandle) -> list[str]:
        """``Attempts: 2 (1 preemption, 0 failures)`` and one line per preemption, as status
        shows them; none for a job that ran once."""
        try:
            log = self.attempt_log(app_handle)
        except Exception:
            return []
        if len(log.attempts) < 2 and not log.preemptions:
            return []
        counts = f"{log.preemptions} preemption{'s' * (log.preemptions != 1)}"
        counts += f", {log.failures} failure{'s' * (log.failures != 1)}"
        return [f"Attempts: {log.attempt} ({counts})", *(f"  {line}" for line in log.story())]

    def preempt(self, app_handle: AppHandle, grace: float | None = None) -> str | None:
        """Preempt the running job the way its backend would (SIGTERM, ``grace`` seconds —
        the backend's own by default — the kill, then its own retry), so a program's resume
        logic can be tried before paying for spot. ``NotPreemptible`` (one line) on a backend
        that cannot, or for a job that is not running. Returns one line when the ``grace``
        asked is not honoured (Slurm's KillWait applies), None otherwise."""
        sched, backend, app_id = self.ctx.scheduler_and_id(app_handle)
        if not isinstance(sched, Preemptible):
            raise NotPreemptible(
                f"{backend} cannot preempt a job on request: run it on spot capacity"
                " (-cfg spot=True) and its preemptions are told as they come"
            )
        desc = sched.describe(app_id)
        if desc is None:
            raise UnknownAppException(app_handle)
        if desc.state != AppState.RUNNING:
            raise NotPreemptible(
                f"{app_handle} is {desc.state.name}, not running: only a running job can be"
                " preempted"
            )
        if grace is not None and not 0 <= grace <= 3600:
            raise NotPreemptible(f"grace must be 0 to 3600 seconds, not {grace:g}")
        sched.preempt(app_id, sched.preempt_grace if grace is None else grace)
        if grace is not None and sched.grace_ignored:
            return f"the grace of {grace:g} s is ignored on {backend}: {sched.grace_ignored}"
        return None
