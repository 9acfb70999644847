"""One refresher loop per process: a background thread that watches every job something here
waits on (a kernel's widgets, ``Sweep.wait``, ``%torchx watch``, the server's panel feed), so the
process stays free and each scheduler is asked once per round, not once per watcher.

There is one per process, whatever asks: each watch names the Runner that asks for it (a
kernel's magics, a ``sweep()`` or ``run_notebook()`` made with a Runner of their own, the
server's), and its handles are asked through that Runner's schedulers. Handles are grouped by
Runner and scheduler and each group is asked on its own clock: local schedulers
(``Scheduler.is_local``) every ``local_interval`` (0.5 s, so an ended job shows within a second),
remote ones every ``remote_interval`` (5 s), with one ``describe_many`` call where the backend
has it (AWS Batch describes 100 jobs per call). Each group's poll asks on a short-lived thread
of its own, so a backend that hangs (an API that accepts and never answers) holds back its own
jobs only; the answers come back to the refresher's thread, which delivers every callback.
Only errors back off (doubling, up to
``max_backoff``); they are handed to the watchers ("reconnecting"), never raised, and a handle
that fails alone does not hold back the others. Watchers may also ask for a tick every second
(the elapsed clock), and a watcher with work of its own on a clock (the server's change feed, a
sweep view's clock) runs it on this thread too (``every``): a process has one such thread, never
a loop of its own per watcher. The settings are the first caller's: another caller asking for
other ones while anything is watched is an error (``RefresherSettingsError``), not silently
ignored; a caller asking for none takes them as they are. A forked child starts with a
refresher of its own."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchx_nb.specs.api import AppStatus, is_terminal, parse_app_handle
from torchx_nb.specs.exceptions import RefresherSettingsError

Callback = Callable[[AppStatus | None, BaseException | None], None]
Tick = Callable[[], None]

TICK_S = 1.0


@dataclass
class _Watch:
    handle: str
    group: tuple[int, str]  # (the asking Runner's id, the scheduler)
    callback: Callback
    tick: Tick | None = None
    last: AppStatus | None = None
    failing: bool = False
    record_unknown: bool = False


@dataclass
class _Clock:
    """Work a watcher runs on the refresher's thread every ``interval`` seconds."""

    fn: Callable[[], None]
    interval: float
    next_at: float = 0.0


@dataclass
class _Group:
    """One Runner's handles of one scheduler: when they are next due, and their error
    backoff."""

    runner: Any
    scheduler: str
    next_at: float = 0.0
    failures: int = 0
    delay: float = 0.0
    interval: float | None = None
    asking: bool = False  # a poll of this group is in flight (on its own thread)


class Refresher:
    """Refreshes watched handles from a single daemon thread, started on the first watch.
    ``runner``: the Runner a watch that names none is asked through (None: each names its
    own; the process's refresher, ``get_refresher``, has none)."""

    def __init__(
        self,
        runner: Any = None,
        local_interval: float = 0.5,
        remote_interval: float = 5.0,
        max_backoff: float = 60.0,
    ) -> None:
        self.runner = runner
        self.local_interval = local_interval
        self.remote_interval = remote_interval
        self.max_backoff = max_backoff
        self._watches: dict[int, _Watch] = {}
        self._clocks: dict[int, _Clock] = {}
        self._groups: dict[tuple[int, str], _Group] = {}
        self._stated: set[str] = set()  # the settings a caller asked for (get_refresher)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_tick = 0.0
        self.rounds = 0
        #: polls that came back (group, watches, statuses), delivered on the refresher thread
        self._answered: list[tuple[_Group, dict[int, _Watch], dict[str, Any]]] = []

    def watch(
        self, handle: str, callback: Callback, tick: Tick | None = None, runner: Any = None
    ) -> int:
        """Call ``callback(status, None)`` with each new status of ``handle`` (or
        ``callback(None, error)`` on a transient error) until the job ends, and ``tick()``
        every second meanwhile; ``runner`` is the Runner it is asked through. The first status
        is asked for at once."""
        return self.watch_many([handle], callback, tick, runner=runner)[0]

    def watch_many(
        self,
        handles: list[str],
        callback: Callback,
        tick: Tick | None = None,
        record_unknown: bool = False,
        runner: Any = None,
    ) -> list[int]:
        """``watch`` of each handle, registered at once (so a scheduler's first round asks for
        all of them in one call). ``record_unknown``: a job its scheduler no longer knows is
        recorded UNKNOWN in the job store (the server's watch, for every process's jobs)."""
        runner = runner if runner is not None else self.runner
        if runner is None:
            raise TypeError("watch: name the Runner the handles are asked through (runner=)")
        ids = []
        with self._lock:
            for handle in handles:
                scheduler = parse_app_handle(handle).scheduler_backend
                key = (id(runner), scheduler)
                watch_id = next(self._ids)
                self._watches[watch_id] = _Watch(
                    handle, key, callback, tick, record_unknown=record_unknown
                )
                ids.append(watch_id)
                group = self._groups.get(key)
                if group is None:
                    group = self._groups[key] = _Group(runner, scheduler)
                if not group.failures:
                    group.next_at = 0.0
            if ids:
                self._ensure_thread()
        self._wake.set()
        return ids

    def every(self, interval: float, fn: Callable[[], None]) -> int:
        """Run ``fn()`` on the refresher's thread now and then every ``interval`` seconds,
        until ``stop_clock``: a watcher's own periodic work (the server's change feed, a sweep
        view's clock) rides on the process's one thread. ``fn`` must be quick; what it
        raises is dropped."""
        with self._lock:
            clock_id = next(self._ids)
            self._clocks[clock_id] = _Clock(fn, interval)
            self._ensure_thread()
        self._wake.set()
        return clock_id

    def stop_clock(self, clock_id: int | None) -> None:
        with self._lock:
            self._clocks.pop(clock_id or 0, None)

    def hurry(self, clock_id: int | None) -> None:
        """Run the clock's work at once (e.g. when a watch learned something it reports)."""
        with self._lock:
            clock = self._clocks.get(clock_id or 0)
            if clock is not None:
                clock.next_at = 0.0
        self._wake.set()

    def _ensure_thread(self) -> None:
        """Start the thread if it is not running (called with the lock held)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="torchx-nb-refresher", daemon=True
            )
            self._thread.start()

    def unwatch(self, watch_id: int) -> None:
        with self._lock:
            self._watches.pop(watch_id, None)

    def is_watched(self, watch_id: int | None) -> bool:
        """Whether ``watch_id`` is still watched (its job not seen ended)."""
        with self._lock:
            return watch_id in self._watches

    @property
    def watching(self) -> int:
        with self._lock:
            return len(self._watches)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def interval(self, scheduler: str, runner: Any = None) -> float:
        """How often ``scheduler``'s jobs are asked for when nothing goes wrong."""
        runner = runner if runner is not None else self.runner
        group = self._groups.get((id(runner), scheduler))
        if group is not None and group.interval is not None:
            return group.interval
        value = self.local_interval if runner.is_local(scheduler) else self.remote_interval
        if group is not None:
            group.interval = value
        return value

    def settle(self, settings: dict[str, float]) -> None:
        """Take ``settings`` (``local_interval``, ``remote_interval``, ``max_backoff``) as
        asked by a caller: a setting another caller asked otherwise is ``RefresherSettingsError``
        while anything is watched (the refresher does not change under its watchers); one
        nobody asked for, or any while nothing is watched, is applied."""
        with self._lock:
            busy = bool(self._watches or self._clocks)
            other = {
                k: v
                for k, v in settings.items()
                if getattr(self, k) != v and k in self._stated and busy
            }
            if other:
                now = ", ".join(f"{k}={getattr(self, k)}" for k in sorted(other))
                asked = ", ".join(f"{k}={v}" for k, v in sorted(other.items()))
                raise RefresherSettingsError(
                    f"this process's refresher already runs with {now}; {asked} was asked for:"
                    " give the same settings everywhere, or none after the first"
                )
            for key, value in settings.items():
                if getattr(self, key) != value:
                    setattr(self, key, value)
                    for group in self._groups.values():
                        group.interval = None
                self._stated.add(key)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                watches = dict(self._watches)
                idle = not watches and not self._clocks
            if idle:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            now = time.monotonic()
            by_group: dict[tuple[int, str], list[int]] = {}
            for wid, w in watches.items():
                by_group.setdefault(w.group, []).append(wid)
            for key, wids in by_group.items():
                group = self._groups.get(key)
                if group is not None and now >= group.next_at and not group.asking:
                    self._poll_group(group, {w: watches[w] for w in wids})
            self._deliver_answers()
            self.rounds += 1
            if time.monotonic() >= self._next_tick:
                self._next_tick = time.monotonic() + TICK_S
                with self._lock:
                    ticking = [w.tick for w in self._watches.values() if w.tick is not None]
                for tick in ticking:
                    with contextlib.suppress(Exception):
                        tick()
            self._run_clocks()
            with self._lock:
                active = {w.group for w in self._watches.values()}
                # a Runner none of whose handles is watched is let go (its backoff with it),
                # once its poll is in: a group is never asked twice at once, also when it is
                # watched again while that poll hangs
                for key in [k for k, g in self._groups.items() if k not in active and not g.asking]:
                    del self._groups[key]
                clocks = [c.next_at for c in self._clocks.values()]
            due = [g.next_at for g in self._groups.values()] + clocks
            wake_at = min([*due, self._next_tick]) if due else self._next_tick
            self._wake.wait(timeout=max(0.0, wake_at - time.monotonic()))
            self._wake.clear()

    def _run_clocks(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [c for c in self._clocks.values() if now >= c.next_at]
            for clock in due:
                clock.next_at = now + clock.interval
        for clock in due:
            with contextlib.suppress(Exception):
                clock.fn()

    def _poll_group(self, group: _Group, watches: dict[int, _Watch]) -> None:
        """Ask the group's handles on a thread of the poll's own, so a backend that hangs (an
        API that accepts and never answers) holds back its own jobs only, never another
        scheduler's or Runner's; the answer is delivered on the refresher's thread."""
        handles = list(dict.fromkeys(w.handle for w in watches.values()))
        record = any(w.record_unknown for w in watches.values())
        with self._lock:
            # no time is due while this poll runs; a watch added meanwhile sets 0.0 (ask at
            # once), which the next time computed when it answers must not overwrite
            group.next_at = math.inf
            group.asking = True

        def ask() -> None:
            statuses: dict[str, AppStatus | BaseException | None]
            try:
                statuses = dict(group.runner.refresh(handles, record_unknown=record))
            except BaseException as e:  # the Runner's refresh maps errors per handle; a
                # BaseException (an SDK's asyncio.CancelledError) is an error too, never a
                # group left asking for ever
                statuses = dict.fromkeys(handles, e)
            if len(handles) > 1 and all(isinstance(s, BaseException) for s in statuses.values()):
                # the batch failed: ask one by one, so one bad job does not hold back the others
                statuses = {h: self._status_or_error(group.runner, h) for h in handles}
            with self._lock:
                self._answered.append((group, watches, statuses))
            self._wake.set()

        try:
            threading.Thread(target=ask, name="torchx-nb-refresher-ask", daemon=True).start()
        except RuntimeError as e:  # no thread can start (the process at its limit): the
            # group's error, asked again after its backoff, never the end of this loop
            with self._lock:
                self._answered.append((group, watches, dict.fromkeys(handles, e)))

    def _deliver_answers(self) -> None:
        """The polls that came back: their group's next time (or backoff), then each watch's
        new status or error, on this thread."""
        with self._lock:
            answered, self._answered = self._answered, []
        for group, watches, statuses in answered:
            self._take_answer(group, watches, statuses)

    def _take_answer(
        self,
        group: _Group,
        watches: dict[int, _Watch],
        statuses: dict[str, AppStatus | BaseException | None],
    ) -> None:
        errors = [s for s in statuses.values() if isinstance(s, BaseException)]
        interval = self.interval(group.scheduler, group.runner)
        with self._lock:
            group.asking = False
            if errors and len(errors) == len(statuses):
                group.failures += 1
                group.delay = min(max(group.delay * 2, interval), self.max_backoff)
                after = group.delay
            else:
                group.failures, group.delay = 0, 0.0
                after = interval
            # the earlier of the two: a wake-up asked for during the poll is kept
            group.next_at = min(group.next_at, time.monotonic() + after)
        for wid, watch in watches.items():
            if not self.is_watched(wid):  # unwatched while its poll was out
                continue
            result = statuses.get(watch.handle)
            if isinstance(result, BaseException):
                watch.failing = True
                self._deliver(watch, None, result)
                continue
            if result is None or result != watch.last or watch.failing:
                watch.last, watch.failing = result, False
                self._deliver(watch, result, None)
            if result is None or is_terminal(result.state):
                self.unwatch(wid)

    @staticmethod
    def _status_or_error(runner: Any, handle: str) -> AppStatus | BaseException | None:
        try:
            return runner.status(handle)
        except BaseException as e:  # see ask
            return e

    @staticmethod
    def _deliver(watch: _Watch, status: AppStatus | None, error: BaseException | None) -> None:
        with contextlib.suppress(Exception):
            watch.callback(status, error)


_PROCESS: Refresher | None = None
_PROCESS_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts with no refresher of its
    own, rather than the parent's watches (whose callbacks draw the parent's widgets) polled
    again by a thread restarted here, or a lock held by a thread that is gone."""
    global _PROCESS, _PROCESS_LOCK
    _PROCESS, _PROCESS_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def get_refresher(**settings: float) -> Refresher:
    """The process's one refresher (one thread, whatever Runners ask through it: each watch
    names its own). ``settings`` (``local_interval``, ``remote_interval``, ``max_backoff``)
    are its clocks: the first caller's that asks for them; asking for others while anything
    is watched is ``RefresherSettingsError`` (see ``Refresher.settle``)."""
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None:
            _PROCESS = Refresher()
        refresher = _PROCESS
    refresher.settle(settings)
    return refresher
