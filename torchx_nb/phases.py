"""A job's phases from the times the job store keeps (the scheduler's own where it reports
them): the image built and pushed (before submit), queued (submitted → started), running
(started → ended). A phase its backend gives no time for is left out, never guessed: a job
that ended without ever being seen running has a queue phase only. A job preempted has its run
split by its attempts (the job store's): running, held (preempted, until the next attempt
runs), resumed."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.specs.durations import fmt_duration
from torchx_nb.specs.preemption import Attempt


@dataclass(frozen=True)
class Phase:
    name: str  # "image built and pushed", "queued", "running", "held", "resumed"
    start: float
    end: float | None  # None: still going

    def seconds(self, now: float | None = None) -> float:
        return max(0.0, (self.end if self.end is not None else now or time.time()) - self.start)


def phases(
    rec: JobRecord, now: float | None = None, attempts: Sequence[Attempt] = ()
) -> list[Phase]:
    """The phases of one job, in order (``attempts``: the job store's, when it has several).
    Times from another clock are kept inside what we know: a start before the submit is the
    submit (it started at once), a start after the end, or in the future, is the end (or
    now): never negative or future time."""
    out = []
    if rec.build_seconds:
        out.append(
            Phase("image built and pushed", rec.submitted - rec.build_seconds, rec.submitted)
        )
    ended = max(rec.ended, rec.submitted) if rec.ended is not None else None
    started = rec.started
    if started is not None:
        latest = ended if ended is not None else max(rec.submitted, now or time.time())
        started = min(max(started, rec.submitted), latest)
    queue_end = started if started is not None else ended
    out.append(Phase("queued", rec.submitted, queue_end))
    if started is not None:
        tried = [a for a in attempts if a.app_id]  # a next attempt being sent has no id yet
        if len(tried) < 2:
            out.append(Phase("running", started, ended))
        else:
            latest = ended if ended is not None else max(rec.submitted, now or time.time())
            out += _attempt_phases(tried, started, ended, latest)
    return out


def _attempt_phases(
    attempts: list[Attempt], started: float, ended: float | None, latest: float
) -> list[Phase]:
    """The run of a job split by its attempts: running, then held and resumed per attempt."""

    def inside(t: float) -> float:
        return min(max(t, started), latest)

    out = []
    begin = started
    for i, a in enumerate(attempts):
        last = i == len(attempts) - 1
        if i:
            held_from = inside(attempts[i - 1].ended or begin)
            if a.started is None:  # preempted, not running again yet
                out.append(Phase("held", held_from, ended))
                break
            begin = max(inside(a.started), held_from)
            out.append(Phase("held", held_from, begin))
        end = inside(a.ended) if a.ended is not None else (ended if last else latest)
        out.append(Phase("resumed" if i else "running", begin, end))
    return out


def queue_and_run(
    rec: JobRecord, now: float | None = None, attempts: Sequence[Attempt] = ()
) -> tuple[float, float | None]:
    """Seconds queued, and seconds run (None: it never ran): with the job's ``attempts`` (one
    preempted has several), its attempts' runs added up — the time it was held between them
    is not time it ran."""
    found = phases(rec, now, attempts)
    queued = next(p.seconds(now) for p in found if p.name == "queued")
    runs = [p.seconds(now) for p in found if p.name in ("running", "resumed")]
    return queued, (sum(runs) if runs else None)


def run_times(
    store: JobStore, rec: JobRecord, now: float | None = None
) -> tuple[float, float | None]:
    """``queue_and_run`` of a stored job: its attempts read from ``store`` only when it has had
    more than one (a list row of a job never preempted reads nothing more)."""
    return queue_and_run(rec, now, store.attempts(rec.handle) if rec.attempt > 1 else ())


def phases_line(rec: JobRecord, now: float | None = None, attempts: Sequence[Attempt] = ()) -> str:
    """``built 0:12 · queued 0:03 · ran 1:20`` (``running 0:40`` while it runs; ``ran 2:00 ·
    held 2:01 · resumed 3:00`` for a job preempted once)."""
    words = {
        "image built and pushed": "built",
        "queued": "queued",
        "running": "ran",
        "held": "held",
        "resumed": "resumed",
    }
    parts = []
    for p in phases(rec, now, attempts):
        word = "running" if p.name == "running" and p.end is None else words[p.name]
        parts.append(f"{word} {fmt_duration(p.seconds(now))}")
    return " · ".join(parts)


__all__ = ["Phase", "fmt_duration", "phases", "phases_line", "queue_and_run", "run_times"]
