"""The job store's attempts: preemptions kept once whoever sees them, one resubmitter, the
handle answering for its current native job, the store's counter moved once per write, and a
store of an earlier version brought up to date with its jobs kept."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path

from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.specs.preemption import Preemption

H = "slurm://torchx/41"


def job(handle: str = H) -> JobRecord:
    now = time.time()
    return JobRecord(
        handle=handle,
        scheduler="slurm",
        session="torchx",
        app_id=handle.rsplit("/", 1)[1],
        name="train",
        image="",
        submitted=now - 600,
        state="SUBMITTED",
        updated=now,
    )


def test_a_store_of_an_earlier_version_gets_attempts_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    JobStore(path).add(job())
    with sqlite3.connect(path) as db:  # as a store of the version before attempts was
        db.execute("DROP TABLE attempts")
        for column in ("attempt", "preemptions", "failures", "max_preemptions"):
            db.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    store = JobStore(path)
    got = store.get(H)
    assert got is not None and (got.attempt, got.preemptions, got.failures) == (1, 0, 0)
    assert [(a.n, a.app_id, a.ended_why) for a in store.attempts(H)] == [(1, "41", "running")]
    before = store.changes(0).rev
    assert store.record_preemptions(H, "41", [Preemption(time.time() - 60, "spot")]) == 1
    after = store.changes(before)
    assert after.rev == before + 1  # one write, one step of the counter
    assert [(r.handle, r.attempt, r.preemptions, r.rev) for r in after.records] == [
        (H, 2, 1, before + 1)
    ]


def test_a_preemption_is_kept_once_however_often_it_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    JobStore(path).add(job())
    t = time.time() - 300
    JobStore(path).update_state(H, "RUNNING", started=t)
    first = [Preemption(t + 60, "preempted by a job of higher priority")]
    for _ in range(3):  # the kernel, the server and the CLI each see it
        assert JobStore(path).record_preemptions(H, "41", first) == 1
    rev = JobStore(path).changes(0).rev
    resumed = [Preemption(t + 60, first[0].why, resumed_at=t + 180)]
    assert JobStore(path).record_preemptions(H, "41", resumed) == 1
    assert JobStore(path).record_preemptions(H, "41", resumed) == 1
    assert JobStore(path).changes(0).rev == rev + 1  # the resume, once
    store = JobStore(path)
    rows = [(a.n, a.app_id, a.started, a.ended, a.ended_why) for a in store.attempts(H)]
    assert rows == [
        (1, "41", t, t + 60, "preempted"),
        (2, "41", t + 180, None, "running"),
    ]
    store.update_state(H, "SUCCEEDED", ended=t + 240)
    log = store.attempt_log(H)
    assert (log.attempt, log.preemptions, log.failures) == (2, 1, 0)
    assert log.attempts[-1].ended_why == "succeeded"
    assert log.events[0].resumed_at == t + 180 and log.events[0].lost_s == 60


def test_a_cancel_ends_the_attempt_cancelled_never_preempted(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    store.add(job())
    store.update_state(H, "RUNNING")
    store.update_state(H, "CANCELLED", msg="cancelled by torchx_nb for alice")
    log = store.attempt_log(H)
    assert [a.ended_why for a in log.attempts] == ["cancelled"] and log.preemptions == 0
    store.add(job("slurm://torchx/42"))
    store.update_state("slurm://torchx/42", "FAILED")
    got = store.get("slurm://torchx/42")
    assert got is not None and got.failures == 1 and got.preemptions == 0


def _claim(path: str, handle: str, n: int, out: multiprocessing.Queue[bool]) -> None:
    out.put(JobStore(path).claim_attempt(handle, n))


def test_one_process_only_submits_the_next_attempt(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.add(job())
    at = time.time() - 30
    # Slurm under PreemptMode=CANCEL: the native job ended with its preemption
    assert store.record_preemptions(H, "41", [Preemption(at, "spot")], ended=True) == 1
    assert [a.ended_why for a in store.attempts(H)] == ["preempted"]
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[bool] = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(path), H, 2, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(out.get(timeout=5) for _ in procs) == [False, False, False, True]
    assert store.current_ids([H, "slurm://torchx/none"]) == {H: "41"}
    store.start_attempt(H, 2, "57", msg="preempted at …; submitted again as attempt 2")
    assert store.current_ids([H]) == {H: "57"}
    got = store.get(H)
    assert got is not None and (got.app_id, got.attempt, got.state) == ("57", 2, "SUBMITTED")
    # a late describe of the first native job changes nothing
    assert store.record_preemptions(H, "41", [Preemption(at, "spot")] * 2) == 1
    assert [(a.n, a.app_id) for a in store.attempts(H)] == [(1, "41"), (2, "57")]


def test_a_claimed_resubmission_is_no_attempt_until_it_is_sent(tmp_path: Path) -> None:
    """While attempt 3 is being submitted (its claim kept), the job has had 2 attempts: the
    log, and so status's ``Attempts: N``, counts only the attempts sent."""
    store = JobStore(tmp_path / "jobs.db")
    store.add(job())
    at = time.time() - 60
    store.record_preemptions(H, "41", [Preemption(at, "spot")], ended=True)
    assert store.claim_attempt(H, 2)
    store.start_attempt(H, 2, "57")
    store.record_preemptions(H, "57", [Preemption(at + 30, "spot")], ended=True)
    assert store.claim_attempt(H, 3)
    log = store.attempt_log(H)
    assert (log.attempt, log.preemptions) == (2, 2)
    assert [(a.n, a.app_id) for a in log.attempts] == [(1, "41"), (2, "57")]
    store.start_attempt(H, 3, "63")
    log = store.attempt_log(H)
    assert (log.attempt, [a.app_id for a in log.attempts]) == (3, ["41", "57", "63"])


def test_an_attempt_sent_while_the_job_was_cancelled_is_not_started(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    store.add(job())
    store.record_preemptions(H, "41", [Preemption(time.time() - 30, "spot")], ended=True)
    assert store.claim_attempt(H, 2)
    store.update_state(H, "CANCELLED", msg="cancelled while preempted")  # meanwhile
    assert not store.start_attempt(H, 2, "57")
    got = store.get(H)
    assert got is not None and (got.state, got.app_id, got.attempt) == ("CANCELLED", "41", 1)
    assert [a.n for a in store.attempts(H)] == [1]


def test_a_claim_whose_submitter_vanished_is_free_again(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from torchx_nb import attempt_store

    store = JobStore(tmp_path / "jobs.db")
    store.add(job())
    assert store.claim_attempt(H, 2) and not store.claim_attempt(H, 2)
    monkeypatch.setattr(attempt_store, "CLAIM_SECONDS", -1.0)
    assert store.claim_attempt(H, 2)
    store.drop_claim(H, 2)
    assert [a.n for a in store.attempts(H)] == [1]
