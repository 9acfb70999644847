"""notebooks/slurm.ipynb in a real kernel (nbclient) against the private Slurm cluster: a cell as
a job in a job folder, a two-node torchrun cell, the widgets' text and ``%torchx list``."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.slurm import SlurmCluster
from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "slurm.ipynb"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_slurm_notebook(
    mode: str, slurm_env: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_JOB_DIR", str(jobs))
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    work = tmp_path / "nb"
    work.mkdir()
    (work / ".env").write_text("SECRET_TOKEN=never-shipped\n")
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    nb = execute(nbformat.read(work / NOTEBOOK.name, as_version=4), work)

    assert "job_dir" in text_of(cell_with(nb, "%torchx runopts slurm"))
    hello = text_of(cell_with(nb, "-o hello --wait"))
    assert "hello slurm from node 127.0.0." in hello and "SUCCEEDED" in hello
    after = text_of(cell_with(nb, "ddp.wait().state"))
    assert after.startswith("SUCCEEDED\n"), after
    assert after.count("all_reduce sum 3.0") == 2
    assert "rank 0 of 2" in after and "rank 1 of 2" in after
    listing = text_of(cell_with(nb, "%torchx list -s slurm"))
    assert listing.count("SUCCEEDED") >= 2 and "slurm://torchx/" in listing
    folders = sorted(jobs.iterdir())
    assert len(folders) == 2
    for folder in folders:
        names = {p.name for p in folder.iterdir()}
        assert "settings.py" in names and ".env" not in names
    if mode == "widgets":
        outputs = cell_with(nb, "-o ddp").outputs
        status = outputs[0]["data"]
        assert 'data-state="SUCCEEDED"' in status["text/html"]
        assert status["text/plain"].startswith("slurm://torchx/")
