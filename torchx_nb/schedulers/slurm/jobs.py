"""Reading ``squeue --json`` and ``sacct --json`` of every Slurm generation we meet.

Slurm 22.05 writes states as strings (``"RUNNING"``), numbers as plain ints and ignores
``squeue -j``; 23.02 and later write states as lists (``["RUNNING", "COMPLETING"]``) and many
numbers as ``{"set": true, "infinite": false, "number": N}``. Everything here accepts both, so
one parser serves both, and a job's heterogeneous components are grouped under the leader's id
(the id ``sbatch`` printed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from torchx_nb.specs.api import AppState

# Slurm's job states (``squeue --help`` / ``man squeue``), as TorchX maps them.
SLURM_STATES: dict[str, AppState] = {
    "BOOT_FAIL": AppState.FAILED,
    "CANCELLED": AppState.CANCELLED,
    "COMPLETED": AppState.SUCCEEDED,
    "DEADLINE": AppState.FAILED,
    "FAILED": AppState.FAILED,
    "NODE_FAIL": AppState.FAILED,
    "OUT_OF_MEMORY": AppState.FAILED,
    "PENDING": AppState.PENDING,
    "PREEMPTED": AppState.FAILED,
    "RUNNING": AppState.RUNNING,
    "SUSPENDED": AppState.PENDING,
    "TIMEOUT": AppState.FAILED,
    "COMPLETING": AppState.RUNNING,
    "CONFIGURING": AppState.RUNNING,
    "REQUEUED": AppState.PENDING,
    "REQUEUE_FED": AppState.PENDING,
    "REQUEUE_HOLD": AppState.PENDING,
    "RESIZING": AppState.RUNNING,
    "RESV_DEL_HOLD": AppState.PENDING,
    "REVOKED": AppState.FAILED,
    "SIGNALING": AppState.RUNNING,
    "SPECIAL_EXIT": AppState.FAILED,
    "STAGE_OUT": AppState.RUNNING,
    "STOPPED": AppState.RUNNING,
}


def number(value: Any) -> int | None:
    """An int from ``5``, ``"5"`` or ``{"set": true, "number": 5}``; None when unset."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def state_names(value: Any) -> list[str]:
    """Slurm state words from ``"CANCELLED by 0"``, ``["PENDING", "REQUEUED"]`` or
    ``{"current": ...}``."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [str(v).split()[0].upper() for v in value if isinstance(v, str) and v.strip()]


def app_state(value: Any) -> AppState:
    """The AppState of a Slurm state in either generation's form. Flags that ride along with
    the base state (``COMPLETING``, ``REQUEUED``...) come after it; the first known word wins."""
    for name in state_names(value):
        if name in SLURM_STATES:
            return SLURM_STATES[name]
    return AppState.UNKNOWN


def exit_code(value: Any) -> int | None:
    """A process exit code from squeue's raw wait status (22.05: ``768`` is exit 3, ``15`` is
    no exit code but signal 15) or the ``{"status": ..., "return_code": N}`` form of sacct and
    of squeue 23.02+. Only a fallback: sacct's text columns are the truth (``exits.py``)."""
    if isinstance(value, dict):
        if "return_code" in value:
            return number(value.get("return_code"))
        return number(value)
    raw = number(value)
    if raw is None:
        return None
    return None if raw & 0x7F else raw >> 8


def exit_signal(value: Any) -> int | None:
    """The signal of the same forms (22.05: the wait status' low bits; 23.02+:
    ``{"signal": {"id": N}}``); None when not told."""
    if isinstance(value, dict):
        sig = value.get("signal")
        return number(sig.get("id")) if isinstance(sig, dict) else None
    raw = number(value)
    return None if raw is None else raw & 0x7F


@dataclass
class Component:
    """One heterogeneous component (one replica, named ``<role>-<i>``) of a job."""

    job_id: int
    offset: int
    name: str
    state: AppState
    state_text: str
    reason: str = ""
    exit_code: int | None = None
    node: str = ""
    restarts: int = 0
    workdir: str = ""
    start: int | None = None
    end: int | None = None
    submitted: int | None = None
    step_state: AppState | None = None
    signal: int | None = None
    # from sacct's text (exits.py): when its step ended, whether it ran at all, why it ended
    step_end: float | None = None
    ran: bool = True
    ending: str = ""
    next_step: str = ""


@dataclass
class Job:
    """A job as the leader's id and its components, in component order."""

    job_id: int
    components: list[Component] = field(default_factory=list)


def _array_of(raw: dict[str, Any], accounting: bool) -> tuple[int | None, int | None, list[int]]:
    """(array job id, task index, pending task indexes) of a record; Nones for a plain job.
    An array's tasks that have not started are one record: squeue's ``array_task_string``
    (``2-9%2``), sacct's ``array.task`` (22.05: a hex bitmap, ``0xE`` for tasks 1-3)."""
    if accounting:
        array = raw.get("array") or {}
        parent = number(array.get("job_id"))
        if not parent:
            return None, None, []
        task = number(array.get("task_id"))
        return parent, task, [] if task is not None else pending_tasks(array.get("task"))
    parent = number(raw.get("array_job_id"))
    if not parent:
        return None, None, []
    task = number(raw.get("array_task_id"))
    return parent, task, task_range(str(raw.get("array_task_string") or ""))


MAX_TASKS = 100_000  # more than any cluster's MaxArraySize allows


def pending_tasks(value: Any) -> list[int]:
    """The task indexes of sacct's ``array.task``: a hex bitmap (``0xA``: tasks 1 and 3, as
    22.05 writes it) or ranges (``1-3%1``)."""
    text = str(value or "").strip()
    if not text.lower().startswith("0x"):
        return task_range(text)
    try:
        bits = int(text, 16)
    except ValueError:
        return []
    return [i for i in range(min(bits.bit_length(), MAX_TASKS)) if bits >> i & 1]


def task_range(text: str) -> list[int]:
    """The indexes in squeue's ``array_task_string`` (``[2-9%2]``, ``1,4-5``)."""
    out: list[int] = []
    for part in text.strip("[]").split("%", 1)[0].split(","):
        first, _, last = part.partition("-")
        if first.strip().isdigit():
            stop = int(last) if last.strip().isdigit() else int(first)
            out.extend(range(int(first), min(stop, int(first) + MAX_TASKS) + 1))
    return out


def _component(raw: dict[str, Any], accounting: bool) -> tuple[int, Component]:
    job_id = number(raw.get("job_id")) or 0
    if accounting:
        het = raw.get("het") or {}
        leader = number(het.get("job_id")) or job_id
        offset = number(het.get("job_offset")) or 0
        state_raw = (raw.get("state") or {}).get("current")
        reason = str((raw.get("state") or {}).get("reason") or "")
        times = raw.get("time") or {}
        start, end, submitted = (number(times.get(k)) for k in ("start", "end", "submission"))
        workdir = str(raw.get("working_directory") or "")
        step_state = None
        for step in raw.get("steps") or []:
            # 22.05: {"id": 0}; 23.02+: {"id": "41.0"}; the batch step is not a replica
            sid = str((step.get("step") or {}).get("id"))
            if sid == "0" or sid.endswith(".0"):
                step_state = app_state(step.get("state"))
    else:
        leader = number(raw.get("het_job_id")) or job_id
        offset = number(raw.get("het_job_offset")) or 0
        state_raw = raw.get("job_state")
        reason = str(raw.get("state_reason") or "")
        start, end, submitted = (
            number(raw.get(k)) for k in ("start_time", "end_time", "submit_time")
        )
        workdir = str(raw.get("current_working_directory") or "")
        step_state = None
    names = state_names(state_raw)
    node = str(raw.get("nodes") or raw.get("batch_host") or "")
    comp = Component(
        job_id=job_id,
        offset=offset,
        name=str(raw.get("name") or ""),
        state=app_state(state_raw),
        state_text=" ".join(names) or "UNKNOWN",
        reason="" if reason in ("None", "") else reason,
        exit_code=exit_code(raw.get("exit_code")),
        signal=exit_signal(raw.get("exit_code")),
        node=node,
        restarts=number(raw.get("restart_cnt")) or 0,
        workdir=workdir,
        start=start,
        end=end,
        submitted=submitted,
        step_state=step_state,
        # no node was ever given to it: it never ran, though Slurm's start is its cancel time
        # (sacct's text says so too, but it may not have the job yet: slurmdbd lags or is down)
        ran=node not in ("", "None assigned") or app_state(state_raw) == AppState.RUNNING,
    )
    return leader, comp


def parse_jobs(doc: dict[str, Any], accounting: bool = False) -> dict[str, Job]:
    """Jobs of a ``squeue --json`` document (``accounting=False``) or a ``sacct --json`` one,
    keyed by the id ``sbatch`` printed (the leader's), an array's tasks by ``ARRAYID_INDEX``
    (the pending ones too). sacct lists a requeued job once per run; the last run wins."""
    jobs: dict[str, Job] = {}
    for raw in doc.get("jobs") or []:
        if not isinstance(raw, dict):
            continue
        leader, comp = _component(raw, accounting)
        if not leader:
            continue
        parent, task, pending = _array_of(raw, accounting)
        if parent is not None:
            keys = [f"{parent}_{task}"] if task is not None else []
            keys += [f"{parent}_{i}" for i in pending]
            if task is None and pending:
                comp.ran = False  # tasks still in the array's one record never started
        else:
            keys = [str(leader)]
        for key in keys:
            job = jobs.setdefault(key, Job(leader))
            job.components = [c for c in job.components if c.offset != comp.offset]
            job.components.append(comp)
    for job in jobs.values():
        job.components.sort(key=lambda c: c.offset)
    return jobs


def combined_state(states: Iterable[AppState]) -> AppState:
    """The app's state from its replicas': any failure fails it, then cancellation; it has
    succeeded when all have; it runs while any runs."""
    seen = list(states)
    if not seen:
        return AppState.UNKNOWN
    for s in (AppState.FAILED, AppState.CANCELLED):
        if s in seen:
            return s
    if all(s == AppState.SUCCEEDED for s in seen):
        return AppState.SUCCEEDED
    if AppState.RUNNING in seen:
        return AppState.RUNNING
    if AppState.PENDING in seen:
        return AppState.PENDING
    return AppState.UNKNOWN


def errors(doc: dict[str, Any]) -> list[str]:
    """The ``errors`` of a JSON answer as text (22.05: strings or dicts; 23.02+: dicts)."""
    out = []
    for e in doc.get("errors") or []:
        if isinstance(e, dict):
            text = e.get("description") or e.get("error") or ""
            if text:
                out.append(str(text))
        elif e:
            out.append(str(e))
    return out
