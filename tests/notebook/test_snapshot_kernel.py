"""The snapshot that replaces a job's widgets when it ends, at the protocol level (a real kernel
through jupyter_client): however the job ends — the widget's Cancel (a comm_msg), a
``%torchx cancel`` in a later cell, or another process (the CLI, as the side panel's server
is) while the user runs other cells — both of the cell's outputs are updated by their display
ids, the log's first, and before the widget's badge shows the end, so a notebook saved as soon
as its user sees the end holds the snapshot, not the live widgets (which a reopened notebook
shows as "model not found")."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SLEEP_JOB = "%%torchx run -o sleeper\nimport time\nprint('sleeping', flush=True)\ntime.sleep(300)\n"


class Kernel:
    """A kernel and a client; ``run`` executes a cell and returns its id and iopub messages."""

    def __init__(self, kc: Any) -> None:
        self.kc = kc

    def run(self, code: str, timeout: float = 180) -> tuple[str, list[dict[str, Any]]]:
        msg_id = self.kc.execute(code)
        msgs = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.kc.get_iopub_msg(timeout=timeout)
            msgs.append(m)
            if (
                m["parent_header"].get("msg_id") == msg_id
                and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle"
            ):
                return msg_id, msgs
        raise AssertionError(f"{code!r} did not finish")

    def until_snapshot(
        self, msgs: list[dict[str, Any]] | None = None, timeout: float = 60
    ) -> list[dict[str, Any]]:
        """``msgs`` and the iopub messages after them up to the snapshot (the status and log
        outputs updated), and those of the 3 s after it (the full snapshot follows)."""
        msgs = list(msgs or [])
        deadline = time.monotonic() + timeout
        while sum(m["msg_type"] == "update_display_data" for m in msgs) < 2:
            assert time.monotonic() < deadline, f"no snapshot: {[m['msg_type'] for m in msgs]}"
            with contextlib.suppress(queue.Empty):
                msgs.append(self.kc.get_iopub_msg(timeout=1))
        drain = time.monotonic() + 3
        while time.monotonic() < drain:
            with contextlib.suppress(queue.Empty):
                msgs.append(self.kc.get_iopub_msg(timeout=0.5))
        return msgs


@pytest.fixture
def kernel(isolated: Path) -> Iterator[Kernel]:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(isolated))
    try:
        k = Kernel(kc)
        k.run("%load_ext torchx_nb")
        yield k
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _submit(kernel: Kernel) -> tuple[list[str], str, list[dict[str, Any]]]:
    """Run the sleeping job's cell; its outputs' display ids, the handle and the messages."""
    _, msgs = kernel.run(SLEEP_JOB)
    shown = [m for m in msgs if m["msg_type"] == "display_data"]
    assert len(shown) == 2, [m["content"] for m in msgs if m["msg_type"] in ("stream", "error")]
    handle = shown[0]["content"]["data"]["text/plain"].split()[0]
    assert handle.startswith("local_cwd://"), handle
    # the job runs: its line shows in the log widget
    deadline = time.monotonic() + 60
    while not any(
        m["msg_type"] == "comm_msg" and "sleeping" in str(m["content"]["data"].get("state"))
        for m in msgs
    ):
        assert time.monotonic() < deadline, "the job's line never showed"
        with contextlib.suppress(queue.Empty):
            msgs.append(kernel.kc.get_iopub_msg(timeout=1))
    return [m["content"]["transient"]["display_id"] for m in shown], handle, msgs


def _assert_snapshot_in_the_cell(msgs: list[dict[str, Any]], displays: list[str]) -> None:
    """The log and then the status output were replaced, by their display ids, before any
    widget state said CANCELLED."""
    updates = [m for m in msgs if m["msg_type"] == "update_display_data"]
    assert len(updates) >= 2, [m["msg_type"] for m in msgs]
    status_id, log_id = displays
    assert [m["content"]["transient"]["display_id"] for m in updates[:2]] == [log_id, status_id]
    log, status = updates[-2:]
    assert [m["content"]["transient"]["display_id"] for m in (log, status)] == displays[::-1]
    assert "torchx-nb-snapshot" in status["content"]["data"]["text/html"]
    assert re.match(r"local_cwd://\S+ CANCELLED", status["content"]["data"]["text/plain"])
    assert 'data-state="CANCELLED"' in status["content"]["data"]["text/html"]
    assert "sleeping" in log["content"]["data"]["text/plain"]
    badges = [
        m
        for m in msgs
        if m["msg_type"] == "comm_msg"
        and 'data-state="CANCELLED"' in str(m["content"]["data"].get("state", {}).get("value"))
    ]
    # the log's output is replaced first, then the status's, then the badge says it
    assert "logs of" in updates[0]["content"]["data"]["text/plain"]
    first_status = msgs.index(updates[1])
    assert all(msgs.index(b) > first_status for b in badges), "the badge showed the end first"


def test_cancel_from_the_widget_snapshots_into_the_cell(kernel: Kernel) -> None:
    displays, _, msgs = _submit(kernel)
    buttons = [
        m["content"]["comm_id"]
        for m in msgs
        if m["msg_type"] == "comm_open"
        and m["content"]["data"]["state"].get("_model_name") == "ButtonModel"
        and m["content"]["data"]["state"].get("description") == "Cancel"
    ]
    assert len(buttons) == 1
    click = kernel.kc.session.msg(
        "comm_msg",
        {"comm_id": buttons[0], "data": {"method": "custom", "content": {"event": "click"}}},
    )
    kernel.kc.shell_channel.send(click)
    _assert_snapshot_in_the_cell(kernel.until_snapshot(), displays)


def test_torchx_cancel_in_a_later_cell_snapshots_into_the_job_cell(kernel: Kernel) -> None:
    displays, handle, _ = _submit(kernel)
    _, msgs = kernel.run(f"%torchx cancel {handle}")
    assert not [m for m in msgs if m["msg_type"] == "error"]
    _assert_snapshot_in_the_cell(kernel.until_snapshot(msgs), displays)


def test_cancel_from_another_process_snapshots_into_the_job_cell(kernel: Kernel) -> None:
    displays, handle, _ = _submit(kernel)
    kernel.run("x = 1")  # the user goes on working: the kernel's last request is another cell
    done = subprocess.run(
        [sys.executable, "-m", "torchx_nb.cli", "cancel", handle],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    _assert_snapshot_in_the_cell(kernel.until_snapshot(), displays)
