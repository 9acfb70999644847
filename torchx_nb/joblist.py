"""Rows of the job list shared by ``torchx-nb list``, ``%torchx list`` and the REST API: the job
store's records, refreshed from their schedulers, merged with what a scheduler lists itself."""

from __future__ import annotations

import time
from typing import Any

from torchx_nb.runner import Runner
from torchx_nb.specs.api import is_terminal


def job_rows(
    runner: Runner,
    scheduler: str | None = None,
    limit: int | None = 50,
    refresh: bool = True,
) -> list[dict[str, Any]]:
    """Newest first: handle, scheduler, name, state, submitted, duration (seconds), msg.

    Records not yet terminal are refreshed with ``status`` (and the store updated); with a
    ``scheduler``, jobs it lists that the store lacks (run from elsewhere) are added."""
    records = runner.jobstore.list(scheduler=scheduler, limit=limit)
    now = time.time()
    rows: dict[str, dict[str, Any]] = {}
    for rec in records:
        state, ended, msg = rec.state, rec.ended, rec.msg
        if refresh and not rec.is_terminal:
            try:
                status = runner.status(rec.handle)
            except Exception as e:
                msg = f"status unavailable: {e}"
            else:
                if status is None:
                    state = "UNKNOWN"
                else:
                    state = status.state.name
                    if is_terminal(status.state):
                        fresh = runner.jobstore.get(rec.handle)
                        ended = fresh.ended if fresh else now
        end = ended if ended else now
        rows[rec.handle] = {
            "handle": rec.handle,
            "scheduler": rec.scheduler,
            "name": rec.name,
            "state": state,
            "submitted": rec.submitted,
            "duration": max(0.0, end - rec.submitted),
            "msg": msg,
            "notebook": rec.notebook,
        }
    if scheduler:
        for app in runner.list(scheduler):
            if app.app_handle not in rows:
                rows[app.app_handle] = {
                    "handle": app.app_handle,
                    "scheduler": scheduler,
                    "name": app.name or app.app_id,
                    "state": app.state.name,
                    "submitted": None,
                    "duration": None,
                    "msg": "",
                    "notebook": None,
                }
    ordered = sorted(rows.values(), key=lambda r: -(r["submitted"] or 0))
    return ordered[:limit] if limit else ordered
