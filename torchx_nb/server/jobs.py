"""What the REST API serves, independent of the web framework: pages of the job store, one
job's description, its log lines, cancel, and the change feed of the event stream.

Nothing here runs on the server's event loop: every call that touches the job store or a
scheduler runs in the service's own small thread pool (``JobService.run``), so a slow
scheduler, a huge store or a hostile request cannot hold up Jupyter's other requests. Queries
are bounded and indexed; user regexes run on RE2 (linear time); tails are read from the end.

The change feed of the event stream is ``feed.ChangeFeed`` (``JobService.feed``); submitting a
notebook goes through ``notebook_request``, ``check`` and ``submit`` (the one submit path).
Errors go through as they are: ``handlers.Base.write_error`` answers them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from torchx_nb.errors import one_line
from torchx_nb.phases import phases_line, run_times
from torchx_nb.redact import redact, redact_lines, redact_text
from torchx_nb.server.feed import CHANGES_KEPT as CHANGES_KEPT
from torchx_nb.server.feed import LEASE_S as LEASE_S
from torchx_nb.server.feed import ChangeFeed
from torchx_nb.server.pages import (
    BadCursor,
    matches,
    notebook_path,
    page_cursor,
    parse_cursor,
    trial_params,
)
from torchx_nb.server.submit import BadSubmission, NotebookSubmission
from torchx_nb.specs.api import AppState, message_text
from torchx_nb.specs.exceptions import BadEventId as BadEventId
from torchx_nb.specs.exceptions import JobEnded as JobEnded

JOBS_PAGE_MAX = 500
LOG_LINES_MAX = 5000
HEARTBEAT_S = 15.0

T = TypeVar("T")

if TYPE_CHECKING:
    from torchx_nb.runner import RunRequest


class JobService:
    """The job store and a Runner, shared by every request of one server."""

    def __init__(
        self,
        local_interval: float = 1.0,
        remote_interval: float = 5.0,
        root_dir: str | None = None,
        workers: int = 4,
        heartbeat: float = HEARTBEAT_S,
    ) -> None:
        self.root_dir = root_dir
        self.heartbeat = heartbeat
        self.local_interval = local_interval
        self.remote_interval = remote_interval
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="torchx-nb-api")
        self._runner: Any = None
        self._lock = threading.Lock()
        self.feed = ChangeFeed(self)

    @property
    def runner(self) -> Any:
        with self._lock:
            if self._runner is None:
                from torchx_nb.runner import get_runner

                self._runner = get_runner()
            return self._runner

    def warm_up(self) -> None:
        """Open the job store and load the runner in the pool while the server starts, so the
        panel's first request does not pay for it (nothing waits on it: a failure here is met
        again, and reported, by the first request)."""

        def warm() -> None:
            with contextlib.suppress(Exception):
                self.runner.jobstore.counts()

        self._executor.submit(warm)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the service's thread pool, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def refresher(self) -> Any:
        """The process's refresher, on the service's clocks."""
        from torchx_nb.refresher import get_refresher

        return get_refresher(
            local_interval=self.local_interval,
            remote_interval=self.remote_interval,
        )

    def close(self) -> None:
        """Stop the feed (the process's refresher goes on for whoever else watches) and the
        pool, and close the Runner."""
        self.feed.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._runner is not None:
            self._runner.close()

    # -- pages, one job, logs, cancel

    def page(
        self,
        scheduler: str | None,
        state: str | None,
        notebook: str | None,
        text: str | None,
        page: int,
        per_page: int,
        after: str | None = None,
    ) -> dict[str, Any]:
        """Newest first, filtered, one page; ``total`` counts every match. ``after`` (a page's
        ``next``) continues after its last row, so a walk never repeats or skips a row while
        jobs are submitted."""
        self.feed.start()
        # the position before the read: a change the poller logs while the store is read
        # (this runs beside the event loop) is then sent again rather than never
        version = self.feed.version
        store = self.runner.jobstore
        notebooks = self._notebook_spellings(notebook) if notebook else None
        records, total = store.page(
            scheduler=scheduler or None,
            state=(state or "").upper() or None,
            notebooks=notebooks,
            text=text or None,
            offset=(page - 1) * per_page,
            limit=per_page,
            after=parse_cursor(after) if after else None,
        )
        last = records[-1] if len(records) == per_page else None
        return {
            "jobs": [self.row(r) for r in records],
            "total": total,
            "page": page,
            "per_page": per_page,
            "next": page_cursor(last.submitted, last.handle) if last else None,
            "counts": store.counts(),
            "event_id": self.feed.event_id(version),
        }

    def _notebook_spellings(self, notebook: str) -> list[str]:
        """A notebook as the store may hold it: as given, and under the server's root."""
        out = [notebook]
        if self.root_dir and not os.path.isabs(notebook):
            for root in (os.path.expanduser(self.root_dir), str(Path(self.root_dir).resolve())):
                out.append(os.path.join(root, notebook))
        return list(dict.fromkeys(out))

    def row(self, rec: Any) -> dict[str, Any]:
        """A job store record as the API shows it."""
        now = time.time()
        # an UNKNOWN job's clock stops when it became unknown (its last change)
        stopped = rec.is_terminal or rec.state == "UNKNOWN"
        end = rec.ended if rec.ended else (rec.updated if stopped else now)
        queued, ran = run_times(self.runner.jobstore, rec, now)
        return {
            "handle": rec.handle,
            "scheduler": rec.scheduler,
            "name": rec.name,
            "state": rec.state,
            "submitted": rec.submitted,
            "ended": rec.ended,
            "duration": max(0.0, end - rec.submitted),
            "started": rec.started,
            "queued": queued,
            "ran": ran,
            "build_seconds": rec.build_seconds,
            "notebook": rec.notebook,
            "notebook_path": notebook_path(rec.notebook, self.root_dir),
            "image": rec.image,
            "msg": redact_text(rec.msg or ""),
            "sweep": rec.sweep,
            "trial": rec.trial,
            "params": trial_params(rec.params),
            "attempt": rec.attempt,
            "preemptions": rec.preemptions,
        }

    def counts(self) -> dict[str, int]:
        """How many jobs are in each state: the status bar's running count."""
        return dict(self.runner.jobstore.counts())

    def detail(self, handle: str) -> dict[str, Any] | None:
        """The record with the scheduler's description: roles, replicas, states, messages."""
        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        out = self.row(rec)
        try:
            status = self.runner.status(handle)
        except Exception as e:
            out["error"] = one_line(e)[:300]
            status = None
        if status is not None:
            out["state"] = status.state.name
            out["msg"] = message_text(status.msg)
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
                            "msg": message_text(rep.structured_error_msg),
                        }
                        for rep in r.replicas
                    ],
                }
                for r in status.roles
            ]
            out["failures"] = [c.to_json() for c in self.runner.failure_cards(handle, status)]
            log = self.runner.attempt_log(handle) if rec.preemptions else None
            out["preempted"] = [p.to_json() for p in log.events] if log else []
            if log:  # the run split by its attempts: ran · held · resumed
                out["phases"] = phases_line(rec, attempts=log.attempts)
        else:
            out.setdefault("roles", [])
        out.setdefault("failures", [])
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
        """The last ``tail`` lines, or lines ``start``..``end`` (at most LOG_LINES_MAX), of one
        replica's log, masked, as text: the page must never read them as HTML."""
        from torchx_nb.specs.log_line import Stream

        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        if role is None:
            roles = (self.detail(handle) or {}).get("roles") or []
            role = roles[0]["role"] if roles else rec.name
        streams = None if stream == "combined" else Stream(stream)
        if tail or not (start or end):
            found = self.runner.log_tail(
                handle, role, replica, tail or LOG_LINES_MAX, regex, streams
            )
        else:
            found = self.runner.log_window(
                handle, role, replica, start, end or None, regex, streams, keep=LOG_LINES_MAX
            )
        lines = [line.rstrip("\n") for line in redact_lines(found)]
        return {"handle": handle, "role": role, "replica": replica, "lines": lines}

    def result(self, handle: str) -> dict[str, Any] | None:
        """The short repr the job wrote of its cell's value (or ``raised TYPE: message``),
        masked; nothing is unpickled on the server. None for a job not in the store."""
        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        text = self.runner.result_repr(handle)
        return {
            "handle": handle,
            "result": None if text is None else redact_text(text),
            "location": rec.outputs,
        }

    def outputs(self, handle: str) -> dict[str, Any] | None:
        """The files the job wrote to ``$TORCHX_OUTPUT_DIR`` (path, size); none for a job that
        keeps no outputs. None for a job not in the store."""
        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        files = self.runner.outputs(handle) if rec.outputs else []
        return {
            "handle": handle,
            "location": rec.outputs,
            "files": [{"path": f.path, "size": f.size} for f in files],
        }

    def open_output(self, handle: str, path: str) -> tuple[Any, int] | None:
        """One output file as a stream of bytes and its size (None: no such job or file)."""
        rec = self.runner.jobstore.get(handle)
        if rec is None or not rec.outputs:
            return None
        sizes = {f.path: f.size for f in self.runner.outputs(handle)}
        if path not in sizes:
            return None
        return self.runner.output_store(handle).open(path), sizes[path]

    def schedulers(self) -> dict[str, Any]:
        """The schedulers this server can submit to, and the one used when none is named."""
        runner = self.runner
        return {"schedulers": runner.scheduler_backends(), "default": runner.default_scheduler()}

    def notebook_request(self, sub: NotebookSubmission) -> RunRequest:
        """The run a submission asks for, on the one submit path (``check`` then ``submit``
        it); ``BadSubmission`` for a scheduler this server does not have."""
        from torchx_nb.runner import RunRequest

        runner = self.runner
        scheduler = sub.scheduler or runner.default_scheduler()
        known = runner.scheduler_backends()
        if scheduler not in known:
            raise BadSubmission(f"scheduler {scheduler!r} is not one of {', '.join(known)}")
        return RunRequest(
            run_notebook=sub.notebook,
            parameters=sub.parameters,
            cell_timeout=sub.cell_timeout,
            scheduler=scheduler,
            scheduler_defaults={scheduler: sub.cfg},
            cfg=(sub.typed_cfg,) if sub.typed_cfg else (),
            image=sub.image,
            resource=sub.resource,
            name=sub.name,
        )

    def check_cfg(self, request: RunRequest) -> RunRequest:
        """Read the submission's ``typed_cfg`` as the CLI's ``-cfg`` (the run reads it once
        more): what it raises is a refusal of that field. The request, unchanged."""
        for literal in request.cfg:
            self.runner.cfg_from_str(request.scheduler, literal)
        return request

    def check(self, request: RunRequest) -> RunRequest:
        """The run's dry run, before anything is built: what it raises is the request's
        fault or an outage (``exceptions.refuses`` tells which, in the handler's answer).
        The request, unchanged."""
        self.runner.prepare(request)
        return request

    def submit(self, request: RunRequest) -> dict[str, Any]:
        """Build, submit and record the checked run; the job's row."""
        runner = self.runner
        handle = runner.submit(runner.prepare(request, build=True))
        rec = runner.jobstore.get(handle)
        return redact(self.row(rec)) if rec is not None else {"handle": handle}

    def fetch_notebook(self, handle: str) -> dict[str, Any] | None:
        """A notebook job's executed notebook, fetched beside the notebook it ran (else at the
        server's root) under a name that overwrites nothing; its path under the root."""
        rec = self.runner.jobstore.get(handle)
        if rec is None:
            return None
        if not self.root_dir:
            raise BadSubmission("this server has no root folder to put the notebook in")
        root = Path(self.root_dir).expanduser().resolve()
        beside = notebook_path(rec.notebook, self.root_dir)
        folder = (root / beside).parent if beside else root
        path = self.runner.executed_notebook(handle, folder)
        return {"handle": handle, "path": path.relative_to(root).as_posix()}

    def cancel(self, handle: str) -> bool:
        """Ask the job's scheduler to stop it. False: no such job in the store. A job that has
        already ended is ``JobEnded``; one its scheduler no longer knows is
        ``UnknownAppException``; a scheduler that cannot be reached or used raises its own
        error (``Base.write_error`` answers each by the table)."""
        if self.runner.jobstore.get(handle) is None:
            return False
        status = self.runner.cancel(handle)
        if status.state in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED):
            raise JobEnded(handle, status.state.name)
        return True


__all__ = [
    "JOBS_PAGE_MAX",
    "BadCursor",
    "BadEventId",
    "JobEnded",
    "JobService",
    "matches",
    "page_cursor",
    "parse_cursor",
]
