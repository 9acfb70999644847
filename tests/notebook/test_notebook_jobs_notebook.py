"""notebooks/notebook-jobs.ipynb executed in a real kernel on local_cwd: a parameterized
notebook comes back executed, a failing one names its cell."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "notebook-jobs.ipynb"

pytestmark = pytest.mark.slow


def test_notebook_jobs_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)
    ran = text_of(cell_with(nb, "%torchx run-notebook report.ipynb"))
    assert "weekly total: 55" in ran and "SUCCEEDED" in ran, ran
    back = text_of(cell_with(nb, "executed = job.notebook()"))
    assert back.startswith("report.executed.ipynb\n"), back
    assert "['injected-parameters'] # Parameters" in back
    assert "{'n': 10, 'total': 55}" in back
    failed = text_of(cell_with(nb, "%torchx run-notebook broken.ipynb"))
    assert "FAILED: notebook/0 raised ZeroDivisionError in cell 2 ('1 / 0  # fails')" in failed
    assert text_of(cell_with(nb, "bad.status().state")) == "FAILED\nZeroDivisionError\n"
