"""Interrupting a ``%%torchx sweep`` cell while it submits its trials (a real kernel through
jupyter_client, local_cwd): the trial in flight finishes its submit, every trial submitted is
cancelled, the cell says so in one line (no traceback through the job store) and ``-o sw``
holds the cancelled sweep."""

from __future__ import annotations

import contextlib
import queue
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.notebook.test_snapshot_kernel import Kernel
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow

TRIALS = 40
SWEEP = (
    f"%%torchx sweep -o sw -p i={','.join(map(str, range(TRIALS)))}\nimport time\ntime.sleep(300)\n"
)


def test_interrupting_a_sweep_mid_submit_cancels_the_trials_submitted(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(isolated))
    try:
        kernel = Kernel(kc)
        kernel.run("%load_ext torchx_nb")
        msg_id = kc.execute(SWEEP)
        with get_runner() as runner:
            # interrupt once two trials are in the job store, while the others are submitted
            wait_for(lambda: len(runner.jobstore.list(scheduler="local_cwd")) >= 2, timeout=120)
            km.interrupt_kernel()
            msgs = []
            deadline = time.monotonic() + 120
            while not any(
                m["parent_header"].get("msg_id") == msg_id
                and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle"
                for m in msgs
            ):
                assert time.monotonic() < deadline, [m["msg_type"] for m in msgs]
                with contextlib.suppress(queue.Empty):
                    msgs.append(kc.get_iopub_msg(timeout=1))
            mine = [m for m in msgs if m["parent_header"].get("msg_id") == msg_id]
            assert not [m for m in mine if m["msg_type"] == "error"], [
                "\n".join(m["content"]["traceback"]) for m in mine if m["msg_type"] == "error"
            ]
            text = "".join(m["content"]["text"] for m in mine if m["msg_type"] == "stream")
            records = runner.jobstore.list(scheduler="local_cwd")
            sweep_id = records[0].sweep
            n = len(records)
            assert 2 <= n < TRIALS, n
            assert text == (
                f"interrupted: the {n} trial(s) of {sweep_id} submitted so far were cancelled;"
                " they are in sw\n"
            ), text
            for record in records:
                wait_for(
                    lambda h=record.handle: (
                        (s := runner.status(h)) is not None and s.state.name == "CANCELLED"
                    ),
                    timeout=60,
                )
        _, out = kernel.run("print(sw.id, sum(h is not None for h in sw.handles))")
        printed = "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream")
        assert printed == f"{sweep_id} {n}\n"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
