"""The sweep's live view (torchx_nb/notebook/sweep_view.py) on real local_cwd trials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class SilentPoller:
    """A poller that reports nothing by itself: the test hands the view each trial's state."""

    def watch(self, handle: str, callback: Any) -> int:
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
        refresher = get_refresher(runner)
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
            after = {t.name for t in threading.enumerate()}
            assert "torchx-nb-sweep" not in after
            assert after - before <= {"torchx-nb-refresher"}
            wait_for(lambda: len(ticks) >= 6, timeout=30)
            assert set(ticks) == {"torchx-nb-refresher"}
        finally:
            for view in views:
                view.close()
        assert not refresher._clocks, "a closed view's clock stops"
