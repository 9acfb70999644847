"""The REST API's change feed: what the event stream sends, independent of the web framework.

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
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from torchx_nb.specs.exceptions import BadEventId

CHANGES_KEPT = 20_000
LEASE_S = 30.0
_EVENT_ID = re.compile(r"([0-9a-f]{8})\.([0-9]{1,18})")


class Service(Protocol):
    """What the feed reads of the job service: its Runner (and job store), the process's
    refresher on its clocks, how a record is shown, and its clocks."""

    local_interval: float
    heartbeat: float

    @property
    def runner(self) -> Any: ...

    @property
    def refresher(self) -> Any: ...

    def row(self, rec: Any) -> dict[str, Any]: ...


class ChangeFeed:
    """The event stream's versions of what changed in the job store, for one server."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.epoch = secrets.token_hex(4)
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

    def close(self) -> None:
        """Stop the feed's clock and let go of its watches."""
        with self._feed_lock:
            if self._poller is not None:
                self.service.refresher.stop_clock(self._poller)
            self._poller = None
        self._let_go()

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
        self.start()
        return [self.service.row(r) for r in self.service.runner.jobstore.list(active_only=True)]

    def start(self) -> None:
        """Take the store's counter as the feed's start, once, before the first page or
        stream reads the store (so nothing written after that read is missed)."""
        with self._rev_lock:
            if self._rev is None:
                found = self.service.runner.jobstore.changes(sys.maxsize)
                self._rev, self._store_id = found.rev, found.store_id

    def _changed_records(self) -> list[Any]:
        """The records written since the last look, by the store's counter. Another store
        (one moved over this one, or made anew) or a counter that went back (a store restored
        from a backup) is not replayed row by row: the feed is reset (every client reloads one
        page) and goes on from that store's counter."""
        self.start()
        store = self.service.runner.jobstore
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
        active = {r.handle for r in self.service.runner.jobstore.list(active_only=True)}
        refresher = self.service.refresher
        # a watch the refresher ended while the store still shows the job active (its
        # state could not be written) is made again: the next answer is written then
        new = [h for h in active if not refresher.is_watched(self._watched.get(h))]
        if new:

            def learned(status: Any, error: BaseException | None) -> None:
                if poke is not None:
                    poke()

            ids = refresher.watch_many(
                new, learned, record_unknown=True, runner=self.service.runner
            )
            self._watched.update(zip(new, ids, strict=True))
        for handle in [h for h in self._watched if h not in active]:
            refresher.unwatch(self._watched.pop(handle))
        self.polls += 1
        changed = []
        for rec in self._changed_records():
            key = (rec.state, rec.msg or "")
            if self._seen.get(rec.handle) != key:
                self._seen[rec.handle] = key
                changed.append(self.service.row(rec))
        return changed

    def _let_go(self) -> None:
        """Stop watching: the refresher's thread idles when nothing else watches."""
        if self._watched:
            refresher = self.service.refresher
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
                    self.service.refresher.stop_clock(self._poller)
                self._poller = None
                self._let_go()
                return
            clock = self._poller
        try:
            changed = self._refresh(lambda: self.service.refresher.hurry(clock))
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
                self._poller = self.service.refresher.every(self.service.local_interval, self._look)

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
                await asyncio.wait_for(self._wakeup.wait(), self.service.heartbeat)
            except asyncio.TimeoutError:
                return self._version, []
        if since < self._floor:
            return self._version, None
        start = bisect.bisect_right(self._log, since, key=lambda entry: entry[0])
        latest = {row["handle"]: row for _, row in self._log[start:]}
        return self._version, list(latest.values())


__all__ = ["CHANGES_KEPT", "LEASE_S", "ChangeFeed"]
