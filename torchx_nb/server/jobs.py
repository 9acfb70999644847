"""What the REST API serves, independent of the web framework: pages of the job store, one
job's description, its log lines, cancel, and the change feed of the event stream.

Nothing here runs on the server's event loop: every call that touches the job store or a
scheduler runs in the service's own small thread pool (``JobService.run``), so a slow
scheduler, a huge store or a hostile request cannot hold up Jupyter's other requests. Queries
are bounded and indexed; user regexes run on RE2 (linear time); tails are read from the end.

While an event-stream client is connected, or for ``LEASE_S`` after a jobs page was asked
for, the feed (work on the refresher's own thread, ``Refresher.every``: the server runs no
loop of its own) hands the jobs not yet ended (any process's) to the process's one refresher
(``torchx_nb.refresher``: local ones asked every ``local_interval``, remote ones every
``remote_interval``, one batched call per scheduler, errors backing off), which writes what it
learns to the store, and reads what changed in the store since its last look (the store's own
change counter, indexed: never wall-clock times, which machines disagree about), so its cost
follows the active jobs, not the store's size. Then it stops and lets go of its watches: an
idle server costs nothing."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from torchx_nb.errors import one_line
from torchx_nb.phases import queue_and_run
from torchx_nb.redact import redact, redact_lines, redact_text
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
from torchx_nb.specs.exceptions import BadParameter, refuses
from torchx_nb.specs.exceptions import JobEnded as JobEnded

JOBS_PAGE_MAX = 500
LOG_LINES_MAX = 5000
HEARTBEAT_S = 15.0
CHANGES_KEPT = 20_000
LEASE_S = 30.0
_EVENT_ID = re.compile(r"([0-9a-f]{8})\.([0-9]{1,18})")

T = TypeVar("T")


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
        self.epoch = secrets.token_hex(4)
        self.local_interval = local_interval
        self.remote_interval = remote_interval
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="torchx-nb-api")
        self._runner: Any = None
        self._lock = threading.Lock()
        self._version = 0
        self._floor = 0
        self._log: list[tuple[int, dict[str, Any]]] = []
        self._seen: dict[str, tuple[str, str]] = {}
        self._rev: int | None = None
        self._store_id: int | None = None
        self._rev_lock = threading.Lock()
        self._wakeup: asyncio.Event | None = None
        self._poller: int | None = None  # the feed's clock on the refresher, while it runs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._feed_lock = threading.Lock()
        self._clients = 0
        self._lease_until = 0.0
        self._watched: dict[str, int] = {}
        self._store_swapped = False
        self.polls = 0

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
        with self._feed_lock:
            if self._poller is not None and self._runner is not None:
                self.refresher.stop_clock(self._poller)
            self._poller = None
        self._let_go()
        if self._runner is not None:
            self.refresher.stop()
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
        self._start_rev()
        # the position before the read: a change the poller logs while the store is read
        # (this runs beside the event loop) is then sent again rather than never
        version = self._version
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
            "event_id": self.event_id(version),
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
        queued, ran = queue_and_run(rec, now)
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
            events = self.runner.attempt_log(handle).events if rec.preemptions else ()
            out["preempted"] = [p.to_json() for p in events]
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

    def submit_notebook(self, sub: NotebookSubmission) -> dict[str, Any]:
        """Run a notebook as a job through the one submit path: first checked as a dry run
        (a refusal is ``BadSubmission``, nothing built; a backend, registry or daemon the
        check needed that does not answer is the table's 5xx, with its line), then built,
        submitted and recorded; the job's row."""
        from torchx_nb.runner import RunRequest

        runner = self.runner
        scheduler = sub.scheduler or runner.default_scheduler()
        known = runner.scheduler_backends()
        if scheduler not in known:
            raise BadSubmission(f"scheduler {scheduler!r} is not one of {', '.join(known)}")
        if sub.typed_cfg:  # the field's name in its refusal (the run reads it once more)
            try:
                runner.cfg_from_str(scheduler, sub.typed_cfg)
            except ValueError as e:
                raise BadSubmission(f"typed_cfg: {one_line(e)}") from None
        request = RunRequest(
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
        try:
            runner.prepare(request)
        except BadParameter as e:  # the body's field, not the CLI's flag
            field = "typed_parameters" if e.name in sub.typed else "parameters"
            raise BadSubmission(f"{field}.{e.name}: {e.why}") from None
        except Exception as e:
            if refuses(e):
                raise BadSubmission(one_line(e)) from None
            raise
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
        error (the handler maps each to its status)."""
        if self.runner.jobstore.get(handle) is None:
            return False
        status = self.runner.cancel(handle)
        if status.state in (AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED):
            raise JobEnded(handle, status.state.name)
        return True

    # -- the change feed

    def event_id(self, version: int) -> str:
        """An event stream position: this server's epoch and a version, so a client resuming
        with ``Last-Event-ID`` from another server (or before a restart) is told to reset."""
        return f"{self.epoch}.{version}"

    def resume_from(self, event_id: str | None) -> int:
        """The version to resume after; -1 (reset) for none or one from another server or
        from before a restart, or past this stream's position (the store's counter went back):
        a well-formed id is never refused. Only a malformed one is ``BadEventId``."""
        if not event_id:
            return -1
        m = _EVENT_ID.fullmatch(event_id)
        if m is None:
            raise BadEventId("Last-Event-ID must be an event id of the form EPOCH.N")
        version = int(m.group(2))
        if m.group(1) != self.epoch or not self._floor <= version <= self._version:
            return -1
        return version

    def active_rows(self) -> list[dict[str, Any]]:
        self._start_rev()
        return [self.row(r) for r in self.runner.jobstore.list(active_only=True)]

    def _start_rev(self) -> None:
        """Take the store's counter as the feed's start, once, before the first page or
        stream reads the store (so nothing written after that read is missed)."""
        with self._rev_lock:
            if self._rev is None:
                found = self.runner.jobstore.changes(sys.maxsize)
                self._rev, self._store_id = found.rev, found.store_id

    def _changed_records(self) -> list[Any]:
        """The records written since the last look, by the store's counter. Another store
        (one moved over this one, or made anew) or a counter that went back (a store restored
        from a backup) is not replayed row by row: the feed is reset (every client reloads one
        page) and goes on from that store's counter."""
        self._start_rev()
        store = self.runner.jobstore
        with self._rev_lock:
            found = store.changes(self._rev or 0)
            if found.store_id != self._store_id or found.rev < (self._rev or 0):
                self._store_id, self._rev = found.store_id, found.rev
                self._seen.clear()
                self._store_swapped = True
                return []
            for rec in found.records:
                self._rev = max(self._rev or 0, rec.rev or 0)
            return found.records

    def _refresh(self, poke: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        """One look: the jobs not yet ended are watched by the refresher (new ones added,
        those the store shows ended let go; ``poke`` is called when it learns something),
        then the rows whose state or message changed in the store since the last look (from
        any process)."""
        active = {r.handle for r in self.runner.jobstore.list(active_only=True)}
        refresher = self.refresher
        # a watch the refresher ended while the store still shows the job active (its
        # state could not be written) is made again: the next answer is written then
        new = [h for h in active if not refresher.is_watched(self._watched.get(h))]
        if new:

            def learned(status: Any, error: BaseException | None) -> None:
                if poke is not None:
                    poke()

            ids = refresher.watch_many(new, learned, record_unknown=True, runner=self.runner)
            self._watched.update(zip(new, ids, strict=True))
        for handle in [h for h in self._watched if h not in active]:
            refresher.unwatch(self._watched.pop(handle))
        self.polls += 1
        changed = []
        for rec in self._changed_records():
            key = (rec.state, rec.msg or "")
            if self._seen.get(rec.handle) != key:
                self._seen[rec.handle] = key
                changed.append(self.row(rec))
        return changed

    def _let_go(self) -> None:
        """Stop watching: the refresher's thread idles when nothing else watches."""
        if self._watched and self._runner is not None:
            refresher = self.refresher
            for watch_id in self._watched.values():
                refresher.unwatch(watch_id)
        self._watched.clear()

    def _look(self) -> None:
        """One round of the feed, on the refresher's thread: while someone listens (a client,
        or a jobs page's lease), the store's active jobs watched and what changed read, then
        handed to the event loop; after the last listener, the feed stops and lets go."""
        with self._feed_lock:
            if self._clients <= 0 and time.monotonic() >= self._lease_until:
                if self._poller is not None:
                    self.refresher.stop_clock(self._poller)
                self._poller = None
                self._let_go()
                return
            clock = self._poller
        try:
            changed = self._refresh(lambda: self.refresher.hurry(clock))
        except Exception:
            changed = []
        swapped, self._store_swapped = self._store_swapped, False
        if (changed or swapped) and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._publish, changed, swapped)

    def _publish(self, changed: list[dict[str, Any]], swapped: bool) -> None:
        """On the event loop: a new version with what the feed read, and the waiting
        streams woken."""
        if swapped:
            self._reset()
        if changed:
            self._record(changed)
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = asyncio.Event()

    def _reset(self) -> None:
        """A new version that every client before it must reset to (nothing before it is
        kept)."""
        self._version += 1
        self._floor = self._version
        self._log.clear()

    def _record(self, rows: list[dict[str, Any]]) -> None:
        """A new version with these rows; the oldest are forgotten past CHANGES_KEPT (a client
        resuming from before them is told to reset)."""
        self._version += 1
        self._log.extend((self._version, r) for r in rows)
        if len(self._log) > CHANGES_KEPT:
            cut = len(self._log) - CHANGES_KEPT
            self._floor = self._log[cut - 1][0]
            del self._log[:cut]

    def connect(self) -> None:
        """An event-stream client arrived: make sure the poller runs."""
        self._clients += 1
        self._start_poller()

    def touch(self) -> None:
        """A jobs page was asked for: keep the states fresh for a while (the poller runs for
        LEASE_S more)."""
        self._lease_until = time.monotonic() + LEASE_S
        self._start_poller()

    def _start_poller(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        with self._feed_lock:
            if self._poller is None:
                self._poller = self.refresher.every(self.local_interval, self._look)

    def disconnect(self) -> None:
        """A client left; the feed stops after the last one."""
        self._clients = max(0, self._clients - 1)

    @property
    def clients(self) -> int:
        return self._clients

    @property
    def version(self) -> int:
        return self._version

    async def changes(self, since: int) -> tuple[int, list[dict[str, Any]] | None]:
        """Rows changed after version ``since``; waits up to ``heartbeat`` seconds for one
        (the heartbeat keeps proxies from closing the stream). None: what changed since then
        is no longer known (the store was swapped, or too much changed): reset."""
        if self._version <= since and self._wakeup is not None:
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.heartbeat)
            except asyncio.TimeoutError:
                return self._version, []
        if since < self._floor:
            return self._version, None
        start = bisect.bisect_right(self._log, since, key=lambda entry: entry[0])
        latest = {row["handle"]: row for _, row in self._log[start:]}
        return self._version, list(latest.values())


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
