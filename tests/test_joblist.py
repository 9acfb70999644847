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
