"""One cell, run on every backend, whose value, exception and files must come back to the kernel
the same way (``JobHandle.result``, ``outputs``, ``download``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# a value of a class defined in the cell (cloudpickle carries it by value), a nested file and a
# file at the top of $TORCHX_OUTPUT_DIR
RESULT_CELL = """import collections, os
import tnb_wsmod  # a module of the cell's own workspace (result_workspace writes it)
out = os.environ["TORCHX_OUTPUT_DIR"]
os.makedirs(out + "/ckpt", exist_ok=True)
with open(out + "/ckpt/weights.bin", "wb") as f:
    f.write(bytes(range(256)) * 64)
with open(out + "/metrics.json", "w") as f:
    f.write('{"acc": 0.9}')
Score = collections.namedtuple("Score", "acc rank")
Score(tnb_wsmod.ACC, int(os.environ.get("RANK", "0")))
"""
RAISE_CELL = """from tnb_wsmod import ACC
def check(n):
    raise ValueError(f"bad input {n} (ACC {ACC})")

check(7)
"""
FILES = ["ckpt/weights.bin", "metrics.json"]


def result_workspace(tmp_path: Path) -> Path:
    """The folder RESULT_CELL runs from: it holds the module the cell imports, as a notebook's
    folder holds its helpers."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "tnb_wsmod.py").write_text("ACC = 0.9\n")
    return ws


def assert_round_trip(runner: Any, handle: str, dest: Path, timeout: float = 180) -> None:
    """The value, the file list and the downloaded files of a RESULT_CELL job."""
    from torchx_nb.notebook.handle import JobHandle

    job = JobHandle(handle, runner)
    value = job.result(timeout=timeout)
    assert type(value).__name__ == "Score" and (value.acc, value.rank) == (0.9, 0), value
    assert job.outputs() == FILES
    folder = job.download(dest)
    assert (folder / "ckpt" / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert (folder / "metrics.json").read_text() == '{"acc": 0.9}'
    assert runner.result_repr(handle) == "Score(acc=0.9, rank=0)"


def assert_raises_remotely(runner: Any, handle: str, timeout: float = 180) -> None:
    """A RAISE_CELL job: its ValueError, with the cell's traceback as the cause."""
    from torchx_nb.notebook.handle import JobHandle
    from torchx_nb.results import RemoteTraceback

    with pytest.raises(ValueError, match=r"bad input 7 \(ACC 0\.9\)") as info:
        JobHandle(handle, runner).result(timeout=timeout)
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert 'File "<cell>", line 5, in <module>' in cause.text
    assert 'File "<cell>", line 3, in check' in cause.text
