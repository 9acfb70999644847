"""A Slurm job's preemptions, from ``sacct --duplicates``: every run of a requeued job, oldest
first, the job's own row and its srun step's (measured on Slurm 22.05, docs/schedulers/slurm.md).

- A run Slurm preempted reads ``PREEMPTED`` — under ``PreemptMode=REQUEUE`` a new run follows
  it (same job id, ``SLURM_RESTART_COUNT`` one higher), under ``CANCEL`` it is the job's last:
  the job ended preempted and Slurm will not run it again (``ended_preempted``).
- A run ended by ``scontrol requeue`` reads ``REQUEUED``: a preemption when its srun step ended
  on the requeue's SIGTERM (killed by a signal, or exit 143/137: a program that saves and ends
  on SIGTERM; Slurm 22.05 shows 143 as ``15:0``) — ``torchx-nb preempt``, an admin's requeue —
  the program's own failure when the step exited non-zero otherwise (the batch script requeues
  those, up to ``max_retries``).
- A cancel reads ``CANCELLED``: never a preemption."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from torchx_nb.schedulers.slurm.exits import _time, exit_pair
from torchx_nb.schedulers.slurm.jobs import Job
from torchx_nb.specs.api import AppState
from torchx_nb.specs.preemption import Preemption

PREEMPTED_WHY = "preempted by a job of higher priority"
REQUEUED_WHY = "requeued (scontrol requeue)"
TORCHX_NB_WHY = "torchx-nb preempt"


@dataclass(frozen=True)
class Run:
    """One run of a job: its own state's first word, when it started and ended, and how its
    srun step (the replica of component 0) ended: (exit code, signal)."""

    state: str
    start: float | None
    end: float | None
    step: tuple[int | None, int | None] | None = None


def parse_runs(text: str) -> dict[str, list[Run]]:
    """Each job's runs, oldest first, keyed by the id sbatch printed (a heterogeneous job by
    its leader's, read from component 0), from ``sacct --duplicates --parsable2`` lines of the
    columns ``exits.COLUMNS`` (JobID, State, ExitCode, DerivedExitCode, End, Timelimit, Start)."""
    out: dict[str, list[Run]] = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < 7:
            continue
        job_id, state, exit_code, end, start = cols[0], cols[1], cols[2], cols[4], cols[6]
        component, _, step = job_id.partition(".")
        key, plus, offset = component.partition("+")
        if plus and offset != "0":
            continue
        runs = out.setdefault(key, [])
        if not step:
            word = (state.split() or ["UNKNOWN"])[0].upper()
            runs.append(Run(word, _time(start), _time(end)))
        elif step == "0" and runs:
            runs[-1] = replace(runs[-1], step=exit_pair(exit_code))
    return out


# a step's exit code that is a SIGTERM's or SIGKILL's (128 + N), also as Slurm 22.05 masks it
_SIGNAL_EXITS = (143, 137, 15, 9)


def _program_failed(run: Run) -> bool:
    """The run's srun step exited non-zero by itself, not on a signal: the program failed."""
    code, signal = run.step or (None, None)
    return bool(code) and not signal and code not in _SIGNAL_EXITS


def preemptions(runs: list[Run], requeued_why: str = REQUEUED_WHY) -> list[Preemption]:
    """The preemptions among a job's runs, each with when the next run started (None while
    it waits, or when none follows)."""
    out = []
    for i, run in enumerate(runs):
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        if run.state == "PREEMPTED":
            why = PREEMPTED_WHY
        elif run.state == "REQUEUED" and not _program_failed(run):
            why = requeued_why
        else:
            continue
        at = run.end or run.start
        if at is None:
            continue
        resumed = nxt.start if nxt is not None and nxt.state != "PENDING" else None
        out.append(Preemption(at=at, why=why, resumed_at=resumed))
    return out


def preempt_mark(app_id: str) -> Any:
    """The private mark ``torchx-nb preempt`` leaves for a Slurm job it requeued."""
    from torchx_nb.schedulers.outputs import cancel_mark

    return cancel_mark("slurm-preempt", app_id)


def add_preemptions(
    out: Mapping[str, Any],
    jobs: Mapping[str, Job],
    runs: dict[str, list[Run]],
    ask: Callable[[list[str], dict[str, list[Run]]], object],
) -> None:
    """Each described job's preemptions, whether it ended preempted (Slurm's CANCEL mode: the
    runner submits it again), and a requeued job's hold in words. ``runs`` holds what sacct
    said of the jobs that ended; a job still in the queue that was requeued is asked of sacct
    here (``ask``: one call for all)."""
    again = [a for a, r in out.items() if r is not None and a not in runs and r.num_restarts]
    if again:
        ask(again, runs)
    for app_id, resp in out.items():
        job = jobs.get(app_id)
        if resp is None or job is None or not job.components:
            continue
        lead = job.components[0]
        why = TORCHX_NB_WHY if preempt_mark(app_id).exists() else REQUEUED_WHY
        resp.preemptions = preemptions(runs.get(app_id, []), why)
        resp.ended_preempted = lead.state_text.split(" ", 1)[0] == "PREEMPTED"
        if resp.ended_preempted and resp.state == AppState.FAILED:
            resp.msg = f"it was {PREEMPTED_WHY} (PreemptMode=CANCEL: Slurm does not requeue it)"
        held = resp.state == AppState.PENDING and lead.reason == "BeginTime" and lead.restarts
        if held and lead.start:
            until = time.strftime("%H:%M:%S", time.localtime(lead.start))
            resp.msg = (
                f"requeued: Slurm holds it until {until} (BeginTime, about 2 minutes after"
                " each requeue), then it starts again"
            )
