"""How Slurm jobs ended, read back once they have left squeue (only sacct knows them then), on
the real private cluster: exit codes and signals from sacct's text columns (Slurm 22.05's
``sacct --json`` says SUCCESS/0 for a failed step), time limits and cancellations in words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli, wait_for
from tests.infra.slurm import SlurmCluster
from torchx_nb import specs
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.slurm import SlurmScheduler
from torchx_nb.schedulers.slurm.exits import parse_endings
from torchx_nb.schedulers.slurm.jobs import Component, Job
from torchx_nb.specs.api import AppState
from torchx_nb.specs.failure import FailureCard

FIXTURES = ROOT / "tests" / "fixtures" / "slurm"


def _role(name: str, script: str, **kw: object) -> specs.Role:
    return specs.Role(
        name=name,
        image="",
        entrypoint="bash",
        args=["-c", script],
        resource=specs.Resource(cpu=1, gpu=0, memMB=200),
        **kw,  # type: ignore[arg-type]
    )


def _left_the_queue(cluster: SlurmCluster, *job_ids: str) -> None:
    """Wait until squeue has forgotten the jobs (MinJobAge): from then on only sacct knows.
    ``-t all``: squeue lists only pending and running jobs by default, and still knows the
    ended ones (with their exit code) until MinJobAge has passed."""

    def gone() -> bool:
        out = cluster.run("squeue", "-h", "-t", "all", "-o", "%i", check=False).stdout.split()
        queued = {o.partition("+")[0].partition("_")[0] for o in out}  # 41+1, 41_3, 41_[1-3]
        return not any(j.partition("_")[0] in queued for j in job_ids)

    wait_for(gone, timeout=180, interval=1)


def test_exit_codes_exceptions_and_signals_after_the_job_left_the_queue(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    from tests.result_checks import RAISE_CELL, result_workspace
    from torchx_nb.components.cell import cell

    ws = result_workspace(tmp_path)
    with get_runner() as runner:
        code3 = runner.run(specs.AppDef("three", roles=[_role("r", "exit 3")]), "slurm", {})
        raised = runner.run(cell(source=RAISE_CELL, memMB=500), "slurm", {}, str(ws))
        killed = runner.run(
            specs.AppDef(
                "segv",
                roles=[_role("s", "echo before; python3 -c 'import os; os.kill(os.getpid(), 11)'")],
            ),
            "slurm",
            {},
        )
        # a heterogeneous job: the replica that succeeded keeps its 0, the one that failed
        # its 3 (the job's own ExitCode is 3 for both components)
        het = runner.run(
            specs.AppDef("het", roles=[_role("ok", "true"), _role("boom", "sleep 1; exit 3")]),
            "slurm",
            {},
        )
        # 128 and above: sacct's ExitCode keeps the low 7 bits (72:0), DerivedExitCode all
        high = runner.run(specs.AppDef("high", roles=[_role("h", "exit 200")]), "slurm", {})
        handles = [code3, raised, killed, het, high]
        for h in handles:
            runner.wait(h, wait_interval=1, timeout=180)
        _left_the_queue(slurm_env, *(h.rsplit("/", 1)[1] for h in handles))
        statuses = {h: runner.status(h) for h in handles}
        cards = {h: runner.failure_cards(h, statuses[h]) for h in handles}

    assert all(s is not None and s.state == AppState.FAILED for s in statuses.values())
    (card,) = cards[code3]
    assert card.headline() == "r/0 exited with code 3"
    (card,) = cards[raised]
    assert card.headline() == "cell/0 raised ValueError: bad input 7 (ACC 0.9) (exit code 1)"
    (card,) = cards[killed]
    assert card.headline() == "s/0 was killed by SIGSEGV"
    assert card.last_lines[-1:] == ["before"]
    (card,) = cards[het]
    assert card.headline() == "boom/0 exited with code 3"
    ok = {r.role: r for r in statuses[het].roles}["ok"].replicas[0]  # type: ignore[union-attr]
    assert ok.state == AppState.SUCCEEDED and ok.exit_code == 0
    (card,) = cards[high]
    assert card.headline() == "h/0 exited with code 200"

    # what a user types, once the job is only in accounting
    code, out, err = cli("status", code3)
    assert code == 0, err
    assert "r/0 exited with code 3" in out and "exit code 0" not in out


def test_while_slurmdbd_is_down_a_job_still_in_the_queue_reads_from_squeue(
    slurm_env: SlurmCluster,
) -> None:
    """slurmdbd restarting or down: sacct fails ("Problem talking to the database"). A job
    that ended less than MinJobAge ago is still in squeue, with its exit code: its status
    reads from there (it was the error, blaming the controller). A job only accounting
    knows is one line naming slurmdbd, not the controller. A job cancelled while it waited
    has Slurm's cancel time as its start in squeue, and no node: it never ran (no start in
    the job store, so no running phase, and no exit code), as sacct would have said (this is
    also what happens while slurmdbd lags behind the controller)."""
    from torchx_nb.phases import phases

    with get_runner() as runner:
        old = runner.run(specs.AppDef("old", roles=[_role("o", "exit 4")]), "slurm", {})
        runner.wait(old, wait_interval=1, timeout=180)
        _left_the_queue(slurm_env, old.rsplit("/", 1)[1])
        with slurm_env.accounting_down():
            fresh = runner.run(specs.AppDef("fresh", roles=[_role("f", "exit 200")]), "slurm", {})
            status = runner.wait(fresh, wait_interval=1, timeout=120)
            assert status is not None and status.state == AppState.FAILED, status
            (card,) = runner.failure_cards(fresh, status)
            code, out, err = cli("status", old)
            slurm_env.run("scontrol", "update", "PartitionName=debug", "State=DOWN")
            try:
                waiting = runner.run(specs.AppDef("later", roles=[_role("w", "true")]), "slurm", {})
                wait_for(lambda: runner.status(waiting).state == AppState.PENDING, timeout=60)  # type: ignore[union-attr]
                runner.cancel(waiting)
                cancelled = runner.wait(waiting, wait_interval=1, timeout=60)
            finally:
                slurm_env.run("scontrol", "update", "PartitionName=debug", "State=UP")
            rec = runner.jobstore.get(waiting)
    assert card.headline() == "f/0 exited with code 200"
    assert cancelled is not None and cancelled.state == AppState.CANCELLED, cancelled
    assert cancelled.started is None, cancelled
    (replica,) = cancelled.roles[0].replicas
    assert replica.exit_code is None, replica
    assert rec is not None and rec.started is None and [p.name for p in phases(rec)] == ["queued"]
    assert code != 0 and "controller" not in err, (out, err)
    assert err.startswith(
        "torchx-nb: error: Slurm's accounting database (slurmdbd) does not answer ("
    ), err


def test_a_batch_script_that_stops_before_its_program_says_so(
    slurm_env: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's batch script stops before its srun (here it cannot make the outputs folder,
    as with a full disk or quota): no srun step in sacct. The card said "exited with code 1"
    with no lines, as if the program had; it now says the program never started and which
    log says why (the reason is only in the batch script's own slurm-ID.out)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".torchx-nb-outputs").write_text("a file where the folder goes\n")
    with get_runner() as runner:
        handle = runner.run(specs.AppDef("early", roles=[_role("e", "echo hi")]), "slurm", {})
        job = handle.rsplit("/", 1)[1]
        runner.wait(handle, wait_interval=1, timeout=180)
        # a busy slurmdbd may write the batch step's row seconds after the job's own
        rows = ("sacct", "-n", "-P", "-o", "JobID", "-j", job)
        wait_for(lambda: f"{job}.batch" in slurm_env.run(*rows).stdout.split(), timeout=60)
        status = runner.status(handle)
        assert status is not None and status.state == AppState.FAILED, status
        (card,) = runner.failure_cards(handle, status)
    assert card.headline() == (
        "e/0 failed before its program started: the job's batch script stopped (exit code 1)"
    )
    assert card.next_step == (
        f"read why in slurm-{job}.out, the batch script's log, in the job's folder"
    )
    assert "cannot create directory" in (tmp_path / f"slurm-{job}.out").read_text()


def test_a_time_limit_and_a_cancel_while_pending_are_said_in_words(
    slurm_env: SlurmCluster,
) -> None:
    with get_runner() as runner:
        limited = runner.run(
            specs.AppDef("limited", roles=[_role("t", "echo started; sleep 300")]),
            "slurm",
            {"time": "1"},
        )
        wait_for(lambda: runner.status(limited).state == AppState.RUNNING, timeout=120)  # type: ignore[union-attr]
        # a partition that is down holds a new job pending (the running one goes on)
        slurm_env.run("scontrol", "update", "PartitionName=debug", "State=DOWN")
        try:
            waiting = runner.run(specs.AppDef("later", roles=[_role("w", "true")]), "slurm", {})
            job = waiting.rsplit("/", 1)[1]
            wait_for(lambda: runner.status(waiting).state == AppState.PENDING, timeout=60)  # type: ignore[union-attr]
            runner.cancel(waiting)
            runner.wait(waiting, wait_interval=1, timeout=60)
        finally:
            slurm_env.run("scontrol", "update", "PartitionName=debug", "State=UP")
        status = runner.wait(limited, wait_interval=2, timeout=240)
        _left_the_queue(slurm_env, limited.rsplit("/", 1)[1], job)
        status = runner.status(limited)
        cancelled = runner.status(waiting)
        (card,) = runner.failure_cards(limited, status)
        rec = runner.jobstore.get(waiting)

    assert status is not None and status.state == AppState.FAILED
    assert card.headline() == "t/0 was stopped at its time limit of 00:01:00 (SIGTERM)"
    assert card.next_step.startswith("raise the limit with -cfg time=MINUTES")
    assert "time limit" in status.msg
    assert cancelled is not None and cancelled.state == AppState.CANCELLED
    assert cancelled.msg == "it was cancelled by root (uid 0) before it started"
    # it never ran: no start time, so no running phase
    assert cancelled.started is None
    from torchx_nb.phases import phases

    assert rec is not None and [p.name for p in phases(rec)] == ["queued"]


def test_out_of_memory_from_a_recorded_sacct_answer() -> None:
    """The private cluster runs without cgroups, so nothing there is stopped for its memory:
    sacct's lines for a job that was, in the form Slurm 22.05 prints them (``OUT_OF_MEMORY``
    with ``0:125``, the signal Slurm records for it)."""
    from torchx_nb.schedulers.slurm.scheduler import _add_endings

    endings = parse_endings((FIXTURES / "sacct-oom-22.05.txt").read_text())
    job = Job(7, [Component(7, 0, "trainer-0", AppState.FAILED, "OUT_OF_MEMORY")])
    _add_endings(job, "7", endings)
    resp = SlurmScheduler("torchx")._response("7", job)
    (replica,) = resp.roles_statuses[0].replicas
    assert replica.oom and replica.state == AppState.FAILED and replica.exit_code is None
    card = FailureCard("trainer", 0, replica.exit_code, replica.oom, signal_number=replica.signal)
    assert card.headline() == "trainer/0 ran out of memory"


def test_exit_codes_of_128_and_above_from_a_recorded_sacct_answer() -> None:
    """Slurm 22.05's ExitCode column keeps a step's code modulo 128 (``exit 255`` is ``127:0``,
    which reads as "command not found"; ``exit 200`` is ``72:0``); the component's
    DerivedExitCode keeps the whole code. Lines as the test cluster printed them for
    ``srun sh -c 'exit 255'`` and a heterogeneous ``exit 200`` : ``exit 3``."""
    endings = parse_endings((FIXTURES / "sacct-high-codes-22.05.txt").read_text())
    assert (endings["16"].code, endings["16"].signal) == (255, 0)
    assert endings["18+0"].code == 200
    assert endings["18+1"].code == 3  # its own step's 3, not the job's 72


def test_a_job_slurmdbd_has_not_heard_ended_is_asked_again() -> None:
    """squeue says a job ended a moment before slurmdbd has its end: sacct then has no row,
    or one still RUNNING, and the first status (the one its notice and ``run --wait`` tell)
    would miss what only sacct knows; describe asks sacct again for those jobs."""
    from torchx_nb.schedulers.slurm.exits import unsettled

    lagging = parse_endings(
        "41|RUNNING|0:0|0:0|Unknown|UNLIMITED\n41.batch|RUNNING|0:0||Unknown|\n"
    )
    ended = parse_endings((FIXTURES / "sacct-high-codes-22.05.txt").read_text())
    assert unsettled(["41", "16", "18"], {**lagging, **ended}) == ["41"]
    assert unsettled(["42"], ended) == ["42"]  # no row yet
    # its own row ended, its batch step's not yet there: it ran, so more is coming
    stepless = parse_endings("43|FAILED|1:0|0:0|2026-11-28T10:40:01|UNLIMITED\n")
    assert unsettled(["43"], stepless) == ["43"]
    # cancelled while it waited: no step will ever come
    waited = parse_endings("44|CANCELLED by 0|0:0|0:0|2026-11-28T10:40:01|UNLIMITED\n")
    assert unsettled(["44"], waited) == []


def test_array_trials_cancelled_while_they_waited_never_ran_and_stay_cancelled(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    """A sweep's trials that were cancelled before they started: one alone (Slurm drops it
    from the array's pending record and keeps no row of it, in squeue or sacct), then the
    rest with Cancel all (sacct keeps them as one row, ``ID_[1,3%1]``). Each is CANCELLED
    with no start, so no running phase, and stays so once the array has left squeue —
    not "unknown app", not PENDING for ever in the job store."""
    from torchx_nb.phases import phases
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    ws = tmp_path / "ws"
    ws.mkdir()
    request = SweepRequest(
        RunRequest(cell="import time\ntime.sleep(120)\nn\n", scheduler="slurm", workspace=str(ws)),
        ["n=0,1,2,3"],
        max_parallel=1,
    )
    with get_runner() as runner:
        sw = start(runner, request)
        assert sw.array
        h = [str(x) for x in sw.handles]
        wait_for(lambda: runner.status(h[0]).state == AppState.RUNNING, 120)  # type: ignore[union-attr]
        runner.cancel(h[2])  # one trial alone, while it waits
        sw.cancel()  # then the rest: the one running, and two waiting
        statuses = sw.wait(timeout=120)
        assert [s.state if s else None for s in statuses] == [AppState.CANCELLED] * 4, statuses
        _left_the_queue(slurm_env, h[0].rsplit("/", 1)[1])
        after = {x: runner.status(x) for x in h}
        records = {x: runner.jobstore.get(x) for x in h}

    for x in h[1:]:
        status = after[x]
        assert status is not None and status.state == AppState.CANCELLED, (x, status)
        assert status.started is None and "before it started" in status.msg, (x, status)
        rec = records[x]
        assert rec is not None and rec.state == "CANCELLED", (x, rec)
        assert rec.started is None and [p.name for p in phases(rec)] == ["queued"], (x, rec)
    ran = after[h[0]]
    assert ran is not None and ran.state == AppState.CANCELLED and ran.started is not None
    assert "before it started" not in ran.msg
    # what a user types for the trial cancelled alone
    code, out, err = cli("status", h[2])
    assert code == 0, err
    # Slurm drops a task cancelled while it waits from the array's record, or, once it had
    # split the task out, keeps its row with who cancelled it ("CANCELLED by 0"): either way
    assert "State: CANCELLED" in out, out
    assert re.search(r"it was cancelled (by \S+ \(uid \d+\) )?before it started", out), out


def _fake_slurm(monkeypatch: pytest.MonkeyPatch, ended_ago: float, text: str) -> list[list[str]]:
    """Slurm's commands answering as a recorded cluster would: squeue has job 50 that
    ended ``ended_ago`` seconds ago (still in the queue, MinJobAge), sacct --json has no
    record, sacct's text has ``text``; every call is kept."""
    import json
    import time

    from torchx_nb.schedulers.slurm import base, scheduler

    now = int(time.time())
    job = {
        "job_id": 50,
        "job_state": "FAILED",
        "name": "r-0",
        "nodes": "127.0.0.1",
        "het_job_id": 50,
        "het_job_offset": 0,
        "array_job_id": 0,
        "array_task_id": None,
        "exit_code": 768,
        "restart_cnt": 0,
        "start_time": now - 30,
        "end_time": int(now - ended_ago),
    }
    seen: list[list[str]] = []

    def run(argv: list[str], env: object = None) -> str:
        seen.append(list(argv))
        if argv[0] == "squeue":
            return json.dumps({"errors": [], "jobs": [job]})
        if "--json" in argv:
            return json.dumps({"errors": [], "jobs": []})
        return text

    for module in (scheduler, base):  # each imports run_slurm (squeue is asked from base)
        monkeypatch.setattr(module, "run_slurm", run)
    return seen


def test_a_poll_round_asks_squeue_once_and_sacct_twice_without_waiting_for_slurmdbd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One describe round is one squeue, one ``sacct --json`` and one ``sacct --parsable2``
    for every id at once, an array's own id with its tasks' (its tasks that never started
    are one record under it). A job squeue says ended a moment ago, that slurmdbd has not
    heard ended, reads as it was (running) and is asked again the next round: describe used
    to sleep and ask sacct again up to 4 times (11 calls, 2 s) inside one round. Once
    slurmdbd has it, it ends with the srun step's code; an end slurmdbd never hears of
    (older than LAG_HOLD_S) reads from squeue."""
    import time

    lagging = "50|RUNNING|0:0|0:0|Unknown|UNLIMITED|2026-11-28T10:40:01\n"
    seen = _fake_slurm(monkeypatch, 1, lagging)
    sched = SlurmScheduler("torchx")
    t0 = time.monotonic()
    got = sched.describe_many(["50", "41_3"])
    took = time.monotonic() - t0
    assert [a[0] for a in seen] == ["squeue", "sacct", "sacct"], seen
    assert seen[1][-2:] == ["-j", "50,41_3,41"] and "--json" in seen[1]
    assert seen[2][-2:] == ["-j", "50,41_3,41"] and "--duplicates" in seen[2]
    assert took < 0.4, took
    first = got["50"]
    assert first is not None and first.state == AppState.RUNNING and first.ended is None, first

    ended = (
        "50|FAILED|3:0|3:0|2026-11-28T10:40:31|UNLIMITED|2026-11-28T10:40:01\n"
        "50.batch|FAILED|3:0||2026-11-28T10:40:31||2026-11-28T10:40:01\n"
        "50.0|FAILED|3:0||2026-11-28T10:40:31||2026-11-28T10:40:01\n"
    )
    _fake_slurm(monkeypatch, 2, ended)
    then = sched.describe("50")
    assert then is not None and then.state == AppState.FAILED, then
    assert then.roles_statuses[0].replicas[0].exit_code == 3

    _fake_slurm(monkeypatch, 60, lagging)  # slurmdbd never heard: squeue's end stands
    late = sched.describe("50")
    assert late is not None and late.state == AppState.FAILED, late
