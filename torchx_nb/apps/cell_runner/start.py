"""How a run starts, from its environment: its output folder, a sweep trial's index and
values (``$TORCHX_NB_PARAMS``, or the point of ``$TORCHX_NB_GRID`` at the array task's
index), the plan's check, and whether it was cancelled before it started."""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any

from . import checkpoint, env_record
from .cancel import watch_cancel
from .common import OWN, rank
from .records import RANK0_RECORDS, record_python


def grid_point(grid: dict[str, Any], index: int) -> dict[str, Any]:
    """Point ``index`` of a grid given as its names and lists (``Grid.spec``): with ``zip``
    the i-th value of each list, else the product's, the last list varying fastest."""
    names, lists = grid["names"], grid["lists"]
    size = len(lists[0]) if grid["zip"] else math.prod(len(values) for values in lists)
    if not 0 <= index < size:
        raise RuntimeError(f"torchx_nb: array task {index} is outside the grid's {size} points")
    if grid["zip"]:
        return {name: lists[j][index] for j, name in enumerate(names)}
    picked = [0] * len(names)
    for j in reversed(range(len(names))):
        index, picked[j] = divmod(index, len(lists[j]))
    return {name: lists[j][picked[j]] for j, name in enumerate(names)}


def trial() -> tuple[int | None, dict[str, Any]]:
    """A sweep trial's index and parameters: ``$TORCHX_NB_PARAMS`` (a JSON object: a trial
    run as its own job), or the point of ``$TORCHX_NB_GRID`` (names and lists) at the index
    the native array gives (``$TORCHX_NB_TRIAL_FROM`` names the variable holding it; AWS
    Batch's child job id ``PARENT:INDEX`` stands in when the index variable is missing)."""
    params = os.environ.get("TORCHX_NB_PARAMS")
    if params:
        return None, json.loads(params)
    grid = os.environ.get("TORCHX_NB_GRID")
    if not grid:
        return None, {}
    raw = os.environ.get(os.environ.get("TORCHX_NB_TRIAL_FROM", ""), "")
    if not raw.isdigit():
        raw = os.environ.get("AWS_BATCH_JOB_ID", "").rpartition(":")[2]
    if not raw.isdigit():
        raise RuntimeError("torchx_nb: this array task has no index: cannot pick its point")
    index = int(raw)
    return index, grid_point(json.loads(grid), index)


def _env_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def start() -> tuple[str, dict[str, Any], bool]:
    """What a cell and a notebook share at the start: this run's output folder (an array
    task: its own, and its own upload target), its sweep values (also as
    ``$TORCHX_PARAM_NAME``), and whether it was cancelled before it started (a trial with a
    cancel mark to look for is watched from then on)."""
    folder = os.environ.get("TORCHX_OUTPUT_DIR") or "torchx-outputs"
    index, params = trial()
    for name, value in params.items():
        os.environ[f"TORCHX_PARAM_{name.upper()}"] = _env_value(value)
    if index is not None:  # one array task: its own folder and upload target
        folder = os.path.join(folder, str(index))
        os.environ["TORCHX_OUTPUT_DIR"] = folder
        url = os.environ.get("TORCHX_NB_OUTPUT_URL")
        if url:
            os.environ["TORCHX_NB_OUTPUT_URL"] = f"{url.rstrip('/')}/{index}/"
    os.makedirs(folder, exist_ok=True)  # the program may write there at once
    record_python(
        os.path.join(folder, OWN)
    )  # the runner started: a missing result is the program's
    if rank() == 0:  # a planned distribution it lacks: one line each
        env_record.check_plan(env_record.planned())
    if watch_cancel(folder):
        return folder, params, True
    # ends the process when the program's failures are already past its max_retries (the
    # last failure's records stay: they are the job's story)
    checkpoint.begin_run(None if index is None else f"trial-{index}")
    clear_records(os.path.join(folder, OWN))
    return folder, params, False


def clear_records(out: str) -> None:
    """What an earlier attempt of this job left in its output folder for this rank (an
    error before a retry, a result before a preemption's rerun) goes: the result and the
    error read back are the attempt that finished."""
    mine = [f"error-{rank()}.pkl", f"error-{rank()}.txt"]
    for name in mine + (list(RANK0_RECORDS) if rank() == 0 else []):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, name))
