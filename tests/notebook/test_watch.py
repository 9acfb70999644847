"""``%torchx watch`` after a real kernel restart: a first kernel submits a job and a sweep and
goes away; a second kernel (as after a restart, or another notebook) puts their live widgets
back, or follows them in text, from the job store alone."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.infra.kernels import execute_in_kernel
from tests.notebook.test_quickstart import execute, text_of

pytestmark = pytest.mark.slow

WIDGET = "application/vnd.jupyter.widget-view+json"


def submitted(tmp_path: Path) -> tuple[str, str]:
    """A job (printing as it runs) and a two-trial sweep, submitted from a first kernel that
    then shuts down; their handle and sweep id."""
    first = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(
                "%%torchx run -o job\nimport time\nfor i in range(12):\n"
                "    print(f'tick {i}', flush=True)\n    time.sleep(1)\n'done'"
            ),
            new_code_cell("%%torchx sweep -p n=1,2 -o sw\nimport time\ntime.sleep(10)\nn * 10"),
            new_code_cell("print(job.handle)\nprint(sw.id)"),
        ]
    )
    execute(first, tmp_path)
    handle, sweep_id = text_of(first.cells[-1]).split()
    return handle, sweep_id


def test_watch_after_a_kernel_restart_in_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    handle, sweep_id = submitted(tmp_path)
    second = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(f"%torchx watch {handle}"),
            new_code_cell(f"%torchx watch {sweep_id}"),
            new_code_cell("%torchx watch local_cwd://torchx/never-was-1"),
        ]
    )
    execute_in_kernel(second, tmp_path, timeout=120, allow_errors=True)
    followed = text_of(second.cells[1])
    assert "tick 11" in followed and f"{handle} SUCCEEDED" in followed, followed
    assert "result: 'done'" in followed
    table = text_of(second.cells[2]).rsplit(f"{sweep_id}:", 1)[1]  # the table at the end
    assert table.count("SUCCEEDED") == 2 and "0 running" in table, table
    missing = text_of(second.cells[3])
    assert missing == (
        "UsageError: %torchx watch: unknown app 'local_cwd://torchx/never-was-1': the scheduler"
        " has no record of it (check the handle with `torchx-nb list`)\n"
    ), missing


def test_watch_puts_the_widgets_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In widget mode the job's status and log widgets come back, and so does the sweep's
    view; ``JobHandle(...).watch()`` and ``Sweep.attach(...).watch()`` do the same."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    handle, sweep_id = submitted(tmp_path)
    second = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(f"%torchx watch {handle}"),
            new_code_cell(
                "from torchx_nb.notebook.handle import JobHandle\n"
                "from torchx_nb.runner import get_runner\n"
                f"job = JobHandle({handle!r}, get_runner())\njob.watch()"
            ),
            new_code_cell(
                f"from torchx_nb.sweeps import Sweep\nSweep.attach(get_runner(), {sweep_id!r}).watch()"
            ),
            new_code_cell("job.wait(timeout=60).state.name"),
        ]
    )
    execute(second, tmp_path)
    assert text_of(second.cells[4]).strip() == "'SUCCEEDED'"
    # the live widgets were put back, and became the static snapshot when the job ended
    for i in (1, 2):
        shown = "".join(o.get("data", {}).get("text/html", "") for o in second.cells[i].outputs)
        assert "torchx-nb-snapshot" in shown and handle in shown, (i, second.cells[i].outputs)
        assert "SUCCEEDED" in shown and "tick 11" in str(second.cells[i].outputs)
    swept = str(second.cells[3].outputs)
    assert sweep_id in swept and (WIDGET in swept or swept.count("SUCCEEDED") >= 2), swept
    saved = nbformat.writes(second)
    assert "Traceback" not in saved
