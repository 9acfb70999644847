from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from torchx_nb import specs
from torchx_nb.components.utils import sh
from torchx_nb.refresher import Refresher, get_refresher
from torchx_nb.runner import Runner, get_runner
from torchx_nb.schedulers import get_scheduler_factories
from torchx_nb.schedulers.abilities import DescribesMany
from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.local_cwd import LocalCwdScheduler
from torchx_nb.specs import AppState


def test_poller_follows_real_jobs_on_one_thread(tmp_path: Path) -> None:
    runner = get_runner()
    poller = Refresher(runner, local_interval=0.05, max_backoff=1)
    seen: dict[str, list[str]] = {}
    # each job runs until the test lets it end, so its RUNNING is seen however slow the machine
    go = tmp_path / "go"
    handles = [
        runner.run(sh("sh", "-c", f"while [ ! -e '{go}' ]; do sleep 0.05; done"), "local_cwd")
        for _ in range(5)
    ]
    loops = lambda: [t for t in threading.enumerate() if t.name == "torchx-nb-refresher"]  # noqa: E731
    before = loops()
    callers: set[threading.Thread] = set()

    def note(h: str, s: Any, e: Any) -> None:
        callers.add(threading.current_thread())
        seen.setdefault(h, []).append(s.state.name if s else f"error {e}")

    for h in handles:
        poller.watch(h, lambda s, e, h=h: note(h, s, e))
    # one loop thread (each poll asks on a short-lived thread of its own, so a hanging
    # backend holds back nobody else); every callback on the loop's thread
    assert len(loops()) == len(before) + 1
    wait_for(lambda: all("RUNNING" in seen.get(h, []) for h in handles), timeout=60)
    go.touch()
    wait_for(lambda: all(seen.get(h, [""])[-1] == "SUCCEEDED" for h in handles), timeout=60)
    wait_for(lambda: poller.watching == 0)
    count = {h: len(v) for h, v in seen.items()}
    import time

    time.sleep(0.3)
    assert {h: len(v) for h, v in seen.items()} == count
    assert runner.jobstore.get(handles[0]).state == "SUCCEEDED"  # type: ignore[union-attr]
    assert callers == {poller._thread}
    poller.stop()
    assert get_refresher() is get_refresher()


class Batched(DescribesMany, LocalCwdScheduler):
    """local_cwd plus describe_many, counting calls."""

    calls: list[int] = []
    describes: list[str] = []

    def describe_many(self, app_ids: list[str]) -> Mapping[str, DescribeAppResponse | None]:
        Batched.calls.append(len(app_ids))
        return {a: super(Batched, self).describe(a) for a in app_ids}

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        Batched.describes.append(app_id)
        return super().describe(app_id)


class Flaky(LocalCwdScheduler):
    failures = 2

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        if Flaky.failures > 0:
            Flaky.failures -= 1
            raise ConnectionError("endpoint unreachable")
        return super().describe(app_id)


def _runner_with(name: str, cls: type) -> Runner:
    factories: dict[str, Any] = dict(get_scheduler_factories())
    factories[name] = lambda session, **kw: cls(session, **kw)
    return Runner(scheduler_factories=factories)


def test_describe_many_is_called_once_per_round(tmp_path: Path) -> None:
    runner = _runner_with("batched", Batched)
    # the jobs run until every one is watched and a round has asked for all six, however slow
    # the machine (a job that ended before the sixth watch made the largest round five)
    go = tmp_path / "go"
    script = f"while [ ! -e '{go}' ]; do sleep 0.05; done"
    handles = [runner.run(sh("sh", "-c", script), "batched") for _ in range(6)]
    Batched.calls.clear()
    Batched.describes.clear()
    poller = Refresher(runner, local_interval=0.05)
    done: set[str] = set()
    for h in handles:
        poller.watch(h, lambda s, e, h=h: done.add(h) if s and specs.is_terminal(s.state) else None)
    wait_for(lambda: 6 in Batched.calls, timeout=60)
    go.touch()
    wait_for(lambda: len(done) == 6, timeout=60)
    poller.stop()
    assert max(Batched.calls) == 6
    assert len(Batched.calls) <= poller.rounds
    assert Batched.describes == []


def test_transient_errors_back_off_and_recover() -> None:
    runner = _runner_with("flaky", Flaky)
    handle = runner.run(sh("true"), "flaky")
    events: list[str] = []
    poller = Refresher(runner, local_interval=0.05, max_backoff=1)
    Flaky.failures = 2
    poller.watch(handle, lambda s, e: events.append(s.state.name if s else f"error:{e}"))
    wait_for(lambda: events and events[-1] == "SUCCEEDED")
    poller.stop()
    assert events[:2] == ["error:endpoint unreachable"] * 2
    assert events[-1] == AppState.SUCCEEDED.name


class Remote(LocalCwdScheduler):
    """local_cwd that calls itself remote and counts describe calls; ``broken`` app ids fail."""

    is_local = False
    calls: list[float] = []
    broken: set[str] = set()

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        import time

        Remote.calls.append(time.monotonic())
        if app_id in Remote.broken:
            raise RuntimeError(f"cannot describe {app_id}")
        return super().describe(app_id)


def test_remote_jobs_are_asked_once_per_interval_and_errors_alone_back_off() -> None:
    import time

    runner = _runner_with("remote", Remote)
    good = runner.run(sh("sleep", "1.5"), "remote")
    bad = runner.run(sh("sleep", "30"), "remote")
    Remote.broken = {specs.parse_app_handle(bad).app_id}
    Remote.calls.clear()
    # one refresh (one status_many) per round (a round may describe each handle twice when
    # one fails); the rounds that ask for both handles: the first round may ask for the good
    # one alone, when the refresher's thread starts it before the second watch is registered
    # (that watch is then asked for at once after it)
    rounds: list[float] = []
    refresh = runner.refresh

    def counted(handles: list[str], record_unknown: bool = False) -> Any:
        if len(handles) == 2:
            rounds.append(time.monotonic())
        return refresh(handles, record_unknown=record_unknown)

    runner.refresh = counted  # type: ignore[method-assign]
    poller = Refresher(runner, local_interval=0.01, remote_interval=0.3, max_backoff=2)
    assert poller.interval("remote") == 0.3 and poller.interval("local_cwd") == 0.01
    seen: dict[str, list[str]] = {good: [], bad: []}
    ticks: list[float] = []
    for h in (good, bad):
        poller.watch(
            h,
            lambda s, e, h=h: seen[h].append(s.state.name if s else "error"),
            tick=lambda: ticks.append(time.monotonic()),
        )
    wait_for(lambda: seen[good] and seen[good][-1] == "SUCCEEDED", timeout=10)
    # the broken handle never holds back the good one, and only ever gets errors
    assert set(seen[bad]) == {"error"} and "RUNNING" in seen[good]
    gaps = [b - a for a, b in itertools.pairwise(list(rounds))]
    assert gaps and min(gaps) >= 0.25, gaps  # not faster than the interval
    # once the good job ended only the broken one is polled: it backs off (0.3, 0.6, 1.2, 2, 2)
    Remote.calls.clear()
    time.sleep(4)
    assert 1 <= len(Remote.calls) <= 4, Remote.calls
    assert len(ticks) >= 3
    poller.stop()
    Remote.broken = set()
    runner.cancel(bad)


class SlowRemote(LocalCwdScheduler):
    """local_cwd that calls itself remote; its first describe takes ``SLOW_S`` seconds."""

    is_local = False
    SLOW_S = 1.5
    entered = threading.Event()

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        import time

        if not SlowRemote.entered.is_set():
            SlowRemote.entered.set()
            time.sleep(SlowRemote.SLOW_S)
        return super().describe(app_id)


def test_a_handle_watched_during_a_poll_is_asked_at_once_after_it() -> None:
    """A watch added while its scheduler's describe is in flight is asked for right after that
    poll, not a whole remote interval (5 s) later: the poll's next time must not overwrite the
    wake-up the new watch asked for."""
    import time

    runner = _runner_with("slowremote", SlowRemote)
    first, second = (runner.run(sh("sleep", "30"), "slowremote") for _ in range(2))
    SlowRemote.entered.clear()
    poller = Refresher(runner, remote_interval=5.0)
    seen: dict[str, list[float]] = {first: [], second: []}
    try:
        poller.watch(first, lambda s, e: seen[first].append(time.monotonic()))
        assert SlowRemote.entered.wait(30)  # the first poll is in its slow describe
        added = time.monotonic()
        poller.watch(second, lambda s, e: seen[second].append(time.monotonic()))
        wait_for(lambda: seen[second], timeout=30)
        # the slow describe's rest (<= 1.5 s) and one quick one; before: 1.5 s + 5 s
        assert seen[second][0] - added < 4.0, seen[second][0] - added
    finally:
        poller.stop()
        for h in (first, second):
            runner.cancel(h)


def test_settings_other_than_the_refreshers_are_an_error() -> None:
    """The refresher does not change under its watchers: another caller's different settings
    while something is watched are one clear error (they were silently ignored); the same
    settings, or none, are fine, and new ones apply once nothing is watched."""
    import pytest

    from torchx_nb.specs.exceptions import RefresherSettingsError

    first = get_refresher(local_interval=0.25, remote_interval=4.0)
    clock = first.every(3600, lambda: None)  # something rides on it
    try:
        assert get_refresher() is first
        assert get_refresher(local_interval=0.25) is first
        with pytest.raises(RefresherSettingsError, match="already runs with local_interval=0.25"):
            get_refresher(local_interval=1.0)
        assert first.local_interval == 0.25
    finally:
        first.stop_clock(clock)
    assert get_refresher(local_interval=1.0).local_interval == 1.0  # nothing watched: applied
    get_refresher(local_interval=0.5, remote_interval=5.0)


def test_every_runners_watches_ride_on_the_processs_one_thread(tmp_path: Path) -> None:
    """Two Runners (a kernel's magics and a ``sweep()`` or ``run_notebook()`` made with a Runner
    of its own) watch through one refresher thread, each handle asked through its own Runner's
    schedulers: before, each Runner had a refresher and a thread of its own."""
    go = tmp_path / "go"
    script = f"while [ ! -e '{go}' ]; do sleep 0.05; done"
    # other tests' Refreshers in this worker may still be winding down: count threads this
    # test starts, and which thread called back
    before = {t for t in threading.enumerate() if t.name == "torchx-nb-refresher"}
    with get_runner() as one, get_runner() as two:
        handles = {r: r.run(sh("sh", "-c", script), "local_cwd") for r in (one, two)}
        seen: dict[str, list[str]] = {}
        callers: set[threading.Thread] = set()

        def note(h: str, s: Any) -> None:
            callers.add(threading.current_thread())
            seen.setdefault(h, []).append(s.state.name if s else "-")

        for runner, handle in handles.items():
            get_refresher().watch(handle, lambda s, e, h=handle: note(h, s), runner=runner)
        wait_for(lambda: all("RUNNING" in seen.get(h, []) for h in handles.values()), timeout=60)
        started = {t for t in threading.enumerate() if t.name == "torchx-nb-refresher"} - before
        assert len(started | (before & callers)) == 1, "one refresher thread serves both Runners"
        assert callers == {get_refresher()._thread}
        assert get_refresher().watching == 2
        go.touch()
        wait_for(lambda: all(seen[h][-1] == "SUCCEEDED" for h in handles.values()), timeout=60)
        wait_for(lambda: get_refresher().watching == 0)


def test_work_on_a_clock_runs_on_the_refreshers_one_thread() -> None:
    """``every``: a watcher's periodic work runs on the refresher's thread (no thread of its
    own), at once and then on its interval, sooner when hurried, never after it stops."""
    import time

    with get_runner() as runner:
        refresher = Refresher(runner)
        ran: list[str] = []
        before = threading.active_count()
        clock = refresher.every(0.2, lambda: ran.append(threading.current_thread().name))
        clock2 = refresher.every(0.2, lambda: ran.append("second"))
        assert threading.active_count() == before + 1, "one thread for every clock"
        wait_for(lambda: ran.count("torchx-nb-refresher") >= 3)
        refresher.stop_clock(clock2)
        refresher.stop_clock(clock)
        time.sleep(0.1)
        count = len(ran)
        time.sleep(0.5)
        assert len(ran) == count
        assert set(ran) == {"torchx-nb-refresher", "second"}
        slow = refresher.every(3600, lambda: ran.append("slow"))
        wait_for(lambda: ran.count("slow") == 1)
        refresher.hurry(slow)
        wait_for(lambda: ran.count("slow") == 2)
        refresher.stop()


@pytest.mark.slow
def test_a_kernels_sweep_notebook_job_and_cell_job_share_one_refresher_thread(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a real kernel a cell job (the magics' Runner), a ``run_notebook()`` job and a
    ``sweep()`` (each made with a Runner of its own) are watched by one refresher thread:
    before, the sweep's Runner had a refresher, and a thread, of its own."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.notebook.test_quickstart import execute, text_of

    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    go = isolated / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.1)\n"
    nbformat.write(new_notebook(cells=[new_code_cell(wait)]), isolated / "waits.ipynb")
    driver = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(f"%%torchx run -o cell_job\n{wait}"),
            new_code_cell(
                "import torchx_nb\nnb_job = torchx_nb.run_notebook('waits.ipynb')\nnb_job.watch()"
            ),
            new_code_cell(
                "import threading, time\nfrom torchx_nb.sweeps import sweep\n"
                f"sw = sweep({{'x': [1, 2]}}, cell={wait!r}, scheduler='local_cwd')\n"
                "threading.Thread(target=sw.wait, daemon=True).start()\n"
                "deadline = time.monotonic() + 120\n"
                "while not (len(sw.handles) == 2 and all(sw.handles)) and time.monotonic() < deadline:\n"
                "    time.sleep(0.1)\n"
                "time.sleep(2)  # sw.wait watches its trials\n"
                "print([t.name for t in threading.enumerate() if 'refresher' in t.name])"
            ),
            new_code_cell(
                "from torchx_nb.refresher import get_refresher\nprint(get_refresher().watching)"
            ),
            new_code_cell(
                f"open({str(go)!r}, 'w').close()\n"
                "print(sw.wait(timeout=120) and [s.state.name for s in sw.statuses()])\n"
                "print(nb_job.wait(timeout=120).state.name, cell_job.wait(timeout=120).state.name)"
            ),
        ]
    )
    execute(driver, isolated, allow_errors=True)
    # the cell job, the notebook job and the two trials, on the one thread
    assert text_of(driver.cells[3]) == "['torchx-nb-refresher']\n", text_of(driver.cells[3])
    assert text_of(driver.cells[4]) == "4\n", text_of(driver.cells[4])
    assert text_of(driver.cells[5]) == "['SUCCEEDED', 'SUCCEEDED']\nSUCCEEDED SUCCEEDED\n", text_of(
        driver.cells[5]
    )


class Hanging(LocalCwdScheduler):
    """local_cwd whose describe hangs until released: an API that accepts and never answers."""

    release = threading.Event()
    asked = threading.Event()

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        Hanging.asked.set()
        Hanging.release.wait(timeout=120)
        return super().describe(app_id)


def test_a_backend_that_hangs_holds_back_only_its_own_jobs(tmp_path: Path) -> None:
    """Every watch of the process rides on one refresher: a scheduler whose describe never
    answers froze every other job's updates (the groups were asked one after another on the
    refresher's thread). Now each poll asks on a thread of its own: a local job of another
    scheduler reaches SUCCEEDED while the hanging one is still being asked, and the hanging
    job's answer arrives once its backend answers."""
    Hanging.release.clear()
    Hanging.asked.clear()
    runner = _runner_with("hanging", Hanging)
    refresher = Refresher(runner, local_interval=0.05)
    seen: dict[str, list[str]] = {}
    callers: set[threading.Thread] = set()

    def note(h: str, s: Any) -> None:
        callers.add(threading.current_thread())
        seen.setdefault(h, []).append(s.state.name if s else "-")

    try:
        stuck = runner.run(sh("sh", "-c", "sleep 1"), "hanging")
        refresher.watch(stuck, lambda s, e: note(stuck, s))
        assert Hanging.asked.wait(timeout=30)
        quick = runner.run(sh("true"), "local_cwd")
        refresher.watch(quick, lambda s, e: note(quick, s))
        wait_for(lambda: seen.get(quick, [""])[-1] == "SUCCEEDED", timeout=30)
        assert stuck not in seen, "the hanging backend answered nothing yet"
        Hanging.release.set()
        wait_for(lambda: seen.get(stuck, [""])[-1] == "SUCCEEDED", timeout=60)
        assert callers == {refresher._thread}  # answers delivered on the refresher's thread
    finally:
        Hanging.release.set()
        refresher.stop()


def test_a_forked_child_starts_with_a_refresher_of_its_own() -> None:
    """A process that forks while its refresher watches (a kernel's cell calling os.fork, a
    multiprocessing pool): the child gets a new, empty refresher, not the parent's watches
    polled again by a restarted thread (their callbacks would draw the parent's widgets from
    the child) nor a lock a parent's thread held."""
    import os

    parent = get_refresher()
    clock = parent.every(3600, lambda: None)
    try:
        assert parent.watching == 0 and parent._clocks
        pid = os.fork()
        if pid == 0:  # the child: report by exit code only
            ok = False
            with contextlib.suppress(BaseException):
                child = get_refresher()
                ok = child is not parent and not child._clocks and child._thread is None
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child reused its parent's refresher"
        assert get_refresher() is parent
    finally:
        parent.stop_clock(clock)


class CountedHanging(Hanging):
    """``Hanging`` that counts the describes in flight."""

    inflight = 0
    most = 0
    count_lock = threading.Lock()

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        cls = CountedHanging
        with cls.count_lock:
            cls.inflight += 1
            cls.most = max(cls.most, cls.inflight)
        try:
            return super().describe(app_id)
        finally:
            with cls.count_lock:
                cls.inflight -= 1


def test_a_hanging_backend_is_asked_once_however_often_its_job_is_watched_again() -> None:
    """A group is never asked twice at once, also when every watch of it was let go while its
    poll hung and a new one came (the server's feed lets go when the panel closes and watches
    again when it opens; a sweep's ``wait(timeout=)`` in a loop): the group was forgotten
    while its poll was out, so each new watch started another describe of the hanging API
    and another thread (ten here). The answer, once it comes, goes to the watch of now."""
    Hanging.release.clear()
    Hanging.asked.clear()
    CountedHanging.inflight = CountedHanging.most = 0
    runner = _runner_with("counted", CountedHanging)
    refresher = Refresher(runner, local_interval=0.02)
    clock = refresher.every(0.02, lambda: None)  # the refresher's rounds go on (the feed's)
    seen: list[str] = []
    try:
        stuck = runner.run(sh("sh", "-c", "sleep 1"), "counted")
        watch = refresher.watch(stuck, lambda s, e: None)
        assert Hanging.asked.wait(timeout=30)

        def two_rounds() -> None:
            start = refresher.rounds
            wait_for(lambda: refresher.rounds > start + 1, timeout=30)

        for _ in range(10):
            refresher.unwatch(watch)
            two_rounds()  # a round with nothing of the group watched
            watch = refresher.watch(stuck, lambda s, e: seen.append(s.state.name if s else "-"))
            two_rounds()
        assert CountedHanging.most == 1, CountedHanging.most  # before: 11 at once
        Hanging.release.set()
        wait_for(lambda: seen[-1:] == ["SUCCEEDED"], timeout=60)
    finally:
        Hanging.release.set()
        refresher.stop_clock(clock)
        refresher.stop()


class CancelledOnce(LocalCwdScheduler):
    """local_cwd whose first describe raises ``asyncio.CancelledError`` (a ``BaseException``,
    as an SDK over asyncio may raise when its call is cancelled)."""

    raised = False

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        import asyncio

        if not CancelledOnce.raised:
            CancelledOnce.raised = True
            raise asyncio.CancelledError("the SDK's call was cancelled")
        return super().describe(app_id)


def test_a_describe_that_raises_a_base_exception_is_an_error_the_poll_recovers_from() -> None:
    """A describe that raised a ``BaseException`` (not an ``Exception``) ended the asking
    thread with a traceback on stderr and left its group asking for ever: the job was never
    asked again, its watch heard nothing. It is an error like any other now: the watch hears
    it ("reconnecting"), and the next poll's status."""
    CancelledOnce.raised = False
    runner = _runner_with("cancelledonce", CancelledOnce)
    refresher = Refresher(runner, local_interval=0.05, max_backoff=0.2)
    seen: list[str] = []
    handle = runner.run(sh("true"), "cancelledonce")
    try:
        refresher.watch(handle, lambda s, e: seen.append(s.state.name if s else f"error {e}"))
        wait_for(lambda: seen[-1:] == ["SUCCEEDED"], timeout=30)
        assert seen[0] == "error the SDK's call was cancelled", seen
    finally:
        refresher.stop()


def test_a_poll_whose_thread_cannot_start_is_an_error_the_refresher_outlives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each poll starts a thread; where none can start (the process at its thread or memory
    limit: ``RuntimeError: can't start new thread``) the error ended the refresher's own
    thread, and every watch of the process froze without a word. It is the group's error
    now: its watch hears it, and the next poll, once a thread starts, its status."""
    refused: list[str] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name == "torchx-nb-refresher-ask" and not refused:
            refused.append(self.name)
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    runner = get_runner()
    refresher = Refresher(runner, local_interval=0.05, max_backoff=0.2)
    seen: list[str] = []
    handle = runner.run(sh("true"), "local_cwd")
    try:
        refresher.watch(handle, lambda s, e: seen.append(s.state.name if s else f"error {e}"))
        wait_for(lambda: seen[-1:] == ["SUCCEEDED"], timeout=30)
        assert seen[0] == "error can't start new thread", seen
        assert refresher._thread is not None and refresher._thread.is_alive()
    finally:
        refresher.stop()
