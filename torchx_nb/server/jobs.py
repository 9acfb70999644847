"""What the REST API serves, independent of the web framework: pages of the job store, one
job's description, its log lines, cancel, and the change feed of the event stream.

One poller per server keeps the store's states fresh: every second it refreshes the jobs that
are not finished (local ones every time, remote ones every ``remote_interval``), one
``describe_many`` per scheduler, and wakes the event streams when a row changed."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from torchx_nb.redact import redact, redact_text
from torchx_nb.specs.api import AppState, is_terminal, message_text, parse_app_handle

JOBS_PAGE_MAX = 500
LOG_LINES_MAX = 5000


def notebook_path(notebook: str | None, root_dir: str | None) -> str | None:
    """The submitting notebook as a path under the server's root (what the page opens), or None
    when it lies outside it or is not a notebook file."""
    if not notebook or not root_dir or not notebook.endswith(".ipynb"):
        return None
    path = Path(os.path.expanduser(notebook))
    root = Path(os.path.expanduser(root_dir)).resolve()
    if not path.is_absolute():
        path = root / path
    try:
        return path.resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return None


def one_line(error: BaseException) -> str:
    """An error as one redacted line, fit for an HTTP reason or a page."""
    return redact_text(" ".join(str(error).split()))[:300]


class JobService:
    """The job store and a Runner, shared by every request of one server."""

    def __init__(
        self,
        local_interval: float = 1.0,
        remote_interval: float = 5.0,
        root_dir: str | None = None,
    ) -> None:
        self.root_dir = root_dir
        self.epoch = secrets.token_hex(4)
        self.local_interval = local_interval
        self.remote_interval = remote_interval
        self._runner: Any = None
        self._lock = threading.Lock()
        self._version = 0
        self._seen: dict[str, tuple[str, str]] = {}
        self._changed: dict[str, int] = {}
        self._wakeup: asyncio.Event | None = None
        self._poller: asyncio.Task[None] | None = None
        self._last_remote = 0.0

    @property
    def runner(self) -> Any:
        with self._lock:
            if self._runner is None:
                from torchx_nb.runner import get_runner

                self._runner = get_runner()
            return self._runner

    def page(
        self,
        scheduler: str | None,
        state: str | None,
        notebook: str | None,
        text: str | None,
        page: int,
        per_page: int,
    ) -> dict[str, Any]:
        """Newest first, filtered, one page; ``total`` counts every match."""
        records = self.runner.jobstore.list(scheduler=scheduler or None)
        wanted_state = (state or "").upper()
        needle = (text or "").lower()
        rows = []
        for rec in records:
            if wanted_state and rec.state != wanted_state:
                continue
            if notebook and notebook not in (
                rec.notebook or "",
                notebook_path(rec.notebook, self.root_dir),
            ):
                continue
            if needle and needle not in f"{rec.handle} {rec.name} {rec.notebook or ''}".lower():
                continue
            rows.append(rec)
        start = (page - 1) * per_page
        return {
            "jobs": [self.row(r) for r in rows[start : start + per_page]],
            "total": len(rows),
            "page": page,
            "per_page": per_page,
            "counts": self.counts(records),
            "event_id": self.event_id(self._version),
        }

    def row(self, rec: Any) -> dict[str, Any]:
        """A job store record as the API shows it."""
        end = rec.ended if rec.ended else (rec.updated if rec.is_terminal else time.time())
        return {
            "handle": rec.handle,
            "scheduler": rec.scheduler,
            "name": rec.name,
            "state": rec.state,
            "submitted": rec.submitted,
            "ended": rec.ended,
            "duration": max(0.0, end - rec.submitted),
            "notebook": rec.notebook,
            "notebook_path": notebook_path(rec.notebook, self.root_dir),
            "image": rec.image,
            "msg": redact_text(rec.msg or ""),
        }

    def event_id(self, version: int) -> str:
        """An event stream position: this server's epoch and a version, so a client resuming
        with ``Last-Event-ID`` from another server (or before a restart) gets everything."""
        return f"{self.epoch}.{version}"

    def resume_from(self, event_id: str | None) -> int:
        """The version to resume after, or -1 (send every job) for an unknown id."""
        epoch, _, number = (event_id or "").partition(".")
        if epoch != self.epoch or not number.isdigit() or int(number) > self._version:
            return -1
        return int(number)

    def counts(self, records: list[Any] | None = None) -> dict[str, int]:
        """How many jobs (all of the store's, or ``records``) are in each state: the status
        bar's running count."""
        if records is None:
            records = self.runner.jobstore.list()
        return dict(Counter(r.state for r in records))

    def detail(self, handle: str) -> dict[str, Any] | None:
        """The record with the scheduler's description: roles, replicas, states, messages."""
        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        out = self.row(rec)
        try:
            status = self.runner.status(handle)
        except Exception as e:
            out["error"] = one_line(e)
            status = None
        if status is not None:
            out["state"] = status.state.name
            out["msg"] = redact_text(message_text(status.msg))
            out["ui_url"] = status.ui_url
            out["roles"] = [
                {
                    "role": r.role,
                    "replicas": [
                        {
                            "id": rep.id,
                            "state": rep.state.name,
                            "hostname": rep.hostname,
                            "exit_code": rep.exit_code,
                            "msg": redact_text(message_text(rep.structured_error_msg)),
                        }
                        for rep in r.replicas
                    ],
                }
                for r in status.roles
            ]
        else:
            out.setdefault("roles", [])
        return redact(out)

    def logs(
        self,
        handle: str,
        role: str | None,
        replica: int,
        stream: str,
        regex: str | None,
        tail: int,
        start: int,
        end: int,
    ) -> dict[str, Any] | None:
        """Lines ``start``..``end`` (or the last ``tail``) of one replica's log, as text: the
        page must never read them as HTML."""
        from torchx_nb.schedulers.api import Stream

        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        if role is None:
            roles = (self.detail(handle) or {}).get("roles") or []
            role = roles[0]["role"] if roles else rec.name
        lines: list[str] = []
        streams = None if stream == "combined" else Stream(stream)
        pattern = re.compile(regex) if regex else None
        for i, line in enumerate(self.runner.log_lines(handle, role, replica, streams=streams)):
            if pattern and not pattern.search(line):
                continue
            if end and i >= end:
                break
            if i < start:
                continue
            lines.append(line.rstrip("\n"))
            if len(lines) > (tail or LOG_LINES_MAX):
                del lines[0]
        return {"handle": handle, "role": role, "replica": replica, "lines": lines}

    def cancel(self, handle: str) -> bool:
        if self.runner.jobstore.get(handle) is None:
            return False
        self.runner.cancel(handle)
        return True

    # -- the change feed

    def _snapshot(self) -> list[dict[str, Any]]:
        """Refresh what is due, then return rows whose state or message changed."""
        records = self.runner.jobstore.list()
        now = time.monotonic()
        due_remote = now - self._last_remote >= self.remote_interval
        if due_remote:
            self._last_remote = now
        groups: dict[str, list[str]] = {}
        for rec in records:
            if rec.is_terminal:
                continue
            sched = parse_app_handle(rec.handle).scheduler_backend
            local = sched.startswith("local")
            if local or due_remote:
                groups.setdefault(sched, []).append(rec.handle)
        for handles in groups.values():
            try:
                statuses = self.runner.status_many(handles)
            except Exception:
                continue
            for handle, status in statuses.items():
                if status is None:
                    self.runner.jobstore.update_state(handle, AppState.UNKNOWN.name)
        changed = []
        for rec in self.runner.jobstore.list():
            key = (rec.state, rec.msg or "")
            if self._seen.get(rec.handle) != key:
                self._seen[rec.handle] = key
                changed.append(self.row(rec))
        return changed

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                changed = await loop.run_in_executor(None, self._snapshot)
            except Exception:
                changed = []
            if changed:
                self._version += 1
                for r in changed:
                    self._changed[r["handle"]] = self._version
                if self._wakeup is not None:
                    self._wakeup.set()
                    self._wakeup = asyncio.Event()
            await asyncio.sleep(self.local_interval)

    async def changes(self, since: int) -> tuple[int, list[dict[str, Any]]]:
        """Rows changed after version ``since`` (every row for -1); waits up to 15 s for one
        (a heartbeat keeps proxies from closing the stream)."""
        if self._poller is None or self._poller.done():
            self._wakeup = asyncio.Event()
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        if since < 0:
            rows = await asyncio.get_running_loop().run_in_executor(
                None, lambda: [self.row(r) for r in self.runner.jobstore.list()]
            )
            return self._version, rows
        if self._version <= since and self._wakeup is not None:
            try:
                await asyncio.wait_for(self._wakeup.wait(), 15)
            except asyncio.TimeoutError:
                return self._version, []
        handles = [h for h, v in self._changed.items() if v > since]
        rows = []
        for h in handles:
            rec = self.runner.jobstore.get(h)
            if rec is not None:
                rows.append(self.row(rec))
        return self._version, rows


__all__ = ["JOBS_PAGE_MAX", "JobService", "is_terminal"]
