"""``torchx_nb.checkpoint()`` where a user calls it: in a real kernel (no job around it: a
temporary folder, attempt 1) and in a process a job started (what the cell runner found)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.infra.kernels import execute_in_kernel
from torchx_nb.apps.cell_runner import checkpoint as ck


def test_in_a_kernel_it_is_a_local_folder_of_attempt_one(tmp_path: Path) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell(
                "import torchx_nb, sys\n"
                "ckpt = torchx_nb.checkpoint()\n"
                "(ckpt.path / 'w.txt').write_text('1')\n"
                "(ckpt.attempt, ckpt.preemptions, ckpt.restored_from, ckpt.save(),"
                " ckpt.path == torchx_nb.checkpoint().path,"
                " [m for m in sys.modules if m.split('.')[0] in ('boto3', 'google')])"
            )
        ]
    )
    execute_in_kernel(nb, tmp_path)
    outputs = nb.cells[0].outputs
    assert [o.get("data", {}).get("text/plain") for o in outputs] == [
        "(1, 0, None, None, True, [])"
    ]


def test_a_process_the_job_started_reads_the_runners_findings(tmp_path: Path) -> None:
    """A notebook job's kernel (or any child) sees the attempt the runner began, and its
    ``save()`` uploads a new generation of the rank's folder."""
    store = f"file://{tmp_path / 'store'}"
    folder = tmp_path / "local" / "rank-0"
    folder.mkdir(parents=True)
    env = {
        **os.environ,
        ck.URL_ENV: store,
        ck.BASE_ENV: str(tmp_path / "local"),
        ck.DIR_ENV: str(folder),
        ck.ATTEMPT_ENV: "3",
        ck.PREEMPTIONS_ENV: "2",
        ck.RESTORED_ENV: "1700000000.5",
    }
    code = (
        "import torchx_nb\n"
        "c = torchx_nb.checkpoint()\n"
        "(c.path / 'w.txt').write_text('x')\n"
        "print(c.path, c.attempt, c.preemptions, c.restored_from.isoformat(), c.save())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{folder} 3 2 2023-11-14T22:13:20.500000+00:00 1\n"
    assert (tmp_path / "store" / "rank-0" / "gen-000001" / "w.txt").read_text() == "x"


def test_the_package_attribute_is_the_function_after_the_module_loads() -> None:
    import torchx_nb
    import torchx_nb.job_checkpoint as module

    assert torchx_nb.checkpoint is module.checkpoint
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        _ = torchx_nb.nosuch  # type: ignore[attr-defined]
