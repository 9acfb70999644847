"""How each replica of a Slurm job ended, from ``sacct --parsable2``'s text columns.

Slurm 22.05's ``sacct --json`` says ``exit_code {"status": "SUCCESS", "return_code": 0}`` for a
job whose step ran ``exit 3``; the ``ExitCode`` column says ``3:0`` (code:signal), as ``sacct``
users read it. So exit codes and signals come from the text, keyed by the id sacct prints: a
plain job ``41``, a heterogeneous component ``41+1``, an array task ``41_3``; their steps
``41+1.batch`` and ``41+1.0`` (our srun: one step per component)."""

from __future__ import annotations

import pwd
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from signal import SIGTERM

from torchx_nb.schedulers.slurm.jobs import Component, Job, app_state, task_range
from torchx_nb.specs.api import AppState, is_terminal

# the columns asked for, in order (Start: for each run's start, preemptions.py)
COLUMNS = ("JobID", "State", "ExitCode", "DerivedExitCode", "End", "Timelimit", "Start")


@dataclass(frozen=True)
class Row:
    state: str  # "FAILED", "CANCELLED by 1000", "TIMEOUT"
    code: int | None
    signal: int | None
    end: float | None
    timelimit: str
    derived: int | None = None  # DerivedExitCode's code: the highest of the component's steps


@dataclass(frozen=True)
class Ending:
    """One component's end: its replica's exit code and signal (from its srun step where it
    ran one), whether it ran at all, when it ended, and why in words."""

    code: int | None
    signal: int | None
    ran: bool
    end: float | None
    state: str
    ending: str = ""
    next_step: str = ""


def exit_pair(text: str) -> tuple[int | None, int | None]:
    """``"3:0"`` → (3, 0); ``"0:11"`` → (0, 11); anything else → (None, None)."""
    code, sep, sig = text.strip().partition(":")
    if not sep or not code.isdigit() or not sig.isdigit():
        return None, None
    return int(code), int(sig)


def _time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:  # "Unknown", "None"
        return None


def parse_rows(text: str) -> dict[str, dict[str, Row]]:
    """sacct's lines, by component id, then by step (``""`` for the component's own row,
    ``"batch"``, ``"0"``). With ``--duplicates`` (a requeued job's every run, oldest first) a
    component's own row starts its run afresh: the last run's rows are kept."""
    out: dict[str, dict[str, Row]] = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < 6:
            continue
        job_id, state, exit_code, derived, end, limit = cols[:6]
        component, _, step = job_id.partition(".")
        code, sig = exit_pair(exit_code)
        high = exit_pair(derived)[0]
        if not step:
            out[component] = {}
        out.setdefault(component, {})[step] = Row(state.strip(), code, sig, _time(end), limit, high)
    return out


def unmasked(code: int | None, signal: int | None, derived: int | None) -> int | None:
    """The exit code a program gave: Slurm 22.05 keeps only the low 7 bits of a step's code
    of 128 or more in ``ExitCode`` (``exit 200`` is ``72:0``, ``exit 255`` is ``127:0``, read
    as "command not found"), while the component's ``DerivedExitCode`` (the highest of its
    steps) keeps ``200:0``; so a derived code that is ours plus 128 is the true one."""
    if code is None or signal or derived is None or derived < 128:
        return code
    return derived if derived - 128 == code else code


def _who(state: str) -> str:
    """``"CANCELLED by 1000"`` → ``"by alice (uid 1000)"``; ``""`` when sacct names nobody."""
    _, _, uid = state.partition(" by ")
    if not uid.strip().isdigit():
        return ""
    try:
        name = pwd.getpwuid(int(uid)).pw_name
    except (KeyError, OverflowError):
        return f"by uid {uid.strip()}"
    return f"by {name} (uid {uid.strip()})"


def ending_of(rows: dict[str, Row], component: str = "") -> Ending | None:
    """The end of one component (sacct's id for it: ``41``, ``41+1``, ``41_3``) from its
    rows; None when sacct has no row for it yet."""
    own = rows.get("")
    if own is None:
        return None
    step = rows.get("0")
    ran = "batch" in rows or step is not None
    word = own.state.split(" ", 1)[0].upper()
    code, sig = (step.code, step.signal) if step is not None else (own.code, own.signal)
    code = unmasked(code, sig, own.derived)
    if not ran:
        code = sig = None
    end = step.end if step is not None and step.end is not None else own.end
    why, next_step = _why(word, own, rows, component, ran)
    return Ending(code, sig, ran, end, own.state, why, next_step)


# the ends sacct names that need no more than their word to be told
_ENDS = {
    "DEADLINE": "missed its deadline (--deadline)",
    "PREEMPTED": "was preempted by a job of higher priority",
    "BOOT_FAIL": "could not start: its node failed to boot",
}


def _why(word: str, own: Row, rows: dict[str, Row], component: str, ran: bool) -> tuple[str, str]:
    """Why a component ended, in words, and the next step ('' for an end that says nothing
    more than its code)."""
    if word == "TIMEOUT":
        limit = own.timelimit.strip()
        said = f" of {limit}" if limit and limit not in ("UNLIMITED", "Partition_Limit") else ""
        return (
            f"was stopped at its time limit{said}",
            "raise the limit with -cfg time=MINUTES (or D-HH:MM:SS), up to the partition's"
            " MaxTime (`sinfo -o '%P %l'`)",
        )
    if word == "CANCELLED":
        said = f"was cancelled {_who(own.state)}".rstrip()
        return said + ("" if ran else " before it started"), ""
    if word == "FAILED" and "0" not in rows and "batch" in rows:
        # the batch script stopped before its srun (a job folder it could not make: quota,
        # a full disk): the program never ran, and only the script's own log says why
        log = f"slurm-{component.partition('+')[0]}.out" if component else "slurm-ID.out"
        return (
            "failed before its program started: the job's batch script stopped",
            f"read why in {log}, the batch script's log, in the job's folder",
        )
    if word == "NODE_FAIL":
        return "was ended by a node failure", "run it again; `sinfo -R` shows why nodes are down"
    return _ENDS.get(word, ""), ""


def parse_endings(text: str) -> dict[str, Ending]:
    """Each component's end, by the id sacct prints (``41``, ``41+1``, ``41_3``); an array's
    tasks that never started share one row (``41_[1,3%1]``), given to each of them."""
    out: dict[str, Ending] = {}
    for component, rows in parse_rows(text).items():
        found = ending_of(rows, component)
        if found is None:
            continue
        array, sep, tasks = component.partition("_[")
        if sep and tasks.endswith("]"):
            for i in task_range(tasks):
                out.setdefault(f"{array}_{i}", found)
        else:
            out[component] = found
    return out


def add_endings(job: Job, app_id: str, endings: Mapping[str, Ending]) -> None:
    """Each component's exit code, signal, end and why, from sacct's text, where it has a row
    (``41+1`` for a heterogeneous component, ``41`` or ``41_3`` for the only one)."""
    for comp in job.components:
        found = endings.get(f"{app_id}+{comp.offset}")
        if found is None and comp.offset == 0:
            found = endings.get(app_id)
        if found is None:
            continue
        comp.exit_code = found.code if not (found.signal and found.code == 0) else None
        comp.signal = found.signal
        comp.step_end = found.end
        comp.ran = found.ran
        comp.ending, comp.next_step = found.ending, found.next_step
        comp.state_text = found.state.split(" ", 1)[0].upper() or comp.state_text


# slurmdbd hears of a job's end a moment after the controller: a job squeue says ended less
# than this many seconds ago, and sacct does not have ended yet, reads as it was before its end
# (describe does not wait for slurmdbd: the next poll round asks again); after that it reads
# from squeue alone
LAG_HOLD_S = 10.0
# ends that may come before a job ran at all (its row then has no step, and never will)
_MAY_NOT_HAVE_RUN = ("CANCELLED", "BOOT_FAIL", "NODE_FAIL", "DEADLINE", "PREEMPTED")


def unsettled(ids: list[str], endings: dict[str, Ending]) -> list[str]:
    """The jobs among ``ids`` (ended, as squeue says) whose end sacct has no row of yet: read
    now, their card would lack what only sacct knows (the srun step's code, a time limit in
    words, whether the program ran) — and a job's first end is the one its notice tells."""

    def settled(app_id: str) -> bool:
        found = endings.get(app_id) or endings.get(f"{app_id}+0")
        if found is None:
            return False
        word = found.state.split(" ", 1)[0].upper()
        # its steps' rows come after its own: a job that ended by itself ran a batch step
        return is_terminal(app_state(word)) and (found.ran or word in _MAY_NOT_HAVE_RUN)

    return [a for a in ids if not settled(a)]


def before_end(job: Job, now: float, hold_s: float = LAG_HOLD_S) -> Job | None:
    """The job as it was before the end squeue reports (running where it ran, else pending),
    while that end is under ``hold_s`` seconds old; None when it is older (or has no time):
    then squeue's end is all there will be."""
    ends = [c.end for c in job.components if c.end]
    if not ends or now - max(ends) >= hold_s:
        return None
    comps = []
    for c in job.components:
        state = AppState.RUNNING if c.ran else AppState.PENDING
        comps.append(
            replace(
                c,
                state=state,
                state_text=state.name,
                exit_code=None,
                signal=None,
                end=None,
                step_state=None,
            )
        )
    return Job(job.job_id, comps)


# the job's own end that is its replicas' too: a step that Slurm stopped for the job's time
# limit (or a node failure...) shows CANCELLED, but nobody cancelled it
_JOB_ENDS = ("TIMEOUT", "DEADLINE", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "OUT_OF_MEMORY")


def replica_state(comp: Component) -> AppState:
    """A replica's state: its srun step's, except where the job's own end explains it (a
    time limit), a step killed by a signal in a job that failed (srun says CANCELLED), or a
    program that ended on a cancel's SIGTERM (exit 143 or the signal: Slurm says FAILED)."""
    if comp.state_text.split(" ", 1)[0] in _JOB_ENDS:
        return comp.state
    step = comp.step_state or comp.state
    if step == AppState.CANCELLED and comp.state == AppState.FAILED and comp.signal:
        return AppState.FAILED
    if step == AppState.FAILED and comp.state == AppState.CANCELLED:
        return AppState.CANCELLED if SIGTERM in (comp.signal, (comp.exit_code or 0) - 128) else step
    return step


__all__ = [
    "COLUMNS",
    "Ending",
    "add_endings",
    "before_end",
    "ending_of",
    "exit_pair",
    "parse_endings",
    "parse_rows",
    "replica_state",
    "unsettled",
]
