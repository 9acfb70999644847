from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from torchx_nb.jobstore import JobRecord, JobStore, default_path


def record(handle: str, submitted: float = 0.0, scheduler: str = "local_cwd") -> JobRecord:
    return JobRecord(
        handle=handle,
        scheduler=scheduler,
        session="torchx",
        app_id=handle.rsplit("/", 1)[1],
        name="n",
        image="img",
        submitted=submitted or time.time(),
        state="SUBMITTED",
        updated=time.time(),
    )


def test_default_path_follows_env(tmp_path: Path, monkeypatch: object) -> None:
    import os

    assert default_path() == Path(os.environ["TORCHX_NB_DATA_DIR"]) / "jobs.sqlite"
    os.environ["TORCHX_NB_JOBSTORE"] = str(tmp_path / "x.db")
    try:
        assert default_path() == tmp_path / "x.db"
    finally:
        del os.environ["TORCHX_NB_JOBSTORE"]


def test_add_get_update_list(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "j.db")
    store.add(record("local_cwd://torchx/a", 1.0))
    store.add(record("aws_batch://torchx/q:b", 2.0, scheduler="aws_batch"))
    store.update_state("local_cwd://torchx/a", "RUNNING")
    rec = store.get("local_cwd://torchx/a")
    assert rec is not None and rec.state == "RUNNING" and rec.ended is None
    store.update_state("local_cwd://torchx/a", "SUCCEEDED", "done")
    rec = store.get("local_cwd://torchx/a")
    assert rec is not None and rec.is_terminal and rec.ended and rec.msg == "done"
    first_end = rec.ended
    store.update_state("local_cwd://torchx/a", "SUCCEEDED")
    assert store.get("local_cwd://torchx/a").ended == first_end  # type: ignore[union-attr]
    assert [r.handle for r in store.list()] == ["aws_batch://torchx/q:b", "local_cwd://torchx/a"]
    assert [r.scheduler for r in store.list(scheduler="aws_batch")] == ["aws_batch"]
    assert [r.handle for r in store.list(active_only=True)] == ["aws_batch://torchx/q:b"]
    assert len(store.list(limit=1)) == 1
    store.delete("aws_batch://torchx/q:b")
    assert store.get("aws_batch://torchx/q:b") is None


def _writer(path: str, worker: int, count: int) -> None:
    store = JobStore(path)
    for i in range(count):
        store.add(record(f"local_cwd://torchx/w{worker}-{i}"))
        store.update_state(f"local_cwd://torchx/w{worker}-{i}", "RUNNING")


def test_concurrent_writers_from_several_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    JobStore(path)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = JobStore(path).list()
    assert len(rows) == 160 and {r.state for r in rows} == {"RUNNING"}
