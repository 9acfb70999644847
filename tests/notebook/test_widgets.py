from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from torchx_nb.components.cell import cell
from torchx_nb.components.utils import sh
from torchx_nb.notebook.poller import Poller
from torchx_nb.notebook.widgets import (
    LogWidget,
    StatusWidget,
    format_status_text,
    widgets_enabled,
)
from torchx_nb.runner import get_runner
from torchx_nb.specs import AppState


@pytest.fixture
def runner():  # type: ignore[no-untyped-def]
    with get_runner() as r:
        yield r


def test_status_widget_follows_the_job_and_throttles(runner) -> None:  # type: ignore[no-untyped-def]
    handle = runner.run(sh("sleep", "2"), "local_cwd")
    poller = Poller(runner, min_interval=0.01, max_interval=0.05)
    w = StatusWidget(handle, runner, poller)
    wait_for(lambda: w.state == AppState.SUCCEEDED)
    elapsed = 2.5
    assert w.update_count <= 10 * elapsed + 2
    assert "SUCCEEDED" in w._html.value and handle in w._html.value
    assert w._cancel.disabled
    text = w.text()
    assert text.startswith(f"{handle} SUCCEEDED (0:0") and "sh/0: SUCCEEDED" in text
    poller.stop()


def test_status_widget_cancel_button(runner) -> None:  # type: ignore[no-untyped-def]
    handle = runner.run(sh("sleep", "30"), "local_cwd")
    poller = Poller(runner, min_interval=0.05)
    w = StatusWidget(handle, runner, poller)
    wait_for(lambda: w.state == AppState.RUNNING)
    w._cancel.click()
    assert w._cancel.description == "cancelling…"
    wait_for(lambda: w.state == AppState.CANCELLED, timeout=30)
    assert "CANCELLED" in w._html.value
    poller.stop()


def test_status_widget_shows_reconnecting(runner) -> None:  # type: ignore[no-untyped-def]
    handle = runner.run(sh("true"), "local_cwd")
    w = StatusWidget(handle, runner, Poller(runner, min_interval=10))
    w._on_status(None, ConnectionError("no route"))
    assert "reconnecting" in w._html.value
    status = runner.wait(handle, wait_interval=0.1)
    w._on_status(status, None)
    assert "reconnecting" not in w._html.value and "SUCCEEDED" in w._html.value


def test_log_widget_bounded_spooled_filtered_and_switchable(runner) -> None:  # type: ignore[no-untyped-def]
    src = (
        "import sys\n"
        "for i in range(20000):\n"
        "    print(f'out {i}')\n"
        "print('only-on-stderr', file=sys.stderr)\n"
    )
    handle = runner.run(cell(source=src), "local_cwd")
    w = LogWidget(handle, runner, max_lines=500)
    runner.wait(handle, wait_interval=0.1)
    spool = Path(str(w.spool_path))
    wait_for(lambda: spool.read_text().count("\n") == 20001)
    wait_for(lambda: "out 19999" in w._view.value)
    assert len(w.lines) == 500 and w.lines[-1] in ("out 19999", "only-on-stderr")
    assert w.update_count <= 200
    w._filter.value = r"out 1999[0-9]$"
    wait_for(lambda: w._view.value.count("out 1999") == 10)
    w._filter.value = "(unclosed"
    assert "bad regex" in w._filter_error.value
    w._filter.value = ""
    w._stream.value = "stderr"
    wait_for(lambda: list(w.lines) == ["only-on-stderr"])
    w._download.click()
    assert 'download="' in w._link.value and "base64," in w._link.value
    w.close()
    assert not Path(str(w.spool_path)).exists()


def test_text_mode_and_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "0")
    assert not widgets_enabled()
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    assert not widgets_enabled()
    assert (
        format_status_text("local_cwd://torchx/x", None, 75)
        == "local_cwd://torchx/x UNKNOWN (1:15)"
    )


def test_widget_module_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torchx_nb.notebook.widgets, torchx_nb.notebook.poller; "
        "print('ipywidgets' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
    assert time.time() > 0
