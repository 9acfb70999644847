"""The panel's durations in real JupyterLab and Chromium: a running job's clock only goes
forward, however often the panel re-renders the rows it read earlier (it re-fills every row on
every event), and an UNKNOWN job's clock stands still."""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path

import pytest

from tests.conftest import shell_app, stored
from tests.infra.lab import chromium_page, jupyter_lab
from tests.labextension.test_panel import open_panel, wait_rows
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow

# every 250 ms: each row's shown duration in seconds; every second, a re-render of the rows
# the model holds (what any job event does)
SAMPLE = """async (ms) => {
    const secs = t => t.split(':').reduce((acc, part) => acc * 60 + Number(part), 0);
    const panel = [...window.jupyterapp.shell.widgets('left')].find(w => w.id === 'torchx-nb-jobs');
    const seen = {};
    const start = Date.now();
    let rendered = 0;
    while (Date.now() - start < ms) {
        document.querySelectorAll('.tnb-job').forEach(li => {
            const name = li.querySelector('.tnb-name').textContent;
            (seen[name] = seen[name] || []).push(secs(li.querySelector('.tnb-duration').textContent));
        });
        if (Date.now() - start > (rendered + 1) * 1000) {
            rendered += 1;
            panel.model.changed.emit(undefined);
        }
        await new Promise(r => setTimeout(r, 250));
    }
    return seen;
}"""


def test_running_durations_only_go_forward_and_an_unknown_jobs_clock_stops(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    runner = get_runner()
    handle = runner.run(shell_app("sleep 300", name="ticking"), "local_cwd", {}, str(isolated))
    now = time.time()
    lost = dataclasses.replace(
        stored("local_cwd://torchx/lost-1", "local_cwd", "lost", "UNKNOWN", age=120),
        updated=now - 60,
        ended=None,
    )
    runner.jobstore.add(lost)
    root = tmp_path / "lab"
    root.mkdir()
    try:
        with jupyter_lab(root) as lab, chromium_page() as page:
            page.goto(f"{lab.url}/lab?token={lab.token}&reset")
            page.wait_for_selector(".jp-LabShell", timeout=60_000)
            open_panel(page)
            wait_rows(page, 2)
            page.wait_for_selector('.tnb-job[data-state="RUNNING"]', timeout=60_000)
            seen = page.evaluate(SAMPLE, 8000)
    finally:
        runner.cancel(handle)
        runner.jobstore.delete(lost.handle)  # nothing to cancel: its scheduler never knew it
    ticking, unknown = seen["ticking"], seen["lost"]
    assert all(b >= a for a, b in itertools.pairwise(ticking)), ticking
    assert ticking[-1] - ticking[0] >= 5, ticking
    # it became UNKNOWN a minute after its submit: that is its duration, and it stays so
    assert len(set(unknown)) == 1 and 59 <= unknown[0] <= 60, unknown
