"""The sweep's live view (torchx_nb/notebook/sweep_view.py) on real local_cwd trials."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest


class SilentPoller:
    """A poller that reports nothing by itself: the test hands the view each trial's state."""

    def watch(self, handle: str, callback: Any, runner: Any = None) -> int:
        return 0

    def unwatch(self, watch: int) -> None:
        pass

    def every(self, interval: float, fn: Any) -> int:
        return 0  # the test drives the view itself

    def stop_clock(self, clock: int | None) -> None:
        pass


def test_a_trial_never_seen_running_still_gets_its_chart_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial that ends between two polls reaches the view already ended, never RUNNING: its
    log is read to its end all the same, so the chart has a line for every trial (a fast
    trial's line was missing from the snapshot)."""
    from torchx_nb.metrics import parse_metric
    from torchx_nb.notebook.sweep_view import SweepView
    from torchx_nb.runner import RunRequest, get_runner
    from torchx_nb.sweeps import SweepRequest, start

    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    source = "for step in range(3):\n    print(f'loss: {n / (step + 1)}', flush=True)\n"
    request = SweepRequest(
        RunRequest(cell=source, scheduler="local_cwd", workspace=str(tmp_path)),
        ["n=1,2,3"],
        metrics=[parse_metric("loss=loss: ([0-9.]+)")],
    )
    with get_runner() as runner:
        sw = start(runner, request)
        statuses = sw.wait(timeout=60)
        view = SweepView(sw, runner, SilentPoller())
        try:
            for i, status in enumerate(statuses):
                view._on_status(i, status, None)
            # a line is drawn from its first point: wait for every log to be read to its
            # end (its reader's thread returns), not for three lines
            for reader in view._readers.values():
                reader.thread.join(60)
            assert view.html().count("<polyline") == 3
            assert [log.series()["loss"][-1][1] for log in view.metrics] == [
                pytest.approx(1 / 3),
                pytest.approx(2 / 3),
                pytest.approx(1.0),
            ]
        finally:
            view.close()


def test_the_views_clock_rides_on_the_processs_refresher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread per view: three views of one sweep tick on the process's one refresher
    thread (each had a 1-second ticker thread of its own), and a closed view's clock stops."""
    import threading

    from tests.conftest import wait_for
    from torchx_nb.notebook.sweep_view import SweepView
    from torchx_nb.notebook.widget_base import WORK_THREADS
    from torchx_nb.refresher import get_refresher
    from torchx_nb.runner import RunRequest, get_runner
    from torchx_nb.sweeps import SweepRequest, start

    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    request = SweepRequest(
        RunRequest(cell="print(n)\n", scheduler="local_cwd", workspace=str(tmp_path)), ["n=1,2"]
    )
    with get_runner() as runner:
        sw = start(runner, request)
        sw.wait(timeout=60)
        refresher = get_refresher()
        before = {t.name for t in threading.enumerate()}
        ticks: list[str] = []
        views = []
        for _ in range(3):
            view = SweepView(sw, runner, refresher)
            real = view._tick

            def tick(real: Any = real) -> None:
                ticks.append(threading.current_thread().name)
                real()

            refresher._clocks[view._clock].fn = tick  # type: ignore[index]
            views.append(view)
        try:
            # a trial's result is read on the process's shared pool (at most 4 threads for
            # every view), not on a thread of the view's
            after = {t.name for t in threading.enumerate() if not t.name.startswith(WORK_THREADS)}
            assert "torchx-nb-sweep" not in after
            # the refresher's loop and, while a poll is out, its short-lived asking thread
            assert after - before <= {"torchx-nb-refresher", "torchx-nb-refresher-ask"}
            wait_for(lambda: len(ticks) >= 6, timeout=30)
            assert set(ticks) == {"torchx-nb-refresher"}
        finally:
            for view in views:
                view.close()
        assert not refresher._clocks, "a closed view's clock stops"


class Display:
    """Stands in for the view's display handle: what the kernel would show, in order."""

    def __init__(self) -> None:
        self.updates: list[str] = []

    def update(self, bundle: dict[str, str], raw: bool = False) -> None:
        self.updates.append(bundle["text/html"])


class RacingSweep:
    """A sweep whose ``submitting`` is read by two threads at the same moment: each waits
    there for the other (up to 2 s), so two ends noticed at once really race."""

    def __init__(self, sweep: Any) -> None:
        import threading

        self._sweep = sweep
        self._both = threading.Barrier(2, timeout=2)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sweep, name)

    @property
    def submitting(self) -> bool:
        import threading

        with contextlib.suppress(threading.BrokenBarrierError):
            self._both.wait()
        return bool(self._sweep.submitting)


def test_two_ends_noticed_at_once_make_one_final_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresher's callback and the view's clock (or ``settle``) may notice the end at the
    same moment: the end is taken once, so the sweep's output is written as one snapshot
    (the final states at once, then the one with every result), not two of each."""
    import threading

    from torchx_nb.notebook.sweep_view import SweepView
    from torchx_nb.runner import RunRequest, get_runner
    from torchx_nb.sweeps import SweepRequest, start

    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    request = SweepRequest(
        RunRequest(cell="n * 10\n", scheduler="local_cwd", workspace=str(tmp_path)), ["n=1,2"]
    )
    with get_runner() as runner:
        sw = start(runner, request)
        statuses = sw.wait(timeout=60)
        view = SweepView(RacingSweep(sw), runner, SilentPoller())
        view._display = display = Display()
        with view._lock:  # what the poller told the view, before the end is looked for
            view.statuses = list(statuses)
        ends = [threading.Thread(target=view._check_end) for _ in range(2)]
        for end in ends:
            end.start()
        for end in ends:
            end.join(30)
        assert view.snapshotted.wait(60)
        time.sleep(1)  # a second snapshot thread, had one started, writes by now
        assert len(display.updates) == 2, display.updates
        final = display.updates[-1]
        assert "torchx-nb-sweep-snapshot" in final and "10" in final and "20" in final


class SlowResults:
    """The runner, but reading a result waits until the test lets it (a slow output store)."""

    def __init__(self, runner: Any) -> None:
        import threading

        self._runner = runner
        self.let_go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def result_repr(self, handle: str) -> str | None:
        self.let_go.wait(60)
        return self._runner.result_repr(handle)  # type: ignore[no-any-return]


def test_a_slow_result_read_never_holds_the_refreshers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's status callback runs on the process's one refresher thread, shared by
    every watcher: an ended trial's result is read elsewhere, so the callback returns at once
    while the output store is slow (it read the result there, holding every other job's
    status back), and the result still reaches the table and the snapshot."""
    import threading

    from torchx_nb.notebook.sweep_view import SweepView
    from torchx_nb.runner import RunRequest, get_runner
    from torchx_nb.sweeps import SweepRequest, start

    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    request = SweepRequest(
        RunRequest(cell="n * 10\n", scheduler="local_cwd", workspace=str(tmp_path)), ["n=3,4"]
    )
    with get_runner() as runner:
        sw = start(runner, request)
        statuses = sw.wait(timeout=60)
        slow = SlowResults(runner)
        view = SweepView(sw, slow, SilentPoller())
        view._display = display = Display()
        told = threading.Thread(
            target=lambda: [view._on_status(i, s, None) for i, s in enumerate(statuses)],
            name="torchx-nb-refresher",
        )
        began = time.monotonic()
        told.start()
        told.join(20)
        try:
            assert not told.is_alive(), "the callback waited for the output store"
            assert time.monotonic() - began < 10
            assert view.ended.is_set() and view.results == [None, None]
        finally:
            slow.let_go.set()
        assert view.snapshotted.wait(60)
        assert view.results == ["30", "40"]
        assert "30" in display.updates[-1] and "40" in display.updates[-1]
