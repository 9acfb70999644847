"""A job's phases from the job store's times."""

from __future__ import annotations

import dataclasses

from tests.test_jobstore import rec
from torchx_nb.phases import fmt_duration, phases, phases_line, queue_and_run


def at(**times: float | None) -> object:
    return dataclasses.replace(rec("slurm://torchx/7"), **times)


def test_built_queued_ran() -> None:
    job = at(submitted=100.0, build_seconds=12.0, started=103.0, ended=183.0)
    assert [(p.name, p.start, p.end) for p in phases(job)] == [  # type: ignore[arg-type]
        ("image built and pushed", 88.0, 100.0),
        ("queued", 100.0, 103.0),
        ("running", 103.0, 183.0),
    ]
    assert queue_and_run(job) == (3.0, 80.0)  # type: ignore[arg-type]
    assert phases_line(job) == "built 0:12 · queued 0:03 · ran 1:20"  # type: ignore[arg-type]


def test_still_running_never_ran_and_a_clock_behind() -> None:
    running = at(submitted=100.0, started=110.0, ended=None)
    assert phases_line(running, now=170.0) == "queued 0:10 · running 1:00"  # type: ignore[arg-type]
    cancelled = at(submitted=100.0, started=None, ended=130.0)
    assert queue_and_run(cancelled) == (30.0, None)  # type: ignore[arg-type]
    assert phases_line(cancelled) == "queued 0:30"  # type: ignore[arg-type]
    skewed = at(submitted=100.0, started=98.0, ended=120.0)  # the scheduler's clock behind ours
    assert queue_and_run(skewed) == (0.0, 20.0)  # type: ignore[arg-type]
    assert fmt_duration(None) == "" and fmt_duration(3725) == "1:02:05"


def test_a_start_in_the_future_or_after_the_end_counts_no_future_or_negative_time() -> None:
    # the scheduler's clock is ahead of ours: it says it started at 200; it is 150 here
    ahead = at(submitted=100.0, started=200.0, ended=None)
    assert queue_and_run(ahead, now=150.0) == (50.0, 0.0)  # type: ignore[arg-type]
    assert phases_line(ahead, now=150.0) == "queued 0:50 · running 0:00"  # type: ignore[arg-type]
    late = at(submitted=100.0, started=190.0, ended=160.0)  # a start after the end
    assert queue_and_run(late) == (60.0, 0.0)  # type: ignore[arg-type]
    assert all(p.seconds(150.0) >= 0 for p in phases(late))  # type: ignore[arg-type]


def test_a_preempted_job_was_running_then_held_then_resumed() -> None:
    from torchx_nb.specs.preemption import Attempt

    job = at(submitted=100.0, started=103.0, ended=500.0)
    tries = [
        Attempt(1, "41", 103.0, 223.0, "preempted", "spot"),
        Attempt(2, "41", 344.0, 500.0, "succeeded"),
    ]
    assert [(p.name, p.start, p.end) for p in phases(job, attempts=tries)] == [  # type: ignore[arg-type]
        ("queued", 100.0, 103.0),
        ("running", 103.0, 223.0),
        ("held", 223.0, 344.0),
        ("resumed", 344.0, 500.0),
    ]
    assert phases_line(job, attempts=tries) == "queued 0:03 · ran 2:00 · held 2:01 · resumed 2:36"  # type: ignore[arg-type]
    # preempted and not running again yet (Slurm holds a requeued job about two minutes)
    held = at(submitted=100.0, started=103.0, ended=None)
    waiting = [tries[0], Attempt(2, "41")]
    assert phases_line(held, now=300.0, attempts=waiting) == "queued 0:03 · ran 2:00 · held 1:17"  # type: ignore[arg-type]
    # one attempt, or a next one still being sent (no native id yet): as before
    assert phases_line(job, attempts=[tries[0], Attempt(2, "")]) == "queued 0:03 · ran 6:37"  # type: ignore[arg-type]
