"""A sweep as text: the trials' states counted, one row per trial, and the summary line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchx_nb.specs.api import AppStatus

NOT_SUBMITTED = "NOT_SUBMITTED"


def _state_counts(states: Sequence[str], stopped: bool = False) -> str:
    done = states.count("SUCCEEDED")
    failed = sum(states.count(s) for s in ("FAILED", "CANCELLED", "UNKNOWN"))
    unsent = states.count("NOT_SUBMITTED") if stopped else 0
    waiting = sum(states.count(s) for s in ("NOT_SUBMITTED", "SUBMITTED", "PENDING")) - unsent
    running = states.count("RUNNING")
    text = f"{done} done · {failed} failed · {running} running · {waiting} waiting"
    return text + (f" · {unsent} not run" if unsent else "")


def sweep_rows(
    points: Sequence[Mapping[str, object]],
    handles: Sequence[str | None],
    statuses: Sequence[AppStatus | None],
) -> list[tuple[int, Mapping[str, object], str, str | None]]:
    """(trial, parameters, state, handle) per trial."""
    return [
        (i, p, (s.state.name if s else "SUBMITTED") if h else NOT_SUBMITTED, h)
        for i, (p, h, s) in enumerate(zip(points, handles, statuses, strict=True))
    ]


def sweep_summary(states: Sequence[str], stopped: bool = False) -> str:
    """``2 done · 1 failed · 1 running · 0 waiting`` (and, once a sweep was stopped, how
    many trials it never ran)."""
    return _state_counts(states, stopped)


def sweep_text(
    sweep_id: str,
    points: Sequence[Mapping[str, object]],
    handles: Sequence[str | None],
    statuses: Sequence[AppStatus | None],
    array: bool,
    stopped: bool = False,
) -> str:
    """The sweep as text: a summary line, then one line per trial."""
    rows = sweep_rows(points, handles, statuses)
    how = "one native array job" if array else "one job per trial"
    names = list(points[0]) if points else []
    summary = sweep_summary([r[2] for r in rows], stopped)
    lines = [
        f"{sweep_id}: {len(rows)} trials, {how}: {summary}",
        "  trial  " + "  ".join(names) + "  state  handle",
    ]
    for i, p, state, handle in rows:
        values = "  ".join(str(p[n]) for n in names)
        lines.append(f"  {i:>5}  {values}  {state}  {handle or '-'}")
    return "\n".join(lines)
