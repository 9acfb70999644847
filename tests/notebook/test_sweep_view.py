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
