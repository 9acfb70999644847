"""``job.preempt()`` in a real kernel (nbclient): a running local_cwd cell job is preempted,
runs again from its checkpoint (a file) under the same handle, and its phases say so; a job
that is not running cannot be preempted (one line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebook.test_kernel_outputs import plain, run

pytestmark = pytest.mark.slow


def test_job_preempt_runs_the_cell_again_from_its_checkpoint(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb = run(
        [
            "%load_ext torchx_nb",
            "%%torchx run -o job\n"
            "import os, time\n"
            "if os.path.exists('ck'):\n"
            "    print('resumed from the checkpoint', flush=True)\n"
            "else:\n"
            "    open('ck', 'w').close()\n"
            "    time.sleep(120)\n",
            "import os, time\n"
            "while not (os.path.exists('ck') and job.status().state.name == 'RUNNING'):\n"
            "    time.sleep(0.2)\n"
            "job.preempt(grace=2)\n"
            "print(job.wait(interval=0.2).state.name)\n"
            "print(list(job.phases()['phase']))",
            "job.preempt()",
        ],
        isolated,
    )
    assert plain(nb.cells[2]) == "SUCCEEDED\n['queued', 'running', 'held', 'resumed']\n"
    (error,) = [o for o in nb.cells[3].outputs if o["output_type"] == "error"]
    assert error["ename"] == "NotPreemptible"
    assert error["evalue"].endswith(
        "is SUCCEEDED, not running: only a running job can be preempted"
    )
