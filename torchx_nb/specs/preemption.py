"""A job's preemptions and attempts, as data (pure: no I/O).

A preemption is told from the backend's own record (Slurm's PREEMPTED / a requeue, a Spot VM's
exit 50001, a pod's DisruptionTarget, an EC2 host's termination), never from a SIGTERM alone: a
cancel arrives as a SIGTERM too. Each backend's ``describe`` lists the preemptions of one native
job in ``DescribeAppResponse.preemptions``; the job store keeps every attempt of a handle (a
requeue keeps the native id, a resubmission gets a new one), and status, phases and the failure
card read the story from there (``AttemptLog``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torchx_nb.specs.exceptions import NotPreemptible

DEFAULT_MAX_PREEMPTIONS = 20
#: how an attempt ended; ``running`` until it did
ENDED_WHY = ("running", "preempted", "failed", "cancelled", "succeeded")


def in_words(seconds: float) -> str:
    """``40 s``, ``1 min``, ``2 h 5 min``: a span as a sentence says it."""
    total = round(max(0.0, seconds))
    if total < 60:
        return f"{total} s"
    h, m = divmod(total // 60, 60)
    return f"{h} h {m} min" if h and m else f"{h} h" if h else f"{m} min"


def clock(ts: float) -> str:
    """``10:02``: a time of day in this machine's zone, as a status line says it."""
    return time.strftime("%H:%M", time.localtime(ts))


@dataclass(frozen=True)
class Preemption:
    """One preemption of a job, from its backend's record."""

    at: float
    """When the attempt was preempted (the backend's time)."""
    why: str = "preempted"
    """The backend's reason in words: "spot capacity reclaimed", "preempted by a job of
    higher priority", "torchx-nb preempt"."""
    resumed_at: float | None = None
    """When the next attempt started running (None: not yet, or never)."""
    ckpt_at: float | None = None
    """When the program wrote the checkpoint the next attempt restored (None: none, or not
    known)."""
    lost_s: float | None = None
    """The work lost: seconds since the last checkpoint (or since the attempt began)."""
    restored: bool | None = None
    """Whether the next attempt restored a checkpoint: False, it ran from the start; None,
    not known (its ledger was not read): ``lost_s`` is then the attempt's length, at most."""

    def to_json(self) -> dict[str, Any]:
        """The preemption as the REST API gives it (times in epoch seconds), with its words."""
        out: dict[str, Any] = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {**out, "text": self.text()}

    def text(self) -> str:
        """``preempted at 10:02 (spot capacity reclaimed), resumed at 10:05 from the checkpoint
        of 10:01 — 1 min of work lost``."""
        out = f"preempted at {clock(self.at)}"
        if self.why and self.why != "preempted":
            out += f" ({self.why})"
        known = self.ckpt_at is not None or self.restored is not None
        if self.resumed_at is not None:
            out += f", resumed at {clock(self.resumed_at)}"
            if self.ckpt_at is not None:
                out += f" from the checkpoint of {clock(self.ckpt_at)}"
            elif self.restored is False:
                out += " from the start (no checkpoint)"
        if self.lost_s is not None and self.lost_s >= 1:
            upto = "" if known or self.resumed_at is None else "up to "
            out += f" — {upto}{in_words(self.lost_s)} of work lost"
        return out


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job: a run of its program, on the native job ``app_id`` (a requeue keeps
    the id, a resubmission gets a new one)."""

    n: int  # from 1
    app_id: str
    started: float | None = None  # when it started running
    ended: float | None = None
    ended_why: str = "running"  # one of ENDED_WHY
    native: str = ""  # the backend's own words on how it ended
    ckpt_at: float | None = None  # the last checkpoint it saved


#: what a job's checkpoint ledger says of one attempt: when it began, and when the program
#: wrote the checkpoint it restored (None: it restored none)
Restore = tuple[float, float | None]


@dataclass(frozen=True)
class AttemptLog:
    """Every attempt of one job and the story they tell: how many, the preemptions (each with
    when the next attempt resumed), and the program's own failures."""

    attempts: tuple[Attempt, ...] = ()
    preemptions: int = 0
    failures: int = 0
    events: tuple[Preemption, ...] = ()

    @classmethod
    def of(cls, attempts: Iterable[Attempt], restores: Iterable[Restore] = ()) -> AttemptLog:
        """The log of ``attempts`` (any order: the started ones only — a resubmission claimed
        but not sent yet, a claim row with no native id, is no attempt); ``restores``: what
        the job's checkpoint ledger says each attempt restored, which tells where each
        preemption's next attempt resumed from and so the work lost (else a backend's own
        ``ckpt_at``, else not known)."""
        rows = tuple(sorted((a for a in attempts if a.app_id), key=lambda a: a.n))
        ledger = sorted(restores, key=lambda r: r[0])
        events = []
        for i, a in enumerate(rows):
            ended = a.ended
            if a.ended_why != "preempted" or ended is None:
                continue
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            resumed = nxt.started if nxt else None
            # the ledger's first attempt begun after the preemption is the one that resumed
            found = next((r for r in ledger if r[0] >= ended), None) if resumed else None
            ckpt, restored = a.ckpt_at, (True if a.ckpt_at is not None else None)
            if found is not None:
                ckpt, restored = found[1], found[1] is not None
            if ckpt is not None:  # a job's clock ahead of ours: no checkpoint after its end
                ckpt = min(ckpt, ended)
            # work done before this attempt began is not this preemption's loss
            began = a.started
            if began is None:  # not seen running by any watcher: the ledger saw it begin
                after = (rows[i - 1].ended if i else None) or 0.0
                began = max((r[0] for r in ledger if after <= r[0] < ended), default=None)
            marks = [x for x in (ckpt, began) if x is not None]
            since = max(marks) if marks else None
            events.append(
                Preemption(
                    at=ended,
                    why=a.native or "preempted",
                    resumed_at=resumed,
                    ckpt_at=ckpt if resumed is not None else None,
                    lost_s=max(0.0, ended - since) if since is not None else None,
                    restored=restored if resumed is not None else None,
                )
            )
        return cls(
            rows,
            sum(a.ended_why == "preempted" for a in rows),
            sum(a.ended_why == "failed" for a in rows[:-1]),
            tuple(events),
        )

    @property
    def attempt(self) -> int:
        """The current (or last) attempt's number; 1 for a job never preempted."""
        return self.attempts[-1].n if self.attempts else 1

    def story(self) -> list[str]:
        """One line per preemption, oldest first."""
        return [e.text() for e in self.events]


def stopping_line(at: float, attempt: int) -> str:
    """What status says while a preemption asked with ``torchx-nb preempt`` at ``at`` stops the
    replicas, before ``attempt`` (the next one) runs."""
    when = time.strftime("%H:%M:%S", time.localtime(at))
    return f"preempted at {when}: its replicas are stopping, then it runs again (attempt {attempt})"


def limit_line(preemptions: int, limit: int, last: Preemption | None) -> str:
    """The one line a job preempted past its limit fails with."""
    why = last.text() if last is not None else "preempted"
    return (
        f"preempted {preemptions} times (limit {limit}): {why}; raise the limit with"
        f" -cfg max_preemptions=N, or run on capacity that is not preempted"
    )


__all__ = [
    "DEFAULT_MAX_PREEMPTIONS",
    "ENDED_WHY",
    "Attempt",
    "AttemptLog",
    "Preemption",
    "Restore",
    "clock",
    "in_words",
    "limit_line",
    "stopping_line",
]


def not_running(app_id: str) -> NotPreemptible:
    """The one line refusing to preempt an app that is not running."""
    return NotPreemptible(f"{app_id} is not running: only a running app can be preempted")


def preempting_already(app_id: str) -> NotPreemptible:
    """The one line refusing a second preemption while one is under way (a reclaimed machine
    is reclaimed once)."""
    return NotPreemptible(
        f"{app_id} is being preempted already: preempt it again once it runs again"
    )
