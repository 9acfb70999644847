"""One background poller per kernel: it watches every job a widget shows, so the kernel stays
free and the scheduler is asked once per round, not once per widget.

Handles are grouped by scheduler; a scheduler with ``describe_many(app_ids)`` (AWS Batch
describes 100 jobs per call) is asked once per round for all of them. Errors back off
exponentially per scheduler and are handed to the watchers ("reconnecting"), never raised."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchx_nb.specs.api import AppStatus, is_terminal, parse_app_handle

Callback = Callable[[AppStatus | None, BaseException | None], None]


@dataclass
class _Watch:
    handle: str
    callback: Callback
    last_state: str | None = None


@dataclass
class _Backoff:
    delay: float
    next_at: float = 0.0
    failures: int = 0


class Poller:
    """Polls watched handles from a single daemon thread, started on the first watch."""

    def __init__(self, runner: Any, min_interval: float = 0.5, max_interval: float = 30.0) -> None:
        self.runner = runner
        self.min_interval = min_interval
        self.max_interval = max_interval
        self._watches: dict[int, _Watch] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff: dict[str, _Backoff] = {}
        self._interval = min_interval
        self.rounds = 0

    def watch(self, handle: str, callback: Callback) -> int:
        """Call ``callback(status, None)`` with each fresh status of ``handle`` (or
        ``callback(None, error)`` on a transient error) until the job ends."""
        parse_app_handle(handle)
        with self._lock:
            watch_id = next(self._ids)
            self._watches[watch_id] = _Watch(handle, callback)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="torchx-nb-poller", daemon=True
                )
                self._thread.start()
        self._interval = self.min_interval
        self._wake.set()
        return watch_id

    def unwatch(self, watch_id: int) -> None:
        with self._lock:
            self._watches.pop(watch_id, None)

    @property
    def watching(self) -> int:
        with self._lock:
            return len(self._watches)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                watches = dict(self._watches)
            if not watches:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            changed = self._round(watches)
            self.rounds += 1
            self._interval = (
                self.min_interval if changed else min(self._interval * 1.5, self.max_interval / 4)
            )
            self._wake.wait(timeout=self._interval)
            self._wake.clear()

    def _round(self, watches: dict[int, _Watch]) -> bool:
        by_sched: dict[str, list[int]] = {}
        for wid, w in watches.items():
            by_sched.setdefault(parse_app_handle(w.handle).scheduler_backend, []).append(wid)
        changed = False
        now = time.monotonic()
        for sched_name, wids in by_sched.items():
            backoff = self._backoff.get(sched_name)
            if backoff and now < backoff.next_at:
                continue
            try:
                statuses = self._describe(sched_name, [watches[w].handle for w in wids])
            except Exception as e:
                b = self._backoff.setdefault(sched_name, _Backoff(self.min_interval))
                b.failures += 1
                b.delay = min(max(b.delay * 2, self.min_interval), self.max_interval)
                b.next_at = now + b.delay
                for wid in wids:
                    self._deliver(wid, watches[wid], None, e)
                continue
            self._backoff.pop(sched_name, None)
            for wid in wids:
                status = statuses.get(watches[wid].handle)
                state = status.state.name if status else None
                if state != watches[wid].last_state:
                    changed = True
                watches[wid].last_state = state
                self._deliver(wid, watches[wid], status, None)
                if status is None or is_terminal(status.state):
                    self.unwatch(wid)
        return changed

    def _describe(self, sched_name: str, handles: list[str]) -> dict[str, AppStatus | None]:
        return dict(self.runner.status_many(handles))

    @staticmethod
    def _deliver(
        wid: int, watch: _Watch, status: AppStatus | None, error: BaseException | None
    ) -> None:
        with contextlib.suppress(Exception):
            watch.callback(status, error)


_POLLERS: dict[int, Poller] = {}
_POLLERS_LOCK = threading.Lock()


def get_poller(runner: Any) -> Poller:
    """The kernel's poller for ``runner`` (one per runner, so one per kernel in practice)."""
    with _POLLERS_LOCK:
        poller = _POLLERS.get(id(runner))
        if poller is None or poller.runner is not runner:
            poller = Poller(runner)
            _POLLERS[id(runner)] = poller
        return poller
