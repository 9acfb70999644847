"""Rows of the job list shared by ``torchx-nb list``, ``%torchx list`` and the REST API: the job
store's records, refreshed from their schedulers, merged with what a scheduler lists itself."""

from __future__ import annotations

import time
from typing import Any

from torchx_nb.phases import run_times
from torchx_nb.runner import Runner
from torchx_nb.specs.api import AppStatus


def job_rows(
    runner: Runner,
    scheduler: str | None = None,
    limit: int | None = 50,
    refresh: bool = True,
) -> list[dict[str, Any]]:
    """Newest first: handle, scheduler, name, state, submitted, duration, queued and ran
    (seconds: the duration split at the job's start), msg.
    Jobs only the scheduler knows take their times from its describe (start → end).

    Records not yet terminal are refreshed with the one refresher (``Runner.refresh``), which
    records what it learns (state, the scheduler's start and end, the job-end notice) through
    the same code as ``status`` and the pollers; with a ``scheduler``, a record whose listed
    state is the stored one is not asked again, and jobs it lists that the store lacks (run
    from elsewhere) are added."""
    records = runner.jobstore.list(scheduler=scheduler, limit=limit)
    now = time.time()
    listed = {app.app_handle: app for app in runner.list(scheduler)} if scheduler else {}
    stale = [
        r
        for r in records
        if not r.is_terminal and (r.handle not in listed or listed[r.handle].state.name != r.state)
    ]
    fresh = runner.refresh(r.handle for r in stale) if refresh else {}
    rows: dict[str, dict[str, Any]] = {}
    for rec in records:
        state, msg, stored = rec.state, rec.msg, rec
        if rec.handle in fresh:
            status = fresh[rec.handle]
            if isinstance(status, Exception):
                msg = f"status unavailable: {status}"
            else:
                state = "UNKNOWN" if status is None else status.state.name
                stored = runner.jobstore.get(rec.handle) or rec
        elif rec.handle in listed and not rec.is_terminal:
            state = listed[rec.handle].state.name
        end = stored.ended or now
        queued, ran = run_times(runner.jobstore, stored, now)
        rows[rec.handle] = {
            "handle": rec.handle,
            "scheduler": rec.scheduler,
            "name": rec.name,
            "state": state,
            "submitted": rec.submitted,
            "duration": max(0.0, end - rec.submitted),
            "queued": queued,
            "ran": ran,
            "msg": msg,
            "notebook": rec.notebook,
        }
    only_listed = [app for app in listed.values() if app.app_handle not in rows]
    times = runner.refresh(a.app_handle for a in only_listed) if refresh else {}
    for app in only_listed:
        status = times.get(app.app_handle)
        started = status.started if isinstance(status, AppStatus) else None
        ended = status.ended if isinstance(status, AppStatus) else None
        rows[app.app_handle] = {
            "handle": app.app_handle,
            "scheduler": scheduler,
            "name": app.name or app.app_id,
            "state": app.state.name,
            "submitted": started,
            "duration": max(0.0, (ended or now) - started) if started else None,
            "queued": None,
            "ran": max(0.0, (ended or now) - started) if started else None,
            "msg": "",
            "notebook": None,
        }
    ordered = sorted(rows.values(), key=lambda r: -(r["submitted"] or 0))
    return ordered[:limit] if limit else ordered
