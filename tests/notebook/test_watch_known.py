"""``%torchx watch`` shows what is known at once, in a real kernel: a job another kernel
submitted that has ended comes back as its static snapshot (final state, failure card), one
still running as its state in the job store, never as SUBMITTED; a saved notebook keeps
that."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.notebook.test_quickstart import execute, text_of

pytestmark = pytest.mark.slow


def _outputs(cell: nbformat.NotebookNode) -> str:
    """Every output as the saved notebook holds it: HTML, text, and printed text."""
    return "".join(
        str(o.get("data", {}).get(kind, ""))
        for o in cell.outputs
        for kind in ("text/html", "text/plain")
    ) + "".join(str(o.get("text", "")) for o in cell.outputs)


@pytest.mark.parametrize("mode", ["1", "text"])
def test_watch_shows_the_stored_state_and_an_ended_jobs_snapshot_at_once(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TORCHX_NB_WIDGETS", mode)
    first = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell("%%torchx run -o bad\nprint('step 1', flush=True)\nraise KeyError('lr')"),
            new_code_cell("%%torchx run -o slow\nimport time\ntime.sleep(120)"),
            new_code_cell(
                "import time\nbad.wait(timeout=60)\ndeadline = time.time() + 60\n"
                "while slow.status().state.name != 'RUNNING' and time.time() < deadline:\n"
                "    time.sleep(0.2)\nprint(bad.handle, slow.handle, slow.status().state.name)"
            ),
        ]
    )
    execute(first, tmp_path)
    bad, slow, state = text_of(first.cells[-1]).split()
    assert state == "RUNNING"
    second = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(f"%torchx watch {bad}"),
            new_code_cell(f"%torchx watch {slow}" if mode == "1" else "1"),
            new_code_cell(f"%torchx cancel {slow}"),
        ]
    )
    execute(second, tmp_path)
    saved = nbformat.reads(nbformat.writes(second), as_version=4)
    ended = _outputs(saved.cells[1])
    assert "SUBMITTED" not in ended, ended
    assert "FAILED" in ended and "cell/0 raised KeyError: 'lr' (exit code 1)" in ended, ended
    if mode == "1":
        # the static snapshot is the cell's output already: no kernel needed to read it
        assert "torchx-nb-snapshot" in ended, ended
        running = _outputs(saved.cells[2])
        assert "SUBMITTED" not in running and "RUNNING" in running, running
