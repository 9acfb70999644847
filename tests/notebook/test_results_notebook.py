"""notebooks/results.ipynb in a real kernel (nbclient), on local_cwd: values, pushed variables,
exceptions with the job's traceback, output files downloaded, a multi-rank result and the
one-line refusals; then a new kernel gets a result back from the job store."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.notebook.test_quickstart import ROOT, cell_with, execute, text_of

NOTEBOOK = ROOT / "notebooks" / "results.ipynb"

pytestmark = pytest.mark.slow


def error_of(cell: nbformat.NotebookNode) -> dict[str, object]:
    (err,) = [o for o in cell.outputs if o["output_type"] == "error"]
    return dict(err)


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_results_notebook(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    value = "{'mean': 1.0, 'stdev': 0.158, 'python': (3, "
    ran = text_of(cell_with(nb, "%%torchx run --wait -o job"))
    assert "SUCCEEDED" in ran and f"result: {value}" in ran
    assert text_of(cell_with(nb, "job.result()")).startswith(value)
    assert text_of(cell_with(nb, "%torchx result job")).startswith(value)

    moved = "[Point(x=10, y=20), Point(x=30, y=40), Point(x=50, y=60)]"
    assert text_of(cell_with(nb, "moved.result()")).strip() == moved

    raised = error_of(cell_with(nb, "broken.result()"))
    assert raised["ename"] == "ZeroDivisionError" and raised["evalue"] == "division by zero"
    shown = "\n".join(raised["traceback"])  # type: ignore[arg-type]
    # the job's traceback, with the cell's own line numbers and source, above the kernel's
    assert "RemoteTraceback" in shown
    assert 'File "<cell>", line 4, in <module>' in shown and "ratio(1, 0)" in shown
    assert 'File "<cell>", line 2, in ratio' in shown and "return a / b" in shown
    caught = text_of(cell_with(nb, "except ZeroDivisionError"))
    assert caught == "caught here: ZeroDivisionError division by zero\n"
    if mode == "widgets":  # the widget's snapshot shows the exception at the job's end
        failed = text_of(cell_with(nb, "%%torchx run -o broken"))
        assert "FAILED" in failed and "raised ZeroDivisionError: division by zero" in failed

    files = ["metrics/epoch-0.json", "metrics/epoch-1.json", "metrics/epoch-2.json", "model.bin"]
    assert text_of(cell_with(nb, "writer.result(), writer.outputs()")).startswith(
        "('wrote 4 files',"
    )
    assert all(f in text_of(cell_with(nb, "writer.result(), writer.outputs()")) for f in files)
    (app_id,) = [p.name for p in tmp_path.iterdir() if p.name.startswith("cell-")]
    downloaded = tmp_path / app_id
    assert (
        sorted(p.relative_to(downloaded).as_posix() for p in downloaded.rglob("*") if p.is_file())
        == files
    )
    assert (downloaded / "model.bin").stat().st_size == 1 << 20
    assert '"epoch": 2' in (downloaded / "metrics" / "epoch-2.json").read_text()
    listing = text_of(cell_with(nb, "%torchx outputs writer"))
    assert "model.bin  1048576" in listing

    assert text_of(cell_with(nb, "ranks.result()")).strip() == "'rank 0 of 2'"

    # IPython prints a UsageError as one line on stderr
    assert text_of(cell_with(nb, "%%torchx run --push lock")) == (
        "UsageError: %torchx run: --push: lock (lock) cannot be pickled: cannot pickle"
        " '_thread.lock' object\n"
    )
    assert text_of(cell_with(nb, "--push not_defined_anywhere")) == (
        "UsageError: %torchx run: --push: not_defined_anywhere is not defined in the kernel\n"
    )
    # nothing was submitted for the refused cells: 5 cell jobs in the store
    from torchx_nb.jobstore import JobStore

    _, total = JobStore().page(limit=100)
    assert total == 5

    # a new kernel: the result comes back through the job store
    job_handle = ran.split()[0]
    later = nbformat.v4.new_notebook()
    later.cells = [
        nbformat.v4.new_code_cell("%load_ext torchx_nb"),
        nbformat.v4.new_code_cell(f"%torchx result {job_handle}"),
        nbformat.v4.new_code_cell(
            f"from torchx_nb.notebook.handle import JobHandle\n"
            f"from torchx_nb.runner import Runner\n"
            f"JobHandle({job_handle!r}, Runner('torchx')).result()['stdev']"
        ),
    ]
    later = execute(later, tmp_path)
    assert text_of(later.cells[1]).startswith(value)
    assert text_of(later.cells[2]).strip() == "0.158"


@pytest.mark.parametrize("scheduler", ["local_cwd", "slurm"])
def test_a_cell_imports_its_folders_modules_and_pushes_their_objects(
    scheduler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The notebook's folder holds ``shapes.py``: a ``%%torchx run`` cell imports it, and an
    object of its class travels with ``--push`` (on Slurm, run in place: no job_dir)."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    if scheduler == "slurm":
        request.getfixturevalue("slurm_env")  # the private cluster, as the user's login node
    (tmp_path / "shapes.py").write_text(
        "class Box:\n    def __init__(self, side):\n        self.side = side\n\n"
        "def area(box):\n    return box.side ** 2\n"
    )
    cells = [
        "%load_ext torchx_nb",
        "from shapes import Box\nbox = Box(7)",
        f"%%torchx run -s {scheduler} --wait --push box -o job\nimport shapes\nshapes.area(box)",
        "job.result()",
        f"%%torchx run -s {scheduler} --wait -o quiet\nimport shapes\nprint(shapes.area(shapes.Box(2)))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb = execute(nb, tmp_path)
    ran = text_of(cell_with(nb, "%%torchx run"))
    assert "SUCCEEDED" in ran and "ModuleNotFoundError" not in ran, ran
    assert text_of(cell_with(nb, "job.result()")).strip() == "49"
    assert "result: 49" in ran
    quiet = text_of(cell_with(nb, "-o quiet"))
    assert "SUCCEEDED" in quiet and "4\n" in quiet and "result:" not in quiet, quiet


def test_a_workspace_module_named_like_a_standard_one_shadows_it_as_in_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``statistics.py`` beside the notebook: the kernel imports the standard module (IPython
    puts ``''`` after the standard library), and so must the local_cwd job, whose workspace
    modules still import (``shapes``)."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "statistics.py").write_text("WHERE = 'workspace'\n")
    (tmp_path / "shapes.py").write_text("SIDE = 3\n")
    probe = "import statistics, shapes\n(statistics.__file__, shapes.SIDE)"
    cells = [
        "%load_ext torchx_nb",
        probe,
        f"%%torchx run -s local_cwd --wait -o job\n{probe}",
        "job.result()",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb = execute(nb, tmp_path)
    kernel = text_of(nb.cells[1]).strip()
    assert "statistics.py" in kernel and str(tmp_path) not in kernel, kernel
    assert kernel.endswith(", 3)"), kernel
    assert text_of(cell_with(nb, "job.result()")).strip() == kernel
