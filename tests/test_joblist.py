from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from torchx_nb.components.utils import sh
from torchx_nb.joblist import job_rows
from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.runner import Runner
from torchx_nb.schedulers import get_scheduler_factories
from torchx_nb.schedulers.abilities import DescribesMany
from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.local_cwd import LocalCwdScheduler


class Batched(DescribesMany, LocalCwdScheduler):
    calls: list[int] = []

    def describe_many(self, app_ids: list[str]) -> Mapping[str, DescribeAppResponse | None]:
        Batched.calls.append(len(app_ids))
        return {a: LocalCwdScheduler.describe(self, a) for a in app_ids}

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        raise AssertionError("job_rows must use describe_many")


def test_refresh_batches_per_scheduler() -> None:
    factories: dict[str, Any] = dict(get_scheduler_factories())
    factories["batched"] = lambda session, **kw: Batched(session, **kw)
    runner = Runner(scheduler_factories=factories)
    handles = [runner.schedule(runner.dryrun(sh("true"), "local_cwd")) for _ in range(5)]
    for h in handles:
        rec = runner.jobstore.get(h)
        assert rec is not None
        rec.handle = h.replace("local_cwd://", "batched://")
        rec.scheduler = "batched"
        runner.jobstore.add(rec)
    Batched.calls.clear()
    rows = job_rows(runner, scheduler=None)
    batched = [r for r in rows if r["scheduler"] == "batched"]
    assert len(batched) == 5 and Batched.calls == [5]
    assert {r["state"] for r in batched} <= {"RUNNING", "SUCCEEDED", "PENDING"}


class BrokenStore(JobStore):
    def add(self, record: JobRecord) -> None:
        raise OSError("disk full")


def test_a_submitted_job_is_never_lost_silently(tmp_path: Any) -> None:
    runner = Runner(jobstore=BrokenStore(tmp_path / "j.db"))
    with pytest.warns(UserWarning, match=r"was submitted but could not be recorded.*disk full"):
        handle = runner.run(sh("true"), "local_cwd")
    assert runner.wait(handle, wait_interval=0.1).state.name == "SUCCEEDED"  # type: ignore[union-attr]


def test_jobs_only_the_scheduler_knows_get_its_times(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Runner("torchx") as first:
        handle = first.run(sh("sleep", "0.3"), "local_cwd")
        ended = first.wait(handle, wait_interval=0.05)
    assert ended is not None and ended.started and ended.ended
    monkeypatch.setenv("TORCHX_NB_JOBSTORE", str(tmp_path / "another-store.sqlite"))
    with Runner("torchx") as other:
        assert other.jobstore.list() == []
        rows = {r["handle"]: r for r in job_rows(other, scheduler="local_cwd")}
    row = rows[handle]
    assert row["submitted"] == ended.started
    assert row["duration"] == pytest.approx(ended.ended - ended.started)
    assert row["state"] == "SUCCEEDED"


def test_a_job_that_ended_unwatched_gets_its_times_and_notice_at_the_next_list(
    isolated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torchx-nb list -s local_cwd`` of a job that ended while nothing watched: the row and
    the store carry the backend's start and end (not the list's time), and the job-end notice
    goes out, through the same code as ``status``."""
    import time

    from tests.conftest import cli
    from tests.infra.webhook import webhook_receiver
    from torchx_nb.cli import _fmt_time
    from torchx_nb.phases import fmt_duration
    from torchx_nb.specs.api import parse_app_handle

    monkeypatch.delenv("TORCHX_NB_NOTIFY_URL", raising=False)
    code, out, err = cli("run", "-s", "local_cwd", "utils.sh", "sleep", "2")
    assert code == 0, err
    handle = out.strip().splitlines()[-1]
    sched = LocalCwdScheduler("torchx")
    app_id = parse_app_handle(handle).app_id
    deadline = time.monotonic() + 60
    desc = sched.describe(app_id)
    while (desc is None or desc.state.name != "SUCCEEDED") and time.monotonic() < deadline:
        time.sleep(0.2)
        desc = sched.describe(app_id)
    assert desc is not None and desc.state.name == "SUCCEEDED"
    assert desc.started is not None and desc.ended is not None
    time.sleep(3)  # the list comes well after the end: its time must not become the end
    store = JobStore()
    before = store.get(handle)
    assert before is not None and before.state == "SUBMITTED"  # nothing watched it
    with webhook_receiver() as hook:
        code, out, err = cli("list", "-s", "local_cwd", env={"TORCHX_NB_NOTIFY_URL": hook.url})
        assert code == 0, err
        rec = store.get(handle)
        assert rec is not None
        assert (rec.state, rec.started, rec.ended) == ("SUCCEEDED", desc.started, desc.ended)
        header, *rows = out.splitlines()
        assert header.split() == [
            "HANDLE", "STATE", "NAME", "SUBMITTED", "DURATION", "QUEUED", "RAN"
        ]  # fmt: skip
        (row,) = [r for r in rows if r.startswith(handle)]
        assert row.split() == [
            handle,
            "SUCCEEDED",
            rec.name,
            *_fmt_time(rec.submitted).split(),
            fmt_duration(desc.ended - rec.submitted),
            fmt_duration(desc.started - rec.submitted),
            fmt_duration(desc.ended - desc.started),
        ]
        assert fmt_duration(desc.ended - desc.started) in ("0:02", "0:03")
        deadline = time.monotonic() + 30
        while not hook.posts and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        (body,) = hook.bodies()
        assert (body["handle"], body["state"]) == (handle, "SUCCEEDED")


def test_describe_records_what_it_learns(isolated: Any) -> None:
    """``torchx-nb describe`` of a job that ended unwatched records its end and the backend's
    times in the store, as ``status`` does."""
    import time

    from tests.conftest import cli
    from torchx_nb.specs.api import parse_app_handle

    code, out, err = cli("run", "-s", "local_cwd", "utils.sh", "true")
    assert code == 0, err
    handle = out.strip().splitlines()[-1]
    sched = LocalCwdScheduler("torchx")
    app_id = parse_app_handle(handle).app_id
    deadline = time.monotonic() + 60
    desc = sched.describe(app_id)
    while (desc is None or desc.state.name != "SUCCEEDED") and time.monotonic() < deadline:
        time.sleep(0.2)
        desc = sched.describe(app_id)
    assert desc is not None and desc.ended is not None
    code, out, err = cli("describe", handle)
    assert code == 0, err
    rec = JobStore().get(handle)
    assert rec is not None
    assert (rec.state, rec.started, rec.ended) == ("SUCCEEDED", desc.started, desc.ended)


def preempted_once(path: Any) -> str:
    """A Slurm job in a store at ``path``: started 300 s ago, preempted 60 s in, held 120 s,
    resumed, ended 60 s later — it ran 2 minutes of its 4 between start and end."""
    import time

    from tests.test_attempt_store import H, job
    from torchx_nb.specs.preemption import Preemption

    store = JobStore(path)
    store.add(job())
    t = time.time() - 300
    store.update_state(H, "RUNNING", started=t)
    store.record_preemptions(H, "41", [Preemption(t + 60, "spot", resumed_at=t + 180)])
    store.update_state(H, "SUCCEEDED", ended=t + 240)
    return H


def test_ran_counts_the_attempts_runs_not_the_time_held_between_them(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torchx-nb list``'s RAN (and the REST rows' ``ran``) of a job preempted once: its two
    runs added up, not the held time between them (it said 4:00)."""
    from tests.conftest import cli
    from torchx_nb.server.jobs import JobService

    path = tmp_path / "jobs.sqlite"
    handle = preempted_once(path)
    code, out, err = cli("list", env={"TORCHX_NB_JOBSTORE": str(path)})
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["HANDLE", "STATE", "NAME", "SUBMITTED", "DURATION", "QUEUED", "RAN"]
    assert row.split()[0] == handle and row.split()[-3:] == ["9:00", "5:00", "2:00"]
    monkeypatch.setenv("TORCHX_NB_JOBSTORE", str(path))
    service = JobService()
    try:
        rec = service.runner.jobstore.get(handle)
        assert rec is not None and round(service.row(rec)["ran"]) == 120
    finally:
        service.close()
