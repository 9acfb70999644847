"""gcp_batch past GCP Batch's cap (a task's ``maxRetryCount`` ≤ 10, and a Spot preemption
spends one), against the loopback GCP Batch: a task preempted past its maxRetryCount fails the
job, and torchx_nb creates it again as ``ID-a2`` under the same handle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shell_app, wait_for
from tests.infra.gcp import GcpFake
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.gcp_batch import GcpBatchScheduler, parse_app_id
from torchx_nb.schedulers.gcp_batch.request import parse_trial_id
from torchx_nb.schedulers.gcp_batch.spot import next_job_id
from torchx_nb.specs import AppState, parse_app_handle
from torchx_nb.specs.api import InvalidRunConfigException


def preempt_when_running(runner: object, gcp_env: GcpFake, handle: str) -> None:
    """Preempt task 0 of the handle's current GCP job once it runs."""
    from torchx_nb.runner import Runner

    assert isinstance(runner, Runner)

    def running() -> bool:
        status = runner.status(handle)
        return status is not None and status.state == AppState.RUNNING

    wait_for(running, 60)
    app_id = parse_app_handle(handle).app_id
    gcp_env.preempt_task("projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id)), 0)


def preemptions(runner: object, handle: str) -> int:
    """The job's preemptions once a status call kept what GCP Batch lists."""
    from torchx_nb.runner import Runner

    assert isinstance(runner, Runner)
    runner.status(handle)
    rec = runner.jobstore.get(handle)
    return rec.preemptions if rec is not None else 0


def test_a_job_preempted_past_max_retry_count_is_created_again_under_its_handle(
    gcp_env: GcpFake,
) -> None:
    """GCP's cap is met early here: max_preemptions=1 makes the task's maxRetryCount 1, and
    the job's limit is then raised to 20 in the store — as a job with the default limit of
    20 meets GCP's cap of 10, in 2 preemptions instead of 11."""
    project = "spot-again"
    gcp_env.timed_projects[project] = 3.0
    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 1}
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        first = runner.jobstore.get(handle)
        assert first is not None
        runner.jobstore.set_max_preemptions(handle, 20)
        preempt_when_running(runner, gcp_env, handle)  # retried by GCP (maxRetryCount 1)
        wait_for(lambda: preemptions(runner, handle) >= 1, 60)
        preempt_when_running(runner, gcp_env, handle)  # past maxRetryCount: the job FAILS
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        assert ended.msg.startswith("preempted at ") and "(Spot VM preempted)" in ended.msg
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.state == "SUCCEEDED"
        assert (rec.attempt, rec.preemptions, rec.failures) == (3, 2, 0)
        assert rec.app_id == f"{first.app_id}-a2"
        log = runner.attempt_log(handle)
        assert [(a.ended_why, a.app_id) for a in log.attempts] == [
            ("preempted", first.app_id),
            ("preempted", first.app_id),
            ("succeeded", rec.app_id),
        ]


def test_past_the_limit_the_job_is_not_created_again(gcp_env: GcpFake) -> None:
    project = "spot-limit"
    gcp_env.timed_projects[project] = 3.0
    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 1}
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        preempt_when_running(runner, gcp_env, handle)
        wait_for(lambda: preemptions(runner, handle) >= 1, 60)
        preempt_when_running(runner, gcp_env, handle)
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.FAILED, ended
        assert ended.msg.startswith("preempted 2 times (limit 1): preempted at ")
        rec = runner.jobstore.get(handle)
        assert rec is not None and not rec.app_id.endswith("-a2")


def test_the_next_job_id_keeps_gcp_s_rules() -> None:
    assert next_job_id("train-x1") == "train-x1-a2"
    assert next_job_id("train-x1-a9") == "train-x1-a10"
    long = next_job_id("t" * 62 + "-")
    assert len(long) <= 63 and long.endswith("-a2") and "--" not in long


def job_name(runner: object, handle: str) -> str:
    """The GCP name of the handle's current job, as the job store has it."""
    from torchx_nb.runner import Runner

    assert isinstance(runner, Runner)
    rec = runner.jobstore.get(handle)
    assert rec is not None
    return "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(rec.app_id))


def task_running(gcp_env: GcpFake, name: str, attempt: int) -> bool:
    """Task 0 of the GCP job ``name`` runs its run ``attempt`` (from 0)."""
    with gcp_env.lock:
        job = gcp_env.jobs.get(name)
        return job is not None and (job.tasks[0].state, job.tasks[0].attempt) == (
            "RUNNING",
            attempt,
        )


def test_a_job_created_again_keeps_what_is_left_of_max_retries(gcp_env: GcpFake) -> None:
    """With no ledger (no output_path) GCP's maxRetryCount spends a retry on a preemption as
    on a failure: max_retries=1 is maxRetryCount 1. The program fails once (the retry spent),
    then a preemption fails the job past maxRetryCount: the job created again has no retry
    left, so its program's failure ends the job FAILED (before, it had max_retries again and
    ran again to SUCCEEDED); its preemptions are still retried (maxRetryCount 10, RETRY_TASK
    on 50001 only)."""
    project = "spot-budget"
    gcp_env.timed_projects[project] = 8.0
    with get_runner() as runner:
        app = shell_app("true", "unused:1", retries=1)
        handle = runner.run(app, "gcp_batch", {"project": project, "spot": True})
        first = job_name(runner, handle)
        wait_for(lambda: task_running(gcp_env, first, 0), 60)
        gcp_env.fail_task(first, 0, code=3)  # the program's failure: retried by GCP
        wait_for(lambda: task_running(gcp_env, first, 1), 60)
        gcp_env.preempt_task(first, 0)  # past maxRetryCount 1: the job FAILS with 50001
        wait_for(lambda: bool(runner.status(handle)) and job_name(runner, handle) != first, 60)
        again = job_name(runner, handle)
        assert again == f"{first}-a2"
        wait_for(lambda: task_running(gcp_env, again, 0), 60)
        gcp_env.fail_task(again, 0, code=3)  # the program's second failure: not retried
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.FAILED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None
        assert (rec.state, rec.attempt, rec.preemptions, rec.failures) == ("FAILED", 2, 1, 1)
        # what GCP keeps of the job created again: no retry left, preemptions still retried
        job = gcp_env.jobs[again].job
        assert job.labels["torchx_nb_retries_left"] == "0"
        spec = job.task_groups[0].task_spec
        assert spec.max_retry_count == 10  # min(10, max_preemptions 20)
        assert [
            (p.action.name, list(p.action_condition.exit_codes)) for p in spec.lifecycle_policies
        ] == [("RETRY_TASK", [50001])]
        # its tasks are told the job before was preempted: a ledger then calls that job's last
        # run, killed without a SIGTERM, a preemption (tests/apps/test_checkpoint.py)
        uid = gcp_env.jobs[first].uid
        assert uid and spec.environment.variables["TORCHX_NB_RECLAIMED"] == uid


class Killed(BaseException):
    """The watcher's process dies here."""


def test_a_job_created_again_by_a_watcher_that_died_before_keeping_it_is_not_sent_twice(
    gcp_env: GcpFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher creates ``ID-a2`` and dies before the job store keeps it; the watcher that
    takes its stale claim over finds ``ID-a2`` already there (ALREADY_EXISTS) and follows it
    (before, its create failed and the job ended FAILED: 'submitting it again failed')."""
    from torchx_nb import attempt_store
    from torchx_nb.jobstore import JobStore

    project = "spot-once"
    gcp_env.timed_projects[project] = 3.0
    real = JobStore.start_attempt

    def dies(*args: object, **kwargs: object) -> bool:
        raise Killed

    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 0}  # maxRetryCount 0
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        runner.jobstore.set_max_preemptions(handle, 20)
        first = job_name(runner, handle)
        monkeypatch.setattr(JobStore, "start_attempt", dies)
        preempt_when_running(runner, gcp_env, handle)  # the job FAILS with 50001
        with pytest.raises(Killed):
            runner.wait(handle, wait_interval=0.3, timeout=60)
    assert f"{first}-a2" in gcp_env.jobs  # sent, and not kept
    monkeypatch.setattr(JobStore, "start_attempt", real)
    monkeypatch.setattr(attempt_store, "CLAIM_SECONDS", 0.0)  # the claim is stale at once
    with get_runner() as runner:
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.attempt == 2
        assert job_name(runner, handle) == f"{first}-a2"
    assert [n for n in gcp_env.jobs if n.startswith(first)] == [first, f"{first}-a2"]


def test_a_sweep_trial_preempted_past_max_retry_count_runs_again_with_its_own_values(
    gcp_env: GcpFake,
    gcs_env: Any,
    gar_registry: Any,
    python_in_registry: str,
    tmp_path: Path,
) -> None:
    """A sweep's trials are the tasks of one GCP job (``PROJECT:LOCATION:JOB:INDEX``); trial
    1's task is preempted past its maxRetryCount (0 here) and ends 50001: it is created again
    as a job of its own, ``JOB-t1-a2``, one task with its index in ``TORCHX_NB_TRIAL_INDEX``,
    and runs with its own values to SUCCEEDED; trial 0 is untouched (before, the trial ended
    FAILED 'exit code 50001': nothing sent it again)."""
    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.components.cell import cell
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    gcs_env.bucket("gcp-spot-sweeps")
    ws = tmp_path / "ws"
    ws.mkdir()
    mounts, path = host_python_mounts()
    source = (
        "import os, time\n"
        "print('trial lr', os.environ['TORCHX_PARAM_LR'], 'attempt',"
        " os.environ.get('TORCHX_NB_ATTEMPT'), flush=True)\n"
        "if lr > 0.15 and os.environ.get('TORCHX_NB_ATTEMPT') == '1':\n"
        "    time.sleep(120)\n"
        "lr * 10\n"
    )
    app = cell(
        source=source,
        image=python_in_registry,
        memMB=256,
        mounts=mounts,
        env={"PATH": path, **gcs_env.env},
    )
    cfg = [
        f"image_repo={gar_registry.host}/torchx-test/spot-sweeps,builder=registry,quiet=True",
        "output_path=gs://gcp-spot-sweeps/runs,spot=True,max_preemptions=0",  # maxRetryCount 0
    ]
    with get_runner() as runner:
        request = SweepRequest(
            RunRequest(app=app, scheduler="gcp_batch", cfg=cfg, workspace=str(ws)),
            {"lr": [0.1, 0.2]},
        )
        sw = start(runner, request)
        assert sw.array
        handles = [h for h in sw.handles if h]
        for h in handles:  # the job's limit raised in the store, past GCP's cap of 0
            runner.jobstore.set_max_preemptions(h, 20)
        trial = parse_app_handle(handles[1]).app_id
        project, location, name, _ = parse_trial_id(trial)
        full = f"projects/{project}/locations/{location}/jobs/{name}"

        def running() -> bool:
            status = runner.status(handles[1])
            return (
                status is not None
                and status.state == AppState.RUNNING
                and ("attempt 1" in "".join(runner.log_lines(handles[1], "cell", 0)))
            )

        wait_for(running, 180, 0.5)
        gcp_env.preempt_task(full, 1)  # past maxRetryCount 0: task 1 ends 50001
        statuses = sw.wait(timeout=240)
        assert [s.state if s else None for s in statuses] == [AppState.SUCCEEDED] * 2, [
            (h, [(a.n, a.app_id, a.ended_why) for a in runner.jobstore.attempts(h)], s)
            for h, s in zip(handles, statuses, strict=True)
        ]
        rec = runner.jobstore.get(handles[1])
        assert rec is not None and (rec.app_id, rec.attempt) == (
            f"{project}:{location}:{name}-t1-a2",
            2,
        )
        assert "trial lr 0.2 attempt 2" in "".join(runner.log_lines(handles[1], "cell", 0))
        frame = sw.results()
        assert list(frame["result"]) == [1.0, 2.0]
        first = runner.jobstore.get(handles[0])
        assert first is not None and (first.app_id, first.attempt) == (f"{trial[:-2]}:0", 1)
    again = gcp_env.jobs[f"{full}-t1-a2"].job
    group = again.task_groups[0]
    assert (group.task_count, group.parallelism) == (1, 1)
    env = group.task_spec.environment.variables
    assert (env["TORCHX_NB_TRIAL_INDEX"], env["TORCHX_NB_TRIAL_FROM"]) == (
        "1",
        "TORCHX_NB_TRIAL_INDEX",
    )
    assert env["TORCHX_NB_RECLAIMED"] == gcp_env.jobs[full].uid
    assert [n for n in gcp_env.jobs if n.startswith(full)] == [full, f"{full}-t1-a2"]


def preempted_past_the_cap(gcp_env: GcpFake, sched: Any, info: Any, times: int) -> str:
    """Create ``info``'s job (a timed project's), preempt its task ``times`` times (each run
    once it runs) and return its app id once GCP Batch has failed it with 50001."""
    app_id = sched.schedule(info)
    name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id))
    for attempt in range(times):
        wait_for(lambda a=attempt: task_running(gcp_env, name, a), 60)  # type: ignore[misc]
        gcp_env.preempt_task(name, 0)
    wait_for(lambda: gcp_env.jobs[name].state == "FAILED", 60)
    return app_id


def spec_of(gcp_env: GcpFake, app_id: str) -> tuple[int, list[tuple[str, list[int]]]]:
    """The maxRetryCount and lifecycle policies GCP keeps for the job ``app_id``."""
    spec = (
        gcp_env.jobs["projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id))]
        .job.task_groups[0]
        .task_spec
    )
    policies = [
        (p.action.name, list(p.action_condition.exit_codes)) for p in spec.lifecycle_policies
    ]
    return spec.max_retry_count, policies


def test_budget_labels_are_not_the_user_s_to_give(gcp_env: GcpFake) -> None:
    """A user's label (``-cfg labels`` or the app's metadata) named as our budget labels is one
    line before anything is sent (before: on a job with a ledger it stayed, and the job created
    again took its value for its retries; on one without, ours replaced it without a word)."""
    sched = GcpBatchScheduler("torchx")
    app = shell_app("true", "unused:1", retries=1)
    for cfg in (
        {"labels": {"torchx_nb_retries_left": "9"}},
        {"labels": {"TorchX_NB.max_preemptions": "9"}, "output_path": "gs://b/p"},
    ):
        with pytest.raises(InvalidRunConfigException) as e:
            sched.submit_dryrun(app, {"project": "spot-labels", "spot": True, **cfg})
        assert str(e.value).count("\n") == 0 and "torchx_nb_" in str(e.value), e.value
    app.metadata["torchx_nb_retries_left"] = "9"
    with pytest.raises(InvalidRunConfigException, match="torchx_nb_retries_left"):
        sched.submit_dryrun(app, {"project": "spot-labels", "spot": True})


def test_a_ledger_job_created_again_keeps_its_own_retries_whatever_its_labels(
    gcp_env: GcpFake,
) -> None:
    """A job with a ledger (output_path) whose labels name our budget (a job created outside
    torchx_nb, or before such labels were refused): the job created again keeps the ledger's
    maxRetryCount and FAIL_TASK on 171 (before: it took the labels' 9 retries and no policy)."""
    project = "spot-ledger-labels"
    gcp_env.timed_projects[project] = 30.0
    sched = GcpBatchScheduler("torchx")
    app = shell_app("true", "unused:1", retries=1)
    cfg = {"project": project, "spot": True, "max_preemptions": 0, "output_path": "gs://b/p"}
    info = sched.submit_dryrun(app, cfg)
    info.request.job_def.labels.update(
        {"torchx_nb_retries_left": "9", "torchx_nb_max_preemptions": "9"}
    )
    app_id = preempted_past_the_cap(gcp_env, sched, info, 2)  # maxRetryCount 1
    assert spec_of(gcp_env, app_id) == (1, [("FAIL_TASK", [171])])
    again = sched.submit_again(app_id)
    assert spec_of(gcp_env, again) == (1, [("FAIL_TASK", [171])])


def test_a_store_of_the_user_s_own_keeps_the_budget_in_the_labels(gcp_env: GcpFake) -> None:
    """No output_path but the user's own checkpoint store in the role's env (docs/spot.md
    says how): that ledger knows no max_retries, so the budget labels count — the program
    failed its one retry, the job created again has none left (before: the store alone read
    as a ledger, the labels were ignored and the copy kept maxRetryCount 1 and no policy)."""
    project = "spot-own-store"
    gcp_env.timed_projects[project] = 30.0
    sched = GcpBatchScheduler("torchx")
    app = shell_app("true", "unused:1", retries=1)
    app.roles[0].env["TORCHX_NB_CHECKPOINT_URL"] = "gs://mine/ckpt"
    info = sched.submit_dryrun(app, {"project": project, "spot": True})
    assert info.request.job_def.labels["torchx_nb_retries_left"] == "1"
    app_id = sched.schedule(info)  # maxRetryCount 1, no policy
    name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id))
    wait_for(lambda: task_running(gcp_env, name, 0), 60)
    gcp_env.fail_task(name, 0, code=3)  # the program's failure: its one retry spent
    wait_for(lambda: task_running(gcp_env, name, 1), 60)
    gcp_env.preempt_task(name, 0)  # past maxRetryCount: the job FAILS with 50001
    wait_for(lambda: gcp_env.jobs[name].state == "FAILED", 60)
    again = sched.submit_again(app_id)
    assert spec_of(gcp_env, again) == (10, [("RETRY_TASK", [50001])])


@pytest.mark.parametrize(
    "labels", [{}, {"torchx_nb_retries_left": "lots"}, {"torchx_nb_retries_left": "²"}]
)
def test_a_job_without_a_ledger_whose_budget_labels_are_odd_gets_no_more_than_it_had(
    gcp_env: GcpFake, labels: dict[str, str]
) -> None:
    """A job without a ledger whose budget labels are missing (an earlier version's) or not a
    whole number (a job created outside torchx_nb): each counts 0 — no retry of the program's
    — and both labels are written back in our shape (before: the job created again got all of
    its first maxRetryCount, or '²' failed the create: 'submitting it again failed')."""
    project = "spot-odd-labels"
    gcp_env.timed_projects[project] = 30.0
    sched = GcpBatchScheduler("torchx")
    app = shell_app("true", "unused:1", retries=3)
    info = sched.submit_dryrun(app, {"project": project, "spot": True})
    job_labels = info.request.job_def.labels
    del job_labels["torchx_nb_retries_left"], job_labels["torchx_nb_max_preemptions"]
    job_labels.update(labels)
    app_id = preempted_past_the_cap(gcp_env, sched, info, 4)  # maxRetryCount 3, no policy
    again = sched.submit_again(app_id)
    assert spec_of(gcp_env, again) == (0, [("RETRY_TASK", [50001])])
    job = gcp_env.jobs["projects/{}/locations/{}/jobs/{}".format(*parse_app_id(again))].job
    assert (job.labels["torchx_nb_retries_left"], job.labels["torchx_nb_max_preemptions"]) == (
        "0",
        "0",
    )


def test_ids_past_a9_near_63_characters_and_an_app_named_a5() -> None:
    """``-a9`` goes on as ``-a10``; a chain from an id of 63 characters stays within 63, each
    id its own; a trial's chain keeps its ``-tINDEX`` to ``-a99``; an app named ``train-a5``
    is not taken for an attempt (its id ends with its random part, which has no vowel)."""
    from torchx_nb.schedulers.gcp_batch.request import job_name
    from torchx_nb.schedulers.gcp_batch.spot import trial_job_id

    chain = ["x" * 63]
    for _ in range(12):
        chain.append(next_job_id(chain[-1]))
    assert all(len(i) <= 63 for i in chain) and len(set(chain)) == len(chain)
    assert chain[9].endswith("-a10") and chain[8].endswith("-a9")
    ours = job_name("cell" + "y" * 60)
    trial = [trial_job_id(ours, 123)]
    for _ in range(97):
        trial.append(next_job_id(trial[-1]))
    assert all(len(i) <= 63 and "-t123-a" in i for i in trial), trial[-1]
    assert trial[-1].endswith("-t123-a99") and len(set(trial)) == len(trial)
    for _ in range(901):  # past -a99 ID is cut again, never the trial's index
        trial.append(next_job_id(trial[-1]))
    assert all(len(i) <= 63 and "-t123-a" in i for i in trial), trial[-1]
    assert trial[-1].endswith("-t123-a1000") and len(set(trial)) == len(trial)
    named = job_name("train-a5")
    assert next_job_id(named) == f"{named}-a2"


def test_a_job_of_the_next_id_that_is_not_ours_is_passed_over(gcp_env: GcpFake) -> None:
    """A job of the next id (``ID-a2``) made by someone else (gcloud, with our id): the create
    answered ALREADY_EXISTS is not read as 'already sent' — that job does not follow ours
    (label ``torchx_nb_again_of``) — so the next id, ``ID-a3``, is created and the other job
    is left alone (before, it was taken for the next attempt and nothing was sent)."""
    from google.cloud import batch_v1

    project = "spot-next-taken"
    gcp_env.timed_projects[project] = 30.0
    sched = GcpBatchScheduler("torchx")
    info = sched.submit_dryrun(shell_app("true", "unused:1"), {"project": project, "spot": True})
    info.request.job_def.task_groups[0].task_spec.max_retry_count = 0
    app_id = preempted_past_the_cap(gcp_env, sched, info, 1)
    p, loc, name = parse_app_id(app_id)
    theirs = batch_v1.Job.deserialize(batch_v1.Job.serialize(info.request.job_def))
    theirs.labels.pop("torchx_nb_retries_left")
    sched.gcp.batch.create_job(
        parent=f"projects/{p}/locations/{loc}", job=theirs, job_id=f"{name}-a2"
    )
    again = sched.submit_again(app_id)
    assert again == f"{p}:{loc}:{name}-a3"
    first = gcp_env.jobs[f"projects/{p}/locations/{loc}/jobs/{name}"]
    made = gcp_env.jobs[f"projects/{p}/locations/{loc}/jobs/{name}-a3"].job
    assert made.labels["torchx_nb_again_of"] == first.uid
    # a watcher that sent -a3 and died before keeping it: the one after follows -a3
    assert sched.submit_again(app_id) == again
    assert [n for n in gcp_env.jobs if n.startswith(first.name)] == [
        first.name,
        f"{first.name}-a2",
        f"{first.name}-a3",
    ]


def test_cancel_all_stops_a_trial_that_runs_as_a_job_of_its_own(gcp_env: GcpFake) -> None:
    """A sweep's Cancel all after trial 1 was created again as a job of its own (``ID-t1-a2``,
    a plain job id among the trial ids): that job is cancelled with the sweep's job (before,
    ``P:L`` was taken for its array: 'not a gcp_batch app id', and nothing was cancelled)."""
    project = "spot-cancel-all"
    gcp_env.idle_projects.add(project)
    sched = GcpBatchScheduler("torchx")
    sweep = sched.submit(shell_app("true", "unused:1"), {"project": project})
    own = sched.submit(shell_app("true", "unused:1"), {"project": project})
    sched.cancel_arrays([f"{sweep}:0", own])
    for app_id in (sweep, own):
        name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id))
        wait_for(lambda n=name: gcp_env.jobs[n].state == "CANCELLED", 30)  # type: ignore[misc]


def test_a_trial_preempted_before_its_sweep_s_job_was_cancelled_is_not_created_again(
    gcp_env: GcpFake,
) -> None:
    """Trial 1 of a sweep's job is preempted past maxRetryCount (its task ends 50001) while
    trial 0 runs on; nothing watches (the notebook closed); then the sweep's job is cancelled
    outside this kernel (the console, gcloud, Cancel all on another machine). The trial is
    cancelled with its sweep's job — never taken for preempted, which would create it again as
    ``ID-t1-a2`` and run it after its sweep was cancelled (before: FAILED and
    ``ended_preempted``)."""
    project = "spot-sweep-cancelled"
    gcp_env.timed_projects[project] = 60.0
    sched = GcpBatchScheduler("torchx")
    info = sched.submit_dryrun(shell_app("true", "unused:1"), {"project": project, "spot": True})
    group = info.request.job_def.task_groups[0]
    group.task_count, group.parallelism = 2, 2
    group.task_spec.max_retry_count = 0
    app_id = sched.schedule(info)
    name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id))

    def both_running() -> bool:
        with gcp_env.lock:
            return [t.state for t in gcp_env.jobs[name].tasks] == ["RUNNING"] * 2

    wait_for(both_running, 60)
    gcp_env.preempt_task(name, 1)
    wait_for(lambda: gcp_env.jobs[name].tasks[1].state == "FAILED", 60)
    assert gcp_env.jobs[name].state not in ("FAILED", "CANCELLED")  # trial 0 runs on
    sched.gcp.batch.cancel_job(name=name)  # as the console or gcloud cancels it
    wait_for(lambda: gcp_env.jobs[name].state == "CANCELLED", 60)
    trial = sched.describe(f"{app_id}:1")
    assert trial is not None
    assert (trial.state, trial.ended_preempted) == (AppState.CANCELLED, False), trial
    assert "cancelled with its sweep's job" in trial.msg


def test_a_job_preempted_past_the_cap_seen_by_the_poller_is_created_again(
    gcp_env: GcpFake,
) -> None:
    """The kernel's poller, the server and the job list read statuses with one
    ``describe_many`` (``Runner.refresh``), which lists a job's tasks only when they differ in
    state: a job of one task preempted past maxRetryCount (all its tasks FAILED alike) must
    still read as ended preempted — created again as ``ID-a2`` and SUCCEEDED (before: FAILED
    'exit code 50001' recorded as its end, never created again)."""
    project = "spot-again-polled"
    gcp_env.timed_projects[project] = 3.0
    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 0}  # maxRetryCount 0
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        first = runner.jobstore.get(handle)
        assert first is not None
        runner.jobstore.set_max_preemptions(handle, 20)
        preempt_when_running(runner, gcp_env, handle)
        name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(first.app_id))
        wait_for(lambda: gcp_env.jobs[name].state == "FAILED", 60)
        polled = runner.refresh([handle])[handle]
        assert not isinstance(polled, Exception) and polled is not None
        assert polled.state != AppState.FAILED, polled
        ended = runner.wait(handle, wait_interval=0.3, timeout=120)
        assert ended is not None and ended.state == AppState.SUCCEEDED, ended
        rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.attempt, rec.preemptions) == (2, 1)
        assert rec.app_id == f"{first.app_id}-a2"


def test_a_preemption_gcp_retried_is_kept_when_only_the_poller_watches(
    gcp_env: GcpFake,
) -> None:
    """A Spot job's task preempted once and retried by GCP within maxRetryCount: the job stays
    RUNNING with its one task RUNNING, so its state alone says nothing. Watched only by the
    poller (``Runner.refresh``: ``describe_many``), the preemption is still kept — the job
    ends SUCCEEDED with 1 preemption and says when it was preempted (before: 0 preemptions,
    no word of it, and ``max_preemptions`` never counted)."""
    project = "spot-retried-polled"
    gcp_env.timed_projects[project] = 6.0
    with get_runner() as runner:
        cfg = {"project": project, "spot": True, "max_preemptions": 2}
        handle = runner.run(shell_app("true", "unused:1"), "gcp_batch", cfg)
        first = runner.jobstore.get(handle)
        assert first is not None
        name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(first.app_id))
        wait_for(lambda: task_running(gcp_env, name, 0), 60)
        gcp_env.preempt_task(name, 0)
        wait_for(lambda: task_running(gcp_env, name, 1), 60)
        seen: list[Any] = []

        def ended() -> bool:
            status = runner.refresh([handle])[handle]
            assert status is not None and not isinstance(status, Exception)
            seen.append(status)
            return status.state == AppState.SUCCEEDED

        wait_for(ended, 60, 0.5)
        assert seen[-1].msg.startswith("preempted at ") and "(Spot VM preempted)" in seen[-1].msg
        rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.state, rec.preemptions) == ("SUCCEEDED", 1)
