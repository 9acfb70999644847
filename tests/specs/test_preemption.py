"""The words of a preemption, the story of a job's attempts, the limit's one line, and the
options every spot backend shares."""

from __future__ import annotations

import dataclasses
import time

import pytest

from torchx_nb.specs.exceptions import NotPreemptible, exit_status, http_status
from torchx_nb.specs.preemption import Attempt, AttemptLog, Preemption, limit_line
from torchx_nb.specs.structured_opts import SpotOpts


def at(hh: int, mm: int) -> float:
    return time.mktime((2026, 11, 28, hh, mm, 0, 0, 0, -1))


def test_a_preemption_tells_when_it_resumed_and_from_which_checkpoint() -> None:
    p = Preemption(at(10, 2), "spot capacity reclaimed", at(10, 5), at(10, 1), 60)
    assert p.text() == (
        "preempted at 10:02 (spot capacity reclaimed), resumed at 10:05 from the checkpoint"
        " of 10:01 — 1 min of work lost"
    )
    assert Preemption(at(10, 2)).text() == "preempted at 10:02"
    assert Preemption(at(10, 2), resumed_at=at(10, 4), lost_s=3700, restored=False).text() == (
        "preempted at 10:02, resumed at 10:04 from the start (no checkpoint)"
        " — 1 h 1 min of work lost"
    )
    # where it resumed from is not known (no ledger read): the attempt's length, at most
    assert Preemption(at(10, 2), resumed_at=at(10, 4), lost_s=120).text() == (
        "preempted at 10:02, resumed at 10:04 — up to 2 min of work lost"
    )


def test_the_log_of_attempts_tells_each_preemption_and_the_failures() -> None:
    log = AttemptLog.of(
        [
            Attempt(2, "41", at(10, 5), at(10, 30), "failed"),
            Attempt(1, "41", at(10, 0), at(10, 2), "preempted", "spot", at(10, 1)),
            Attempt(3, "57", at(10, 40), None, "running"),
        ]
    )
    assert (log.attempt, log.preemptions, log.failures) == (3, 1, 1)
    assert log.story() == [
        "preempted at 10:02 (spot), resumed at 10:05 from the checkpoint of 10:01"
        " — 1 min of work lost"
    ]


def test_the_ledger_says_where_each_attempt_resumed_from_and_so_the_work_lost() -> None:
    """The checkpoint ledger's entry of the attempt begun after a preemption says when the
    program wrote the checkpoint it restored (or that it restored none): the work lost is the
    time from there (never before the preempted attempt began) to the preemption."""
    rows = [
        Attempt(1, "7", at(10, 0), at(10, 4), "preempted", "torchx-nb preempt"),
        Attempt(2, "7", at(10, 5), at(10, 9), "preempted", "torchx-nb preempt"),
        Attempt(3, "7", at(10, 10), None, "running"),
        Attempt(4, "7", None, None, "running"),
    ]
    ledger = [(at(10, 0), None), (at(10, 5), at(10, 3)), (at(10, 10), at(10, 3))]
    assert AttemptLog.of(rows, ledger).story() == [
        "preempted at 10:04 (torchx-nb preempt), resumed at 10:05 from the checkpoint of 10:03"
        " — 1 min of work lost",
        # nothing written since: the checkpoint of 10:03 again, the whole attempt lost
        "preempted at 10:09 (torchx-nb preempt), resumed at 10:10 from the checkpoint of 10:03"
        " — 4 min of work lost",
    ]
    none = [(at(10, 0), None), (at(10, 5), None)]
    assert AttemptLog.of(rows[:2], none).story()[0] == (
        "preempted at 10:04 (torchx-nb preempt), resumed at 10:05 from the start"
        " (no checkpoint) — 4 min of work lost"
    )
    assert AttemptLog.of(rows[:2]).story()[0] == (
        "preempted at 10:04 (torchx-nb preempt), resumed at 10:05 — up to 4 min of work lost"
    )


def test_a_checkpoint_dated_after_the_preemption_by_a_clock_ahead_is_the_preemption_s_time() -> (
    None
):
    """A job whose clock runs ahead of ours dated its checkpoint after the preemption: the line
    said 'preempted at 10:04 … from the checkpoint of 10:09' (found by the hunt)."""
    rows = [
        Attempt(1, "7", at(10, 0), at(10, 4), "preempted", "torchx-nb preempt"),
        Attempt(2, "7", at(10, 5), None, "running"),
    ]
    assert AttemptLog.of(rows, [(at(10, 0), None), (at(10, 5), at(10, 9))]).story() == [
        "preempted at 10:04 (torchx-nb preempt), resumed at 10:05 from the checkpoint of 10:04"
    ]


def test_the_limit_line_names_the_count_the_limit_and_the_fix() -> None:
    line = limit_line(21, 20, Preemption(at(10, 2), "spot capacity reclaimed"))
    assert line == (
        "preempted 21 times (limit 20): preempted at 10:02 (spot capacity reclaimed); raise"
        " the limit with -cfg max_preemptions=N, or run on capacity that is not preempted"
    )


def test_spot_options_are_one_spelling_for_every_backend() -> None:
    @dataclasses.dataclass(kw_only=True)
    class Opts(SpotOpts):
        queue: str  # a backend's required option after the shared ones

    opts = Opts.from_cfg({"queue": "q", "maxPreemptions": "3", "spot": "True"})
    assert (opts.spot, opts.max_preemptions) == (True, 3)
    assert Opts.from_cfg({"queue": "q"}).max_preemptions == 20
    assert {"spot", "max_preemptions", "queue"} <= {k for k, _ in Opts.as_runopts()}
    with pytest.raises(ValueError, match="max_preemptions must be 0 or more, not -1"):
        Opts.from_cfg({"queue": "q", "max_preemptions": -1})


def test_not_preemptible_is_a_conflict_at_the_edges() -> None:
    e = NotPreemptible("aws_batch cannot preempt a job on request")
    assert (http_status(e), exit_status(e)) == (409, 1)
