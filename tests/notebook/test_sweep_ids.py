"""``%torchx cancel`` and ``%torchx watch`` of a sweep in a real kernel (nbclient): by a
variable holding its id, as its help says ("a handle, a sweep's id (sweep-...) or a variable holding
either")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.notebook.test_quickstart import cell_with, execute, text_of

pytestmark = pytest.mark.slow


def test_a_variable_holding_a_sweeps_id_cancels_the_sweep(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep id kept in a variable (``sid = sw.id``, or copied from the sweep line into a
    string) cancels every trial; it was taken for a job handle ('malformed app handle')."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(
                "%%torchx sweep -s local_cwd -o sw -p i=1,2\nimport time\ntime.sleep(300)\n"
            ),
            new_code_cell("sid = sw.id"),
            new_code_cell("%torchx cancel sid"),
            new_code_cell("print(sorted({s.state.name for s in sw.wait(timeout=60)}))"),
        ]
    )
    nb = execute(nb, isolated, allow_errors=True)
    said = text_of(cell_with(nb, "%torchx cancel sid"))
    sweep_id = re.search(r"sweep-[a-z0-9]+", text_of(cell_with(nb, "%%torchx sweep")))
    assert sweep_id is not None
    assert said == f"cancel requested for the trials of {sweep_id.group()}\n"
    assert text_of(cell_with(nb, "sw.wait")) == "['CANCELLED']\n"


def test_a_variable_holding_a_sweeps_id_watches_the_sweep(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%torchx watch sid`` follows the sweep as ``%torchx watch sweep-…`` does; a variable
    holding the id was taken for a job handle ('malformed app handle')."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell("%%torchx sweep -s local_cwd -o sw -p i=1,2\nprint('trial', i)\n"),
            new_code_cell("sid = sw.id"),
            new_code_cell("%torchx watch sid"),
        ]
    )
    nb = execute(nb, isolated, allow_errors=True)
    sweep_id = re.search(r"sweep-[a-z0-9]+", text_of(cell_with(nb, "%%torchx sweep")))
    assert sweep_id is not None
    watched = text_of(cell_with(nb, "%torchx watch sid"))
    assert "Error" not in watched, watched
    last = [line for line in watched.splitlines() if line.startswith("sweep-")][-1]
    assert (
        last
        == f"{sweep_id.group()}: 2 trials, one job per trial: 2 done · 0 failed · 0 running · 0 waiting"
    )
