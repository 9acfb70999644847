from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from torchx_nb.components.cell import cell
from torchx_nb.components.utils import sh
from torchx_nb.notebook.widgets import (
    LogWidget,
    StatusWidget,
    widgets_enabled,
)
from torchx_nb.refresher import Refresher
from torchx_nb.runner import Runner, get_runner
from torchx_nb.specs import AppState


@pytest.fixture
def runner():  # type: ignore[no-untyped-def]
    with get_runner() as r:
        yield r


def test_status_widget_follows_the_job_with_a_replica_table_and_a_clock(  # type: ignore[no-untyped-def]
    runner, tmp_path: Path
) -> None:
    """The job runs until the test lets it end (a file it waits for), so the widget is seen
    RUNNING with its clock ticking however slow the machine is (a job that slept 1.2 s could
    end before the first poll under load, or while its clock was being read)."""
    go = tmp_path / "go"
    handle = runner.run(
        sh("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"), "local_cwd"
    )
    poller = Refresher(runner, local_interval=0.05)
    w = StatusWidget(handle, runner, poller)
    wait_for(lambda: w.state == AppState.RUNNING, 60)
    assert re.search(r"elapsed \d+:\d\d", w._header.value), w._header.value
    assert 'data-state="RUNNING"' in w._header.value
    first = w.seconds()
    time.sleep(1.1)
    assert w.seconds() > first  # the clock ticks while the job runs
    go.touch()
    wait_for(lambda: w.state == AppState.FAILED, 60)
    assert w.status is not None and w.status.ended is not None
    record = runner.jobstore.get(handle)
    end = w.seconds()
    assert abs(end - (w.status.ended - record.submitted)) < 0.01
    assert abs(record.ended - w.status.ended) < 0.01  # %torchx list uses the same end time
    time.sleep(1.2)
    assert w.seconds() == end  # and stops at the job's own end time
    assert w._cancel.disabled
    table = w._body.value
    assert "torchx-nb-replicas" in table and "<td" in table and "exit 3" in table
    assert "file://" not in w._header.value + w._body.value
    text = w.text()
    assert re.match(rf"{re.escape(handle)} FAILED \(elapsed \d+:\d\d", text), text
    assert "  sh/0: FAILED exit 3 on localhost" in text
    assert w.update_count <= 40
    poller.stop()


def test_status_widget_cancel_button(runner) -> None:  # type: ignore[no-untyped-def]
    handle = runner.run(sh("sleep", "30"), "local_cwd")
    poller = Refresher(runner, local_interval=0.05)
    w = StatusWidget(handle, runner, poller)
    wait_for(lambda: w.state == AppState.RUNNING)
    w._cancel.click()
    assert w._cancel.description == "cancelling…"
    wait_for(lambda: w.state == AppState.CANCELLED, timeout=30)
    # the header is drawn after the state is taken (and the job store read): wait for it too
    wait_for(lambda: 'data-state="CANCELLED"' in w._header.value, timeout=10)
    poller.stop()


def test_status_widget_shows_reconnecting(runner) -> None:  # type: ignore[no-untyped-def]
    handle = runner.run(sh("true"), "local_cwd")
    w = StatusWidget(handle, runner, Refresher(runner, local_interval=10))
    w._on_status(None, ConnectionError("no route"))
    assert "reconnecting" in w._header.value

    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    w._on_status(None, Unreadable())  # a backend's error whose message raises: still shown
    assert "reconnecting" in w._header.value
    assert "Unreadable (its message cannot be read)" in w._header.value
    status = runner.wait(handle, wait_interval=0.1)
    w._on_status(status, None)
    assert "reconnecting" not in w._header.value and "SUCCEEDED" in w._header.value


def test_hostile_names_and_messages_are_escaped() -> None:
    from torchx_nb.notebook.render import link_html, status_html, status_text
    from torchx_nb.specs.api import AppStatus, ReplicaStatus, RoleStatus

    evil = "<img src=x onerror=alert(1)>"
    status = AppStatus(
        AppState.FAILED,
        msg=evil,
        ui_url="javascript:alert(1)",
        roles=[RoleStatus(evil, [ReplicaStatus(0, AppState.FAILED, evil, evil, evil)])],
    )
    page = status_html(f"local_cwd://s/{evil}", status, 3)
    assert "<img" not in page and "&lt;img" in page
    assert 'href="javascript' not in page
    assert link_html("file:///tmp/logs").startswith("<small>logs: <code>/tmp/logs</code>")
    assert 'href="https://x/"' in link_html("https://x/")
    assert status_text("local_cwd://s/a", None) == "local_cwd://s/a SUBMITTED"


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
    from torchx_nb.notebook.render import fmt_elapsed

    monkeypatch.setenv("TORCHX_NB_WIDGETS", "0")
    assert not widgets_enabled()
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    assert not widgets_enabled()
    assert [fmt_elapsed(s) for s in (0, 75, 3725, None, -3)] == [
        "0:00",
        "1:15",
        "1:02:05",
        "0:00",
        "0:00",
    ]


def test_widget_module_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torchx_nb.notebook.widgets, torchx_nb.refresher; "
        "print('ipywidgets' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def _readers() -> int:
    import threading

    return sum(1 for t in threading.enumerate() if t.name == "torchx-nb-log" and t.is_alive())


def test_log_widget_says_no_output_yet_and_cancelled_and_stops_its_readers(runner) -> None:  # type: ignore[no-untyped-def]
    before = _readers()
    src = "import time, sys\ntime.sleep(1)\nprint('first line', flush=True)\ntime.sleep(60)\n"
    job = runner.run(cell(source=src), "local_cwd", workspace=None)
    w = LogWidget(job, runner)
    assert "(no output yet)" in w._view.value and w.note == "(no output yet)"
    wait_for(lambda: "first line" in w._view.value)
    assert "no output yet" not in w._view.value
    assert _readers() == before + 1
    for _ in range(5):  # switching stream or replica stops the old reader at once
        w.select(stream="stdout")
        w.select(stream="combined")
    wait_for(lambda: _readers() == before + 1, timeout=5)
    runner.cancel(job)
    status = runner.wait(job, wait_interval=0.1)
    assert status.state == AppState.CANCELLED
    w.job_ended(status)
    wait_for(lambda: "— job CANCELLED —" in w._view.value)
    assert "— job CANCELLED —" in w.html()
    w.close()
    wait_for(lambda: _readers() == before, timeout=5)


def test_closing_a_log_widget_of_a_running_job_stops_its_reader(runner) -> None:  # type: ignore[no-untyped-def]
    before = _readers()
    job = runner.run(sh("sleep", "60"), "local_cwd")
    widgets = [LogWidget(job, runner) for _ in range(4)]
    wait_for(lambda: _readers() == before + 4)
    for w in widgets:
        w.close()
    wait_for(lambda: _readers() == before, timeout=5)
    runner.cancel(job)


def test_metrics_from_hostile_logs_chart_and_frame(runner) -> None:  # type: ignore[no-untyped-def]
    from torchx_nb.metrics import MetricLog, parse_metric
    from torchx_nb.notebook.handle import JobHandle
    from torchx_nb.notebook.render import metrics_svg
    from torchx_nb.specs.api import TorchxNbError

    loss = parse_metric(r"loss=loss[=:] *([-0-9.eE+]+)")
    acc = parse_metric(r"acc=step (?P<step>\d+) acc (?P<value>\S+)")
    for bad in ("loss", "=x", "lo ss=(1)", "loss=no group", "loss=(unclosed"):
        with pytest.raises(TorchxNbError):
            parse_metric(bad)
    src = (
        "for i in range(5):\n"
        "    print(f'loss: {1.0 / (i + 1)}', flush=True)\n"
        "    print(f'step {i * 10} acc {i / 10}')\n"
        "print('loss: nan'); print('loss: inf'); print('loss: 1e999'); print('loss: --')\n"
        "print('x' * 100000 + ' loss: 7')\n"
        "print('<script>loss: 9</script>')\n"
    )
    handle = runner.run(cell(source=src), "local_cwd", workspace=None)
    runner.wait(handle, wait_interval=0.1)
    job = JobHandle(handle, runner, [loss, acc])
    frame = job.metrics()
    assert list(frame.columns) == ["name", "step", "value", "time"]
    got = frame[frame.name == "loss"]["value"].tolist()
    assert got == [1.0, 0.5, 1 / 3, 0.25, 0.2, 9.0]  # nan/inf/junk and the 100 kB line skipped
    assert frame[frame.name == "acc"]["step"].tolist() == [0, 10, 20, 30, 40]
    log = MetricLog([loss, acc]).feed_all(job.logs().splitlines())
    svg = metrics_svg(log.series())
    assert svg.count("<svg") == 2 and svg.count("<polyline") == 2 and "<script" not in svg
    assert 'data-metric="loss"' in svg and "<b>9</b>" in svg


def test_job_view_survives_an_unreachable_scheduler_at_submission(runner) -> None:  # type: ignore[no-untyped-def]
    from torchx_nb.notebook.widgets import JobView

    class Unlucky:
        """A runner (not the one that submitted: it knows the job only from the scheduler),
        whose first two status calls and refreshes fail (the network dropped)."""

        def __init__(self, real) -> None:  # type: ignore[no-untyped-def]
            self.real, self.failures = real, 2

        def status(self, handle):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                raise ConnectionError("endpoint unreachable")
            return self.real.status(handle)

        def refresh(self, handles, record_unknown=False):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                return dict.fromkeys(handles, ConnectionError("endpoint unreachable"))
            return self.real.refresh(handles, record_unknown)

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.real, name)

    handle = runner.run(sh("sh", "-c", "sleep 1; echo done"), "local_cwd")
    unlucky = Unlucky(Runner())
    poller = Refresher(unlucky, local_interval=0.05)
    view = JobView(handle, unlucky, poller)
    assert view.logs is not None and view.logs.replica == ""
    wait_for(lambda: view.logs.replica == "sh/0")  # type: ignore[union-attr]
    wait_for(lambda: view.ended.is_set())
    wait_for(lambda: "done" in view.logs.html())  # type: ignore[union-attr]
    assert view.status.state == AppState.SUCCEEDED
    view.close()
    poller.stop()


def test_progress_bar_and_the_builders_report_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchx_nb.notebook.widgets import ProgressBar
    from torchx_nb.progress import TextProgress, new_progress, progress_to

    shown: list[str] = []
    monkeypatch.setattr(
        "torchx_nb.notebook.widgets.display_with_text", lambda w, text: shown.append(text)
    )
    assert isinstance(new_progress(), TextProgress)
    with progress_to(ProgressBar):
        bar = new_progress()
    assert isinstance(bar, ProgressBar) and isinstance(new_progress(), TextProgress)
    bar(0, 4_000_000, "sha256:layer")
    bar(4_000_000, 4_000_000, "sha256:layer")
    assert shown == ["pushing the image…"]
    assert bar._bar.value == 1.0 and bar._label.value == "sha256:layer 4.0/4.0 MB"
    bar.close()
    assert bar._bar.bar_style == "success" and bar._label.value == "4.0 MB in 1 parts"


def test_sagemaker_metric_definitions_become_metrics() -> None:
    from torchx_nb.metrics import metric_definitions

    specs_ = metric_definitions({"train:loss": "loss=([0-9.]+)"})
    assert [(s.name, s.regex) for s in specs_] == [("train:loss", "loss=([0-9.]+)")]
    listed = metric_definitions([{"Name": "acc", "Regex": "acc: (\\S+)"}])
    assert listed[0].name == "acc"
    assert metric_definitions(None) == []


def test_the_clock_of_an_ended_job_without_a_scheduler_end_time_stops_when_seen_ended() -> None:
    from torchx_nb.notebook.render import elapsed
    from torchx_nb.specs.api import AppStatus

    ended = AppStatus(AppState.SUCCEEDED)
    assert elapsed(100.0, ended, seen_end=130.0) == 30.0
    assert elapsed(100.0, AppStatus(AppState.SUCCEEDED, ended=120.0), seen_end=130.0) == 20.0
    assert elapsed(time.time() - 5, AppStatus(AppState.RUNNING)) >= 5.0


def test_the_clock_of_an_unknown_job_stops() -> None:
    from torchx_nb.notebook.render import elapsed
    from torchx_nb.specs.api import AppStatus

    unknown = AppStatus(AppState.UNKNOWN)
    assert elapsed(100.0, unknown, seen_end=130.0) == 30.0
    assert elapsed(time.time() - 5, AppStatus(AppState.UNKNOWN), seen_end=None) >= 5.0
