"""The preemption story of a Slurm job from ``sacct --duplicates`` text (lines shaped as Slurm
22.05 wrote them on the preempting test cluster; test_slurm_preempt.py runs the real thing)."""

from __future__ import annotations

from datetime import datetime

from torchx_nb.schedulers.slurm.exits import parse_endings
from torchx_nb.schedulers.slurm.preemptions import (
    PREEMPTED_WHY,
    REQUEUED_WHY,
    parse_runs,
    preemptions,
)


def _t(text: str) -> float:
    return datetime.fromisoformat(f"2026-11-28T{text}").timestamp()


def _line(job: str, state: str, code: str, start: str, end: str) -> str:
    return f"{job}|{state}|{code}|0:0|2026-11-28T{end}|UNLIMITED|2026-11-28T{start}"


# run 1 preempted (REQUEUE), run 2 failed by itself (exit 3: the script requeued it), run 3
# requeued by torchx-nb preempt (the program ended on SIGTERM: 143, shown 15:0), run 4 done
SACCT = "\n".join(
    [
        _line("7", "PREEMPTED", "0:0", "10:00:00", "10:00:20"),
        _line("7.batch", "CANCELLED", "0:15", "10:00:00", "10:00:23"),
        _line("7.0", "CANCELLED", "0:9", "10:00:00", "10:00:27"),
        _line("7", "REQUEUED", "0:0", "10:02:30", "10:02:40"),
        _line("7.batch", "COMPLETED", "0:0", "10:02:30", "10:02:41"),
        _line("7.0", "FAILED", "3:0", "10:02:30", "10:02:40"),
        _line("7", "REQUEUED", "0:0", "10:05:00", "10:05:30"),
        _line("7.0", "CANCELLED", "15:0", "10:05:00", "10:05:31"),
        _line("7", "COMPLETED", "0:0", "10:07:40", "10:08:00"),
        _line("7.batch", "COMPLETED", "0:0", "10:07:40", "10:08:00"),
        _line("7.0", "COMPLETED", "0:0", "10:07:40", "10:08:00"),
    ]
)


def test_preemptions_are_the_preempted_runs_and_the_requeues_on_a_signal() -> None:
    (runs,) = parse_runs(SACCT).values()
    assert [r.state for r in runs] == ["PREEMPTED", "REQUEUED", "REQUEUED", "COMPLETED"]
    events = preemptions(runs, "torchx-nb preempt")
    assert [(e.why, e.at, e.resumed_at) for e in events] == [
        (PREEMPTED_WHY, _t("10:00:20"), _t("10:02:30")),
        ("torchx-nb preempt", _t("10:05:30"), _t("10:07:40")),
    ]
    assert preemptions(runs)[1].why == REQUEUED_WHY


def test_a_run_still_waiting_has_not_resumed_and_a_cancel_is_no_preemption() -> None:
    text = "\n".join(
        [
            _line("8", "PREEMPTED", "0:0", "10:00:00", "10:00:20"),
            "8|PENDING|0:0|0:0|Unknown|UNLIMITED|Unknown",
            _line("9", "CANCELLED by 0", "0:0", "10:00:00", "10:00:20"),
            _line("9.0", "CANCELLED", "0:15", "10:00:00", "10:00:20"),
        ]
    )
    runs = parse_runs(text)
    (event,) = preemptions(runs["8"])
    assert event.at == _t("10:00:20") and event.resumed_at is None
    assert preemptions(runs["9"]) == []


def test_the_last_run_decides_how_the_job_ended() -> None:
    """``--duplicates``: a component's own row starts its run afresh, so an earlier run's
    failed step never colours the last run's end."""
    ending = parse_endings(SACCT)["7"]
    assert ending.state == "COMPLETED" and ending.code == 0


def test_a_heterogeneous_job_is_read_from_its_first_component() -> None:
    text = "\n".join(
        [
            _line("5+0", "PREEMPTED", "0:0", "10:00:00", "10:00:20"),
            _line("5+1", "PREEMPTED", "0:0", "10:00:00", "10:00:21"),
            _line("5+0", "COMPLETED", "0:0", "10:02:30", "10:03:00"),
            _line("5+1", "COMPLETED", "0:0", "10:02:30", "10:03:00"),
        ]
    )
    runs = parse_runs(text)
    assert list(runs) == ["5"]
    assert [e.at for e in preemptions(runs["5"])] == [_t("10:00:20")]
