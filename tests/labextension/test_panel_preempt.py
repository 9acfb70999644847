"""A preempted job in the JupyterLab panel, in Debian's Chromium: its row carries the chip
``preempted \u00d72 · attempt 3`` (a times sign), and its view lists each preemption in the
words status uses (when, why, resumed when, from which checkpoint, the work lost). A real
local_cwd cell job preempted twice (``torchx-nb preempt``) is what it shows. Screenshots:
``panel-preempted-row.png``, ``job-view-preempted.png``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.lab import chromium_page, jupyter_lab, screenshot_dir
from tests.labextension.test_panel import open_job_view, open_lab, row, wait_rows
from tests.runner.test_checkpoints import preempted_twice
from torchx_nb.phases import phases_line
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow


def test_a_preempted_job_shows_its_chip_and_each_preemption(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    handle, _ = preempted_twice(tmp_path, name="spot-train")
    with get_runner() as runner:
        said = [line.strip() for line in runner.attempt_lines(handle)[1:]]
        record = runner.jobstore.get(handle)
        assert record is not None
        phases = phases_line(record, attempts=runner.jobstore.attempts(handle))
    assert phases.count("resumed") == 2, phases
    assert len(said) == 2 and "from the checkpoint of" in said[1], said
    root = tmp_path / "lab"
    root.mkdir()
    with jupyter_lab(root) as lab, chromium_page() as page:
        panel = open_lab(page, lab.url, lab.token)
        wait_rows(page, 1)
        chip = row(page, "spot-train").locator(".tnb-attempts")
        assert chip.inner_text() == "preempted \u00d72 · attempt 3"
        panel.screenshot(path=str(screenshot_dir() / "panel-preempted-row.png"))
        view = open_job_view(page, "spot-train", "text.includes('step 24')")
        view.locator(".tnb-preemptions").wait_for(timeout=15_000)
        assert view.locator(".tnb-detail-title .tnb-attempts").inner_text() == (
            "preempted \u00d72 · attempt 3"
        )
        assert view.locator(".tnb-preemptions-head").inner_text() == ("Preemptions (2) — attempt 3")
        assert view.locator(".tnb-preemption").all_inner_texts() == said
        # the run split by its attempts, as status says it (was 'queued 0:00 · ran 0:15')
        assert view.locator(".tnb-fact-phases").inner_text() == phases
        view.screenshot(path=str(screenshot_dir() / "job-view-preempted.png"))
