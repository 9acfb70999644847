"""notebooks/spot.ipynb in a real kernel (nbclient), on local_cwd: a cell that trains in steps
with ``torchx_nb.checkpoint()`` is preempted with ``job.preempt()``, resumes from its checkpoint
and ends with the uninterrupted result; ``%torchx status`` tells the preemption (from the
checkpoint of when, the work lost), and with widgets the job's widget carries the chip
``preempted \u00d71 · attempt 2`` (a times sign) and the preemption's line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from tests.notebook.test_quickstart import ROOT, cell_with, execute, text_of

NOTEBOOK = ROOT / "notebooks" / "spot.ipynb"
STORY = re.compile(
    r"preempted at \d\d:\d\d \(torchx-nb preempt\), resumed at \d\d:\d\d from the checkpoint"
    r" of \d\d:\d\d( — \d+ s of work lost)?"
)

pytestmark = pytest.mark.slow


def rich(cell: nbformat.NotebookNode, mime: str) -> str:
    """Every ``mime`` part of the cell's display outputs, joined."""
    return "".join(
        str(o.get("data", {}).get(mime, ""))
        for o in cell.get("outputs", [])
        if o["output_type"] in ("display_data", "execute_result", "update_display_data")
    )


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_spot_notebook(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    assert text_of(cell_with(nb, "job.result()")) == "SUCCEEDED\n20\n"  # as if never preempted
    attempts = text_of(cell_with(nb, 'line.startswith("attempt")')).splitlines()
    assert attempts[0] == "attempt 1, 0 preemptions so far, resuming at step 0"
    resumed = re.fullmatch(r"attempt 2, 1 preemptions so far, resuming at step (\d+)", attempts[1])
    assert resumed and int(resumed[1]) >= 6, attempts  # from its checkpoint, not from 0

    status = rich(cell_with(nb, "%torchx status job"), "text/plain").splitlines()
    at = status.index("Attempts: 2 (1 preemption, 0 failures)")
    assert STORY.fullmatch(status[at + 1].strip()), status
    html = rich(cell_with(nb, "%torchx status job"), "text/html")
    assert '<ul class="torchx-nb-preemptions"' in html and "from the checkpoint of" in html
    phases = rich(cell_with(nb, "job.phases()"), "text/plain")
    assert "held" in phases and "resumed" in phases

    if mode == "widgets":  # the job's widget, replaced by its snapshot at the end
        widget = cell_with(nb, "%%torchx run -o job")
        shown = rich(widget, "text/html")
        assert 'class="torchx-nb-attempts-chip"' in shown, shown
        assert "preempted \u00d71 · attempt 2</span>" in shown
        (line,) = re.findall(r"<li>(.*?)</li>", shown)
        assert STORY.fullmatch(line), line
        plain = rich(widget, "text/plain")
        assert " SUCCEEDED" in plain and "[preempted \u00d71 · attempt 2]" in plain, plain
