"""notebooks/quickstart.ipynb executed in a real Jupyter kernel (nbclient), outputs checked; then
a fresh kernel finds the jobs again through the job store."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.kernels import execute_in_kernel

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"

pytestmark = pytest.mark.slow


def text_of(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}\n")
        else:
            parts.append(out.get("data", {}).get("text/plain", "") + "\n")
    return "".join(parts)


def execute(
    nb: nbformat.NotebookNode, cwd: Path, allow_errors: bool = False
) -> nbformat.NotebookNode:
    """Run ``nb`` in a real python3 kernel started in ``cwd``; with ``allow_errors`` a cell
    that raises keeps its error output and the next cells run."""
    return execute_in_kernel(nb, cwd, allow_errors=allow_errors)


def cell_with(nb: nbformat.NotebookNode, snippet: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.cell_type == "code" and snippet in c.source)


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_quickstart_runs_headless(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    shutil.copy(QUICKSTART, tmp_path / "quickstart.ipynb")
    nb = execute(nbformat.read(tmp_path / "quickstart.ipynb", as_version=4), tmp_path)

    ran = text_of(cell_with(nb, "%%torchx run --wait -o job"))
    assert "hello from local_cwd://torchx/cell-" in ran
    assert "sum of y: 6" in ran
    assert "SUCCEEDED" in ran
    after = text_of(cell_with(nb, "print(job.status().state)"))
    assert after.startswith("SUCCEEDED\nhello from")

    slow = text_of(cell_with(nb, "the kernel is free while"))
    assert "SUCCEEDED\nstep 0\nstep 1\nstep 2\n" in slow

    metrics = text_of(cell_with(nb, "trained.metrics()"))
    assert metrics.startswith("SUCCEEDED\n") and "loss" in metrics and "0.200" in metrics

    dry_cell = cell_with(nb, "--dryrun")
    dry = text_of(dry_cell)
    assert dry.startswith(
        "dry run on local_cwd: nothing built, pushed or submitted\n"
        "program:   a cell of 2 lines, run by the cell runner under torchrun\n"
        "runs:      cell: 2 replicas · "
    ), dry
    assert "--no-python" in dry and "hf_not_shown" not in dry  # the whole request follows
    (shown,) = [
        o["data"]["text/html"] for o in dry_cell.outputs if "text/html" in o.get("data", {})
    ]
    summary, rest = shown.split("<details>", 1)
    assert len(summary.split("</pre>")[0].splitlines()) == 5, summary  # five lines, not 130
    assert "the whole request (" in rest and "--no-python" in rest and "hf_not_shown" not in shown

    assert "CANCELLED" in text_of(cell_with(nb, "%torchx cancel sleeper"))
    assert "hello from a component" in text_of(cell_with(nb, "utils.echo"))

    listing = text_of(cell_with(nb, "%torchx list"))
    assert listing.count("SUCCEEDED") >= 3 and "CANCELLED" in listing

    err = text_of(cell_with(nb, "-s local_cdw"))
    assert err.strip().startswith(
        "UsageError: %torchx run: unknown scheduler 'local_cdw'; did you mean 'local_cwd'?"
        " (available: "
    )
    assert "\n" not in err.strip()
    if mode == "widgets":
        # the job ended while later cells ran: its widgets were replaced by the static snapshot
        outputs = cell_with(nb, "%%torchx run -o slow").outputs
        assert [o["output_type"] for o in outputs] == ["display_data", "display_data"], outputs
        status, logs = (o["data"] for o in outputs)
        assert all("application/vnd.jupyter.widget-view+json" not in d for d in (status, logs))
        assert 'data-state="SUCCEEDED"' in status["text/html"]
        assert "torchx-nb-replicas" in status["text/html"] and "exit 0" in status["text/html"]
        assert "file://" not in status["text/html"] + status["text/plain"]
        assert status["text/plain"].startswith("local_cwd://torchx/slow-")
        assert " SUCCEEDED (elapsed 0:0" in status["text/plain"]
        assert "step 0\nstep 1\nstep 2" in logs["text/html"]
        assert logs["text/plain"].endswith("step 0\nstep 1\nstep 2")


def test_jobs_survive_a_kernel_restart(tmp_path: Path) -> None:
    from nbformat.v4 import new_code_cell, new_notebook

    first = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell("%%torchx run --wait -o job\nprint('before the restart')"),
            new_code_cell("print(job.handle)"),
        ]
    )
    execute(first, tmp_path)
    handle = text_of(first.cells[2]).strip()
    assert handle.startswith("local_cwd://torchx/cell-")

    second = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(
                "df = %torchx list\nprint(df[['handle', 'state']].to_string(index=False))"
            ),
            new_code_cell(f"%torchx status {handle}"),
            new_code_cell(f"%torchx log {handle}"),
        ]
    )
    execute(second, tmp_path)
    assert handle in text_of(second.cells[1]) and "SUCCEEDED" in text_of(second.cells[1])
    assert "State: SUCCEEDED" in text_of(second.cells[2])
    assert text_of(second.cells[3]) == "before the restart\n"
