"""A job's handle across preemptions, with real local_cwd jobs on a backend that reclaims
capacity as Slurm's PreemptMode=CANCEL does: the preempted job is submitted again as attempt 2
of the same handle and ends SUCCEEDED there; past its limit it fails with one line; a cancel is
never a preemption; a backend that cannot preempt says so in one line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.runner.spot_backend import WHY, create_scheduler
from torchx_nb import specs
from torchx_nb.jobstore import JobStore
from torchx_nb.runner import Runner
from torchx_nb.specs.api import AppState
from torchx_nb.specs.exceptions import NotPreemptible

# the program: its first attempt waits to be preempted; a later one (its checkpoint, a file,
# is there) ends at once
PROGRAM = (
    "import os, sys, time\n"
    "ck = sys.argv[1]\n"
    "if os.path.exists(ck):\n"
    "    print('resumed', flush=True); time.sleep(1); sys.exit(0)\n"
    "open(ck, 'w').write('1')\n"
    "time.sleep(120)\n"
)


def app(ck: Path) -> specs.AppDef:
    role = specs.Role("train", "", entrypoint=sys.executable, args=["-c", PROGRAM, str(ck)])
    return specs.AppDef("train", [role])


def runner(tmp_path: Path) -> Runner:
    return Runner(
        "torchx",
        {"spotty": create_scheduler},
        jobstore=JobStore(tmp_path / "jobs.db"),
    )


def running(r: Runner, handle: str, ck: Path | None = None) -> bool:
    """Running, and past its checkpoint (``ck`` written) when one is named."""
    status = r.status(handle)
    return status is not None and status.state == AppState.RUNNING and (ck is None or ck.exists())


def preempted(r: Runner, handle: str) -> int:
    """The job's preemptions, once a status call kept what its backend lists."""
    r.status(handle)
    rec = r.jobstore.get(handle)
    return rec.preemptions if rec is not None else 0


def test_a_preempted_job_is_submitted_again_under_its_handle(tmp_path: Path) -> None:
    with runner(tmp_path) as r:
        handle = r.run(app(tmp_path / "ck"), "spotty")
        first = r.jobstore.get(handle)
        assert first is not None
        wait_for(lambda: running(r, handle, tmp_path / "ck"), timeout=60)
        r.preempt(handle)
        ended = r.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        assert ended.msg.startswith("preempted at ") and f"({WHY}), resumed at " in ended.msg
        rec = r.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.msg) == ("SUCCEEDED", ended.msg)
        assert (rec.attempt, rec.preemptions, rec.failures) == (2, 1, 0)
        assert rec.app_id != first.app_id  # the handle answers for its current native job
        # and its outputs (a cell's result) are the new native job's
        assert first.outputs and rec.outputs == first.outputs.replace(first.app_id, rec.app_id)
        log = r.attempt_log(handle)
        assert [(a.n, a.ended_why) for a in log.attempts] == [
            (1, "preempted"),
            (2, "succeeded"),
        ]
        assert [a.app_id for a in log.attempts] == [first.app_id, rec.app_id]
        (story,) = log.story()
        assert story.startswith("preempted at ") and f"({WHY}), resumed at " in story
        assert [line.strip() for line in r.log_lines(handle, "train")] == ["resumed"]


def test_a_job_preempted_past_its_limit_fails_with_one_line(tmp_path: Path) -> None:
    with runner(tmp_path) as r:
        handle = r.run(app(tmp_path / "ck"), "spotty")
        r.jobstore.set_max_preemptions(handle, 0)
        wait_for(lambda: running(r, handle), timeout=60)
        r.preempt(handle)
        ended = r.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.FAILED
        assert ended.msg.startswith("preempted 1 times (limit 0): preempted at ")
        assert ended.msg.endswith(
            f"({WHY}); raise the limit with -cfg max_preemptions=N, or run on capacity"
            " that is not preempted"
        )
        rec = r.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.msg, rec.attempt) == ("FAILED", ended.msg, 1)


def test_a_cancel_is_never_a_preemption(tmp_path: Path) -> None:
    with runner(tmp_path) as r:
        handle = r.run(app(tmp_path / "ck"), "spotty")
        wait_for(lambda: running(r, handle), timeout=60)
        r.cancel(handle)
        ended = r.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.CANCELLED
        rec = r.jobstore.get(handle)
        assert rec is not None and (rec.attempt, rec.preemptions) == (1, 0)
        assert [a.ended_why for a in r.attempt_log(handle).attempts] == ["cancelled"]


def test_preempt_on_a_backend_that_cannot_or_a_job_not_running(tmp_path: Path) -> None:
    from torchx_nb.schedulers import builtin_scheduler_factories

    builtin = Runner("torchx", builtin_scheduler_factories(), jobstore=JobStore(tmp_path / "j"))
    with builtin, pytest.raises(NotPreemptible, match=r"^aws_batch cannot preempt a job on"):
        builtin.preempt("aws_batch://torchx/queue:job-1")
    with runner(tmp_path) as r:
        handle = r.run(specs.AppDef("t", [specs.Role("t", "", entrypoint="true")]), "spotty")
        r.wait(handle, wait_interval=0.2, timeout=60)
        with pytest.raises(NotPreemptible, match=r"is SUCCEEDED, not running: only a running"):
            r.preempt(handle)


def test_a_job_cancelled_while_preempted_is_not_submitted_again(tmp_path: Path) -> None:
    with runner(tmp_path) as r:
        handle = r.run(app(tmp_path / "ck"), "spotty")
        wait_for(lambda: running(r, handle, tmp_path / "ck"), timeout=60)
        sched = r.get_scheduler("spotty")
        app_id = specs.parse_app_handle(handle).app_id  # its first attempt
        sched.preempt(app_id, 2.0)  # no watcher sees it before the cancel
        wait_for(lambda: sched.describe(app_id).ended_preempted, timeout=60)  # type: ignore[union-attr]
        r.cancel(handle)
        status = r.status(handle)
        assert status is not None and status.state == AppState.CANCELLED
        rec = r.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.attempt, rec.app_id) == ("CANCELLED", 1, app_id)


def test_a_local_job_preempted_past_its_limit_is_stopped_and_fails(tmp_path: Path) -> None:
    """local_cwd runs a preempted job again itself: past its limit the runner stops it (the
    job ends FAILED with the limit's line, never CANCELLED)."""
    ck = tmp_path / "ck"
    role = specs.Role(
        "train",
        "",
        entrypoint=sys.executable,
        args=["-c", f"import time; open({str(ck)!r}, 'a').write('x'); time.sleep(120)"],
    )
    with Runner("torchx", jobstore=JobStore(tmp_path / "jobs.db")) as r:
        handle = r.run(specs.AppDef("train", [role]), "local_cwd")
        r.jobstore.set_max_preemptions(handle, 1)
        wait_for(lambda: running(r, handle, ck), timeout=60)
        r.preempt(handle, grace=1)
        wait_for(lambda: preempted(r, handle) == 1, timeout=60)
        # its second attempt runs (each attempt writes one x)
        wait_for(lambda: running(r, handle) and ck.read_text() == "xx", timeout=60)
        r.preempt(handle, grace=1)
        ended = r.wait(handle, wait_interval=0.2, timeout=90)
        assert ended is not None and ended.state == AppState.FAILED, ended
        assert ended.msg.startswith("preempted 2 times (limit 1): preempted at ")
        rec = r.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.preemptions, rec.failures) == ("FAILED", 2, 0)
        rev = r.jobstore.changes(0).rev
        later = r.status(handle)
        assert later is not None and later.state == AppState.FAILED
        assert r.jobstore.changes(0).rev == rev  # a status after the end writes nothing
        # the attempt the limit stopped (when its backend had begun it) is no program failure
        whys = [a.ended_why for a in r.attempt_log(handle).attempts]
        assert whys in (["preempted", "preempted"], ["preempted", "preempted", "cancelled"])


# a watcher whose resubmission never returns (killed midway by the test)
STUCK_WATCHER = """
import sys, time
from tests.runner.spot_backend import ReclaimingScheduler, create_scheduler
from torchx_nb.jobstore import JobStore
from torchx_nb.runner import Runner
ReclaimingScheduler.submit_again = lambda self, app_id: time.sleep(600)
with Runner("torchx", {"spotty": create_scheduler}, jobstore=JobStore(sys.argv[1])) as r:
    while True:
        r.status(sys.argv[2])
        time.sleep(0.2)
"""


def test_a_resubmission_killed_midway_is_taken_over(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """kill -9 of the process sending a preempted job's next attempt: its claim stays in the
    store, and once it is stale another watcher sends the attempt — the job is not left
    'submitted again' for ever, with no job behind it and no notice."""
    import os
    import signal
    import subprocess

    from torchx_nb import attempt_store

    with runner(tmp_path) as r:
        handle = r.run(app(tmp_path / "ck"), "spotty")
        wait_for(lambda: running(r, handle, tmp_path / "ck"), timeout=60)
        r.preempt(handle)  # no status of this process sees it: the other watcher claims it
        root = Path(__file__).resolve().parents[2]
        watcher = subprocess.Popen(
            [sys.executable, "-c", STUCK_WATCHER, str(tmp_path / "jobs.db"), handle], cwd=root
        )
        try:
            wait_for(lambda: [a.n for a in r.jobstore.attempts(handle)] == [1, 2], timeout=90)
        finally:
            os.kill(watcher.pid, signal.SIGKILL)
            watcher.wait()
        (claim,) = [a for a in r.jobstore.attempts(handle) if a.n == 2]
        assert claim.app_id == ""  # claimed, never sent: no attempt yet
        assert [a.n for a in r.attempt_log(handle).attempts] == [1]
        monkeypatch.setattr(attempt_store, "CLAIM_SECONDS", 1.0)
        time.sleep(1.5)
        ended = r.wait(handle, wait_interval=0.2, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = r.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.attempt, rec.preemptions) == ("SUCCEEDED", 2, 1)


def test_a_cancel_while_another_watcher_sends_the_next_attempt_stops_it(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A cancel of a job whose native job ended with its preemption, while another watcher
    (the server, a second kernel) sends its next attempt between the cancel's describe and its
    record: the job is CANCELLED and so is the attempt just sent — it does not run on, unseen,
    under a handle the store calls cancelled."""
    slow = specs.AppDef(
        "train",
        [
            specs.Role(
                "train",
                "",
                entrypoint=sys.executable,
                args=[
                    "-c",
                    PROGRAM.replace("time.sleep(1)", "time.sleep(60)"),
                    str(tmp_path / "ck"),
                ],
            )
        ],
    )
    with runner(tmp_path) as r, runner(tmp_path) as other:
        handle = r.run(slow, "spotty")
        wait_for(lambda: running(r, handle, tmp_path / "ck"), timeout=60)
        sched = r.get_scheduler("spotty")
        app_id = specs.parse_app_handle(handle).app_id
        sched.preempt(app_id, 2.0)  # no watcher sees it before the cancel
        wait_for(lambda: sched.describe(app_id).ended_preempted, timeout=60)  # type: ignore[union-attr]
        describe = sched.describe

        def meanwhile(native: str):  # type: ignore[no-untyped-def]
            desc = describe(native)
            other.status(handle)  # the other watcher sends attempt 2 now
            return desc

        monkeypatch.setattr(sched, "describe", meanwhile)
        r.cancel(handle)
        monkeypatch.setattr(sched, "describe", describe)
        rec = r.jobstore.get(handle)
        assert rec is not None and rec.state == "CANCELLED"
        new_id = rec.app_id
        assert new_id != app_id  # it was sent
        ended = wait_for(
            lambda: (d := describe(new_id)) is not None and specs.is_terminal(d.state) and d,
            timeout=60,
        )
        assert ended.state == AppState.CANCELLED  # type: ignore[attr-defined]
