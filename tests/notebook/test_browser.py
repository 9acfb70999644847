"""The widgets as a user sees them: JupyterLab 4 in Debian's headless Chromium (Playwright).

One notebook runs a job that prints metrics and many lines and a job that sleeps. The test
checks, in the DOM: the status reaches SUCCEEDED by itself within a second of the job's end,
the elapsed clock ticks, the log view shows the newest line and stays put once scrolled up, the
metric chart draws, Cancel cancels (the notebook saved the moment the end shows holds the
snapshot); then the notebook is saved, closed, its kernel shut down, and the reopened notebook
shows the static snapshots instead of widget errors. Screenshots go to ``test-screenshots/``
(``$TORCHX_NB_SCREENSHOTS``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.infra.fixtures import missing
from tests.infra.lab import NotebookPage, chromium_page, jupyter_lab, lab_missing, write_notebook
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow

METRIC_JOB = (
    "%%torchx run -o job --metric 'loss=loss: ([0-9.]+)'\n"
    "import time\n"
    "for i in range(160):\n"
    "    print(f'line {i} loss: {1 / (i + 1):.4f}', flush=True)\n"
    "    time.sleep(0.03)\n"
    "{'lines': i + 1}\n"
)
SLEEP_JOB = "%%torchx run -o sleeper\nimport time\nprint('sleeping', flush=True)\ntime.sleep(300)\n"

# Records, in the page, when each job's badge first showed a state (Date.now(), ms).
OBSERVER = """() => {
    window.__states = {};
    const seen = () => {
        document.querySelectorAll('.jp-Cell').forEach((cell, i) => {
            cell.querySelectorAll('.torchx-nb-state').forEach(el => {
                const key = i + ':' + el.dataset.state;
                if (!(key in window.__states)) window.__states[key] = Date.now();
            });
        });
    };
    new MutationObserver(seen).observe(document.body, {subtree: true, childList: true,
        characterData: true});
    seen();
}"""


@pytest.fixture
def lab_parts() -> None:
    reason = lab_missing()
    if reason:
        missing(reason)


def _state_time(page: Any, cell: int, state: str, timeout: float = 60) -> float:
    page.wait_for_function(
        f"() => window.__states && ('{cell}:{state}' in window.__states)", timeout=timeout * 1000
    )
    return float(page.evaluate(f"() => window.__states['{cell}:{state}']")) / 1000


def test_widgets_live_in_jupyterlab_and_snapshots_after_reopening(
    lab_parts: None, tmp_path: Path, isolated: Path
) -> None:
    root = tmp_path / "lab"
    root.mkdir()
    write_notebook(root / "jobs.ipynb", ["%load_ext torchx_nb", METRIC_JOB, SLEEP_JOB])
    with jupyter_lab(root, env={"TORCHX_NB_WIDGETS": "auto"}) as lab, chromium_page() as page:
        nb = NotebookPage(page, lab, "jobs.ipynb").open()
        page.evaluate(OBSERVER)
        nb.run_all()
        job_out = nb.outputs(1)
        sleep_out = nb.outputs(2)

        # the log view follows the tail while lines arrive
        view = job_out.locator(".torchx-nb-logview").first
        view.wait_for(timeout=60_000)
        page.wait_for_function(
            """() => { const v = document.querySelector('.torchx-nb-logview');
                       return v && v.scrollHeight > v.clientHeight + 50; }""",
            timeout=30_000,
        )
        at_bottom = view.evaluate(
            """v => { const pre = v.querySelector('pre').textContent.split('\\n');
                      const last = pre[pre.length - 1];
                      return [v.scrollTop, last]; }"""
        )
        assert at_bottom[0] == 0 and at_bottom[1].startswith("line "), at_bottom
        newest = view.evaluate(
            """v => { const r = v.getBoundingClientRect();
                      const lines = v.querySelector('pre');
                      const pr = lines.getBoundingClientRect();
                      return pr.bottom <= r.bottom + 1 && pr.bottom >= r.bottom - 30; }"""
        )
        assert newest, "the newest line is not at the bottom of the log view"
        nb.screenshot("notebook-running")
        # scrolled up, the view stays on the same lines while new ones arrive
        view.evaluate("v => { v.scrollTop = -120; }")
        before = view.evaluate("v => v.scrollHeight - v.clientHeight + v.scrollTop")
        time.sleep(0.8)
        after = view.evaluate("v => v.scrollHeight - v.clientHeight + v.scrollTop")
        grown = view.evaluate("v => v.scrollTop")
        assert grown < -120 or after == before  # content grew below the reader, who stayed
        assert abs(after - before) <= 40, (before, after)

        # a live metric chart
        page.wait_for_function(
            """() => { const p = document.querySelector('.torchx-nb-metric polyline');
                       return p && p.getAttribute('points').split(' ').length >= 3; }""",
            timeout=30_000,
        )

        # SUCCEEDED shows by itself within a second of the job's end (as the scheduler says)
        shown = _state_time(page, 1, "SUCCEEDED")
        handle = job_out.locator("code").first.inner_text()
        with get_runner() as runner:
            status = runner.status(handle)
        assert status is not None and status.ended is not None
        delay = shown - status.ended
        assert -0.1 <= delay <= 1.0, f"SUCCEEDED shown {delay:.2f}s after the job ended"

        # the snapshot replaced the widgets: final state, table, chart, last lines
        snapshot = job_out.locator(".torchx-nb-snapshot")
        snapshot.wait_for(timeout=15_000)
        assert snapshot.locator(".torchx-nb-replicas td").count() >= 6
        assert snapshot.locator(".torchx-nb-metric polyline").count() == 1
        assert snapshot.locator(".torchx-nb-result").inner_text() == "result: {'lines': 160}"
        page.wait_for_function(
            "() => [...document.querySelectorAll('pre.torchx-nb-log')]"
            ".some(p => p.textContent.includes('line 159 loss'))",
            timeout=15_000,
        )

        # the sleeper's clock ticks, then Cancel cancels it
        clock = sleep_out.locator(".torchx-nb-elapsed").first
        clock.wait_for(timeout=30_000)
        first = clock.inner_text()
        time.sleep(2.2)
        assert clock.inner_text() != first and clock.inner_text().startswith("elapsed ")
        sleep_out.get_by_role("button", name="Cancel").click()
        _state_time(page, 2, "CANCELLED", timeout=30)
        # saved the moment the end shows: the file holds the snapshot, not the live widgets
        nb.save()
        saved = json.loads((root / "jobs.ipynb").read_text())["cells"][2]["outputs"]
        assert [list(o["data"]) for o in saved] == [["text/html", "text/plain"]] * 2, saved
        assert " CANCELLED " in "".join(saved[0]["data"]["text/plain"])
        page.wait_for_function(
            "() => [...document.querySelectorAll('pre.torchx-nb-log')]"
            ".some(n => n.textContent.includes('— job CANCELLED —'))",
            timeout=15_000,
        )
        sleep_out.locator(".torchx-nb-snapshot").wait_for(timeout=15_000)
        nb.screenshot("notebook-finished")
        time.sleep(2)  # the full snapshot (result, last lines) follows the first
        nb.save()
        nb.command("application:close")
        page.wait_for_function("() => !document.querySelector('.jp-NotebookPanel')")

        # closed, its kernel shut down, reopened: the snapshots, not "model not found"
        for kernel in lab.api("GET", "/api/kernels"):
            lab.api("DELETE", f"/api/kernels/{kernel['id']}")
        for session in lab.api("GET", "/api/sessions"):
            lab.api("DELETE", f"/api/sessions/{session['id']}")
        page.goto("about:blank")
        page.goto(lab.notebook_url("jobs.ipynb"))
        page.wait_for_selector(".jp-NotebookPanel .torchx-nb-snapshot", timeout=60_000)
        time.sleep(2)
        text = page.locator(".jp-NotebookPanel").inner_text()
        assert "Error displaying widget" not in text and "model not found" not in text
        assert page.locator(".jp-NotebookPanel .torchx-nb-snapshot").count() == 2
        states = page.locator(".jp-NotebookPanel .torchx-nb-snapshot .torchx-nb-state")
        assert sorted(states.all_inner_texts()) == ["CANCELLED", "SUCCEEDED"]
        assert page.locator(".jp-NotebookPanel .torchx-nb-metric svg").count() == 1
        # the snapshot's log box starts at its newest line
        box = page.locator(".jp-NotebookPanel pre.torchx-nb-log").first.locator("xpath=..")
        layout = box.evaluate(
            "b => [b.scrollTop, b.scrollHeight, b.clientHeight, getComputedStyle(b).flexDirection,"
            " b.outerHTML.slice(0, 160)]"
        )
        assert layout[0] == 0 and layout[1] > layout[2], layout
        assert (
            "line 159 loss"
            in page.locator(".jp-NotebookPanel pre.torchx-nb-log").first.inner_text()
        )
        nb.screenshot("notebook-reopened")


# each trial prints its losses, then waits for the test to let it end (the file GATE): the
# live widget is looked at while every trial runs, however slow the machine (trials that
# ended by themselves after 3 s turned the widget into its snapshot while it was checked)
SWEEP_JOB = (
    "%%torchx sweep -o sw -p lr=0.5,0.25,0.125 -p depth=1,2 --metric 'loss=loss: ([0-9.]+)'\n"
    "import os, time\n"
    "loss = 1.0\n"
    "for step in range(12):\n"
    "    loss *= 1 - lr / 2\n"
    "    print(f'step {step} loss: {loss + depth / 100:.4f}', flush=True)\n"
    "    time.sleep(0.05)\n"
    "while not os.path.exists(GATE):\n"
    "    time.sleep(0.1)\n"
    "{'loss': round(loss, 4)}\n"
)


def test_sweep_widget_live_and_its_charts_follow_the_dark_theme(
    lab_parts: None, tmp_path: Path, isolated: Path, request: pytest.FixtureRequest
) -> None:
    """The sweep widget in JupyterLab: a row per trial updating by itself, one chart per
    metric with a line per trial, labelled axes and a legend, a click on a trial's row shows
    its log; in the dark theme the charts draw in the theme's text colour on no white box."""
    root = tmp_path / "lab"
    root.mkdir()
    gate = tmp_path / "trials-may-end"
    job = SWEEP_JOB.replace("GATE", repr(str(gate)))
    request.addfinalizer(gate.touch)  # no trial is left waiting if the test fails
    write_notebook(root / "sweep.ipynb", ["%load_ext torchx_nb", job])
    with jupyter_lab(root, env={"TORCHX_NB_WIDGETS": "auto"}) as lab, chromium_page() as page:
        nb = NotebookPage(page, lab, "sweep.ipynb").open()
        page.evaluate(
            "async () => { await window.jupyterapp.commands.execute('apputils:change-theme',"
            " {theme: 'JupyterLab Dark'}); }"
        )
        page.wait_for_function(
            "() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000
        )
        nb.run_all()
        out = nb.outputs(1)
        view = out.locator(".torchx-nb-sweep-view")
        view.wait_for(timeout=60_000)
        rows = view.locator("table.torchx-nb-sweep tbody tr")
        page.wait_for_function(
            "() => [...document.querySelectorAll('table.torchx-nb-sweep tbody tr')]"
            ".some(r => r.dataset.state === 'RUNNING')",
            timeout=30_000,
        )
        assert rows.count() == 6
        assert rows.first.locator("td").nth(1).inner_text() == "0.5"
        # every trial's 12 points drawn: the charts change no more while the trials wait (a
        # chart redrawn under the check was read detached, with no computed colour)
        page.wait_for_function(
            "() => { const lines = document.querySelectorAll('.torchx-nb-sweep-view polyline');"
            " return lines.length === 6 && [...lines].every("
            "l => l.getAttribute('points').trim().split(/\\s+/).length === 12); }",
            timeout=60_000,
        )
        chart = view.locator("svg.torchx-nb-chart").first
        labels = chart.locator("text").all_text_contents()
        assert "step" in labels and "loss" in labels and len(labels) > 6, labels
        legend = view.locator(".torchx-nb-legend").first.inner_text()
        assert "0: lr=0.5, depth=1" in legend and "5: lr=0.125, depth=2" in legend
        # the charts take the theme's text colour and have no white ground
        colours = chart.evaluate(
            "s => [getComputedStyle(s).color, getComputedStyle(s).backgroundColor]"
        )
        assert colours[0] != "rgb(0, 0, 0)" and colours[1] in ("rgba(0, 0, 0, 0)", "transparent")
        # a click on a trial's row shows its log
        view.locator(".torchx-nb-sweep-trials select").select_option(
            label=view.locator(".torchx-nb-sweep-trials option").nth(3).inner_text()
        )
        log = view.locator(".torchx-nb-logview")
        log.wait_for(timeout=30_000)
        page.wait_for_function(
            "() => /step \\d+ loss/.test(document.querySelector('.torchx-nb-logview').textContent)",
            timeout=30_000,
        )
        nb.screenshot("sweep-running-dark")
        assert not out.locator(".torchx-nb-sweep-snapshot").count()  # all still running
        gate.touch()
        # every trial ends: the snapshot with the final table and charts
        out.locator(".torchx-nb-sweep-snapshot").wait_for(timeout=90_000)
        snap = out.locator(".torchx-nb-sweep-snapshot")
        assert snap.locator("tbody tr[data-state='SUCCEEDED']").count() == 6
        assert "6 done · 0 failed" in snap.inner_text()
        assert snap.locator("polyline").count() == 6
        nb.screenshot("sweep-finished-dark")
