"""A webhook that stays down, seen from a real Jupyter kernel (nbclient): the cell that ran
the job gets one line saying the notice is not delivered yet and stays owed, in its own
output (widgets' snapshot or text); no Python warning shows, in it or in a later cell that
happens to run while the notice is given up on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.infra.webhook import webhook_receiver
from tests.notebook.test_kernel_outputs import plain, run
from torchx_nb import notices
from torchx_nb.jobstore import JobStore

pytestmark = pytest.mark.slow


def _with_a_down_webhook(
    monkeypatch: pytest.MonkeyPatch, isolated: Path, job_cell: str, later_cell: str
) -> tuple[Any, Any]:
    """A notebook run in a real kernel whose job-end notice goes to a webhook answering 500
    (3 tries, 1 s apart): ``job_cell`` runs the job, ``later_cell`` runs meanwhile. Returns the
    executed notebook and the receiver (its requests)."""
    with webhook_receiver() as hook:
        hook.fail = True
        monkeypatch.setenv(notices.NOTIFY_ENV, hook.url)
        nb = run(
            [
                "from torchx_nb import notices\nnotices.TRIES = 3\nnotices.BACKOFF_S = 1.0",
                "%load_ext torchx_nb",
                job_cell,
                later_cell,
            ],
            isolated,
            allow_errors=False,
        )
    return nb, hook


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_a_down_webhook_is_one_line_in_the_cell_that_ran_the_job(
    mode: str, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    nb, hook = _with_a_down_webhook(
        monkeypatch,
        isolated,
        "%%torchx run -s local_cwd --wait\nprint('trained')",
        "import time\ntime.sleep(8)\nprint('unrelated')",
    )
    tried = len(hook.requests)
    host = hook.url.split("/")[2]
    line = (
        f"the job-end notice to http://{host}/**** is not delivered yet after 3 tries: the"
        " webhook answered HTTP 500; it stays owed and the next torchx-nb command, kernel or"
        " server sends it"
    )
    job_cell, later = nb.cells[2], nb.cells[3]
    shown = plain(job_cell)
    assert shown.count(line) == 1, shown
    assert "SUCCEEDED" in shown and "T0-SECRET-PATH" not in shown
    if mode == "widgets":
        html = "".join(o.get("data", {}).get("text/html", "") for o in job_cell.outputs)
        assert "is not delivered yet after 3 tries" in html
    assert plain(later) == "unrelated\n", later.outputs
    for cell in nb.cells:
        assert all(o.get("name") != "stderr" for o in cell.outputs), cell.outputs
        assert "Warning" not in plain(cell)
    assert tried == 3
    (handle,) = [j.handle for j in JobStore().list()]
    record = JobStore().notice(handle)
    assert record is not None and record["sent"] is None and record["tries"] == 3
    assert record["error"] == "the webhook answered HTTP 500"


def test_a_down_webhooks_line_comes_with_the_jobs_end_in_text_mode_without_wait(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text mode, no ``--wait``: the cell printed ``SUBMITTED``; when the notice is given up on,
    its line replaced that output with ``SUBMITTED`` still above it — a job-end notice under
    a job that reads as not started. The line now comes with the end it is about, as the job
    store has it (its state and message)."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb, _ = _with_a_down_webhook(
        monkeypatch,
        isolated,
        "%%torchx run -s local_cwd -o j\nraise KeyError('lr')",
        "import time\nj.wait(timeout=60)\ntime.sleep(8)\nprint('unrelated')",
    )
    (shown,) = [o for o in nb.cells[2].outputs if o.get("output_type") == "display_data"]
    text = shown["data"]["text/plain"]
    assert "is not delivered yet after 3 tries" in text, text
    assert "SUBMITTED" not in text, text
    assert "FAILED" in text and "cell/0 exited with code 1" in text, text
