"""``%torchx run-notebook`` and ``torchx_nb.run_notebook(...)`` in a real kernel: the job
runs the notebook beside it, and ``job.notebook()`` brings the executed copy back next to
the original without overwriting anything."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.notebook.test_quickstart import execute, text_of

pytestmark = pytest.mark.slow


def test_a_notebook_job_from_the_magic_and_from_python(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    report = new_notebook(
        cells=[
            new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
            new_code_cell("print('n is', n)"),
        ]
    )
    nbformat.write(report, isolated / "report.ipynb")
    original = (isolated / "report.ipynb").read_bytes()
    driver = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell("%torchx run-notebook report.ipynb -p n=5 --wait -o job"),
            new_code_cell(
                "import nbformat\np = job.notebook()\nprint(p.name)\n"
                "print(nbformat.read(p, 4).cells[2].outputs[0].text, end='')"
            ),
            new_code_cell(
                "import torchx_nb\nj2 = torchx_nb.run_notebook('report.ipynb', {'n': [7, 'x']})\n"
                "print(j2.wait().state)\np2 = j2.notebook()\nprint(p2.name)\n"
                "print(nbformat.read(p2, 4).cells[2].outputs[0].text, end='')"
            ),
            new_code_cell("%torchx run-notebook missing.ipynb"),
            new_code_cell("%torchx run-notebook report.ipynb -p n=1 --push x"),
        ]
    )
    execute(driver, isolated, allow_errors=True)
    ran = text_of(driver.cells[1])
    # the cells' output is in the job's log as it runs, each cell announced
    assert "[torchx_nb] cell 3: print('n is', n)" in ran and "n is 5" in ran, ran
    assert "SUCCEEDED" in ran, ran
    assert text_of(driver.cells[2]) == "report.executed.ipynb\nn is 5\n"
    assert text_of(driver.cells[3]) == ("SUCCEEDED\nreport.executed-2.ipynb\nn is [7, 'x']\n"), (
        text_of(driver.cells[3])
    )
    assert text_of(driver.cells[4]) == (
        "UsageError: %torchx run-notebook: notebook 'missing.ipynb' does not exist\n"
    )
    assert text_of(driver.cells[5]).startswith(
        "UsageError: %torchx run-notebook: unrecognized arguments: --push x"
    ), text_of(driver.cells[5])
    assert (isolated / "report.ipynb").read_bytes() == original  # the job never writes it


def test_a_notebook_sweep_from_the_magic(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    cells = [new_code_cell("k = 0", metadata={"tags": ["parameters"]}), new_code_cell("k * 3")]
    nbformat.write(new_notebook(cells=cells), isolated / "grid.ipynb")
    driver = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell("%torchx sweep --notebook grid.ipynb -p k=1,2 --wait -o sw"),
            new_code_cell(
                "import nbformat\nfrom torchx_nb.notebook.handle import JobHandle\n"
                "for h in sw.handles:\n"
                "    p = JobHandle(h, sw.runner).notebook()\n"
                "    print(nbformat.read(p, 4).cells[2].outputs[0]['data']['text/plain'])"
            ),
            new_code_cell("%torchx sweep -p k=1,2"),
        ]
    )
    execute(driver, isolated, allow_errors=True)
    table = text_of(driver.cells[1])
    assert table.count("SUCCEEDED") >= 2, table
    assert text_of(driver.cells[2]) == "3\n6\n", text_of(driver.cells[2])
    assert text_of(driver.cells[3]).startswith(
        "UsageError: %torchx sweep: a sweep runs a cell: write `%%torchx sweep -p NAME=V1,V2`"
        " above it, or sweep a whole notebook: `%torchx sweep --notebook NB.ipynb -p"
    )
