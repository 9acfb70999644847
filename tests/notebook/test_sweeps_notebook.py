"""notebooks/sweeps.ipynb in a real kernel (nbclient), on local_cwd: the grid's trials with
their parameters as variables and env, the results DataFrame, best(), --zip, --max-parallel
with --fail-fast, the Python API with ${name} in a component's arguments, the dry run, the
one-line refusals of bad grids, and Sweep.attach; in widget mode the sweep's snapshot."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.notebook.test_quickstart import ROOT, cell_with, execute, text_of

NOTEBOOK = ROOT / "notebooks" / "sweeps.ipynb"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_sweeps_notebook(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    launched = cell_with(nb, "%%torchx sweep -p lr=0.1,0.01,0.001")
    table = text_of(cell_with(nb, "sw.wait()")).splitlines()
    assert table[0].split() == ["lr", "layers", "state", "loss", "result"]
    assert [line.split()[1:4] for line in table[1:]] == [
        ["0.100", "1", "SUCCEEDED"],
        ["0.100", "2", "SUCCEEDED"],
        ["0.010", "1", "SUCCEEDED"],
        ["0.010", "2", "SUCCEEDED"],
        ["0.001", "1", "SUCCEEDED"],
        ["0.001", "2", "SUCCEEDED"],
    ]
    assert "{'loss': 0.1958, 'env': '0.1'}" in table[1]
    best = text_of(cell_with(nb, "sw.best('loss')")).split()
    assert best[:6] == ["lr", "0.1", "layers", "1", "loss", "0.1958"]
    zipped = text_of(cell_with(nb, "zipped.results()")).split()
    assert zipped[-12:] == [
        "0",
        "1",
        "one",
        "1=one",
        "1",
        "2",
        "two",
        "2=two",
        "2",
        "3",
        "three",
        "3=three",
    ]
    ff = text_of(cell_with(nb, "ff.wait()")).splitlines()
    states = [line.split()[2] for line in ff[1:]]
    # trials 1 and 2 run at once: trial 1 may still be running when trial 2 fails, and
    # --fail-fast then cancels it (under load it often is)
    assert states[1] == "FAILED" and set(states[:1] + states[2:]) <= {
        "NOT_SUBMITTED",
        "SUCCEEDED",
        "CANCELLED",
    }, ff
    assert "raised ValueError: trial with n=2 fails" in ff[2]
    assert text_of(cell_with(nb, "component_args=")).strip() == "['hello!\\n', 'world!\\n']"
    dry = text_of(cell_with(nb, "--dryrun"))
    assert dry.startswith("local_cwd sweep of 4 trials, one job per trial (dryrun; nothing built")
    assert '"TORCHX_PARAM_FLAG": "true"' in dry
    assert text_of(cell_with(nb, "-p lr=0.1, -p 2x=1")) == (
        "UsageError: %torchx sweep: -p lr: an empty value in '0.1,'; list values as lr=V1,V2\n"
    )
    assert text_of(cell_with(nb, "-p lr=0.1 -p lr=0.2")) == (
        "UsageError: %torchx sweep: -p lr is given twice; list all its values in one -p\n"
    )
    assert "6 trials: 6 SUCCEEDED" in text_of(cell_with(nb, "Sweep.attach"))
    shown = "".join(o.get("data", {}).get("text/html", "") for o in launched.outputs if "data" in o)
    if mode == "widgets":
        # the widget became its snapshot: the table and one chart with a line per trial
        assert 'class="torchx-nb-snapshot torchx-nb-sweep-snapshot"' in shown
        assert shown.count('<tr data-trial="') == 6 and shown.count("<polyline") == 6
        assert "6 done · 0 failed · 0 running · 0 waiting" in shown
        assert '<div class="torchx-nb-legend"' in shown
    else:
        assert "one job per trial" in text_of(launched)
