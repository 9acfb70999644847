"""Status tells where each preemption's next attempt resumed from, read from the job's own
checkpoint ledger: a real local_cwd cell job preempted twice (``torchx-nb preempt``), the first
time before it kept any checkpoint, the second time seconds after one; ``torchx-nb status``
says "from the start (no checkpoint)" with the whole attempt lost, then "from the checkpoint
of HH:MM" with the time since that checkpoint lost."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.apps.test_checkpoint_jobs import app_dir, combined_log_when_there
from tests.conftest import cli, wait_for
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.runner.checkpoints import LEDGER_BYTES, read_restores
from torchx_nb.specs.preemption import clock, in_words

pytestmark = pytest.mark.slow

# the first attempt keeps no checkpoint; a later one writes step.txt every 8 steps and says
# when (the file's own time: what the ledger says was restored)
TRAIN = """
import os, time
import torchx_nb

ckpt = torchx_nb.checkpoint()
state = ckpt.path / "step.txt"
step = int(state.read_text()) if state.exists() else 0
print(f"attempt {ckpt.attempt} resumes at step {step}", flush=True)
while step < 24:
    step += 1
    time.sleep(0.4)
    if step % 8 == 0 and ckpt.attempt > 1:
        state.write_text(str(step))
        print(f"checkpoint {step} written at {os.stat(state).st_mtime!r}", flush=True)
    print(f"attempt {ckpt.attempt} step {step}", flush=True)
step
"""


def preempted_twice(tmp_path: Path, name: str = "cell") -> tuple[str, Path]:
    """A real local_cwd cell job preempted twice with ``torchx-nb preempt`` (the first time
    before it kept a checkpoint, the second a second and more after one), run to its end: its
    handle and combined log."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    with get_runner() as runner:
        handle = runner.run(cell(source=TRAIN, name=name), "local_cwd", {}, workspace=str(ws))
        log = combined_log_when_there(handle)
        wait_for(lambda: "attempt 1 step 4\n" in log.read_text(), 60)
        assert cli("preempt", handle, "--grace", "5")[0] == 0
        wait_for(lambda: "checkpoint 8 written at" in log.read_text(), 60)
        time.sleep(1.0)  # then the preemption: a second and more of work lost
        code, _, err = cli("preempt", handle, "--grace", "5")
        assert code == 0, err
        wait_for(lambda: "State: SUCCEEDED" in cli("status", handle)[1], 90)
    return handle, log


def test_status_tells_where_each_preemption_resumed_from_and_the_work_lost(
    isolated: Path, tmp_path: Path
) -> None:
    handle, log = preempted_twice(tmp_path)
    with get_runner() as runner:
        attempts = runner.jobstore.attempts(handle)
    text = log.read_text()
    before, _, after = text.partition("attempt 3 resumes at step ")
    # the last checkpoint the second attempt wrote is the one the third resumed from
    step, written_at = re.findall(r"^checkpoint (\d+) written at (\S+)$", before, re.M)[-1]
    assert after.startswith(f"{step}\n")
    written = float(written_at)
    first, second, third = attempts
    assert first.ended and second.started and second.ended and third.started
    # nothing watched the first attempt run: its ledger entry says when it began
    ledger = json.loads((app_dir(handle) / "checkpoints" / "attempts.json").read_text())
    began = first.started or ledger[0]["started"]
    code, out, err = cli("status", handle)
    assert code == 0, err
    lines = out.splitlines()
    at = lines.index("Attempts: 3 (2 preemptions, 0 failures)")
    assert lines[at + 1 : at + 3] == [
        f"  preempted at {clock(first.ended)} (torchx-nb preempt), resumed at"
        f" {clock(second.started)} from the start (no checkpoint) —"
        f" {in_words(first.ended - began)} of work lost",
        f"  preempted at {clock(second.ended)} (torchx-nb preempt), resumed at"
        f" {clock(third.started)} from the checkpoint of {clock(written)} —"
        f" {in_words(second.ended - written)} of work lost",
    ]
    assert second.ended - written >= 1.0  # the steps after it were done again
    # the ledger was found through the output folder: the job left its store's URL there
    ledger = read_restores(f"file://{app_dir(handle) / 'outputs'}")
    assert ledger is not None and [r[1] for r in ledger] == [None, None, pytest.approx(written)]


def test_a_ledger_too_long_or_not_ours_is_not_read(tmp_path: Path) -> None:
    """The ledger is read bounded, from where the job's output folder says: a pointer to a
    scheme of no store, a ledger over ``LEDGER_BYTES`` or not JSON reads as no ledger."""
    out = tmp_path / "outputs"
    (out / ".torchx-nb").mkdir(parents=True)
    store = tmp_path / "ckpt"
    store.mkdir()
    pointer = out / ".torchx-nb" / "checkpoint.json"
    pointer.write_text(f'{{"url": "file://{store}"}}')
    (store / "attempts.json").write_text('[{"started": 5, "restored_at": null}]')
    assert read_restores(f"file://{out}") == [(5.0, None)]
    (store / "attempts.json").write_text("[" + " " * LEDGER_BYTES + "]")
    assert read_restores(f"file://{out}") is None
    (store / "attempts.json").write_text("not json")
    assert read_restores(f"file://{out}") is None
    pointer.write_text('{"url": "http://169.254.169.254/"}')
    assert read_restores(f"file://{out}") is None
