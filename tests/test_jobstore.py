from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest

from torchx_nb.jobstore import JobRecord, JobStore, JobStoreError, default_path


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


def rec(
    handle: str,
    name: str = "n",
    state: str = "SUBMITTED",
    submitted: float = 0.0,
    updated: float = 0.0,
) -> JobRecord:
    import dataclasses

    base = record(handle, submitted)
    return dataclasses.replace(base, name=name, state=state, updated=updated or base.updated)


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


def test_changes_follow_the_stores_counter_not_clocks(tmp_path: Path) -> None:
    """A writer whose clock is an hour ahead does not hide later changes: the store numbers
    every insert and state write itself."""
    store = JobStore(tmp_path / "jobs.db")
    start = store.changes(10**12)
    assert start.rev == 0 and start.records == []
    future = time.time() + 3600
    store.add(rec("local_cwd://torchx/future", state="SUCCEEDED", updated=future))
    store.add(rec("local_cwd://torchx/now"))
    store.update_state("local_cwd://torchx/now", "RUNNING")
    found = store.changes(0)
    assert [(r.handle, r.rev) for r in found.records] == [
        ("local_cwd://torchx/future", 1),
        ("local_cwd://torchx/now", 3),
    ]
    assert found.rev == 3
    store.update_state("local_cwd://torchx/now", "RUNNING")  # no change, no new number
    assert store.changes(3).records == []
    store.delete("local_cwd://torchx/future")
    store.update_state("local_cwd://torchx/now", "SUCCEEDED")
    later = store.changes(3)
    assert [(r.handle, r.state, r.rev) for r in later.records] == [
        ("local_cwd://torchx/now", "SUCCEEDED", 4)
    ]
    # a raw SQL writer (another tool, an older torchx_nb) is numbered too
    import sqlite3

    db = sqlite3.connect(tmp_path / "jobs.db")
    db.execute("UPDATE jobs SET state = 'FAILED' WHERE handle = 'local_cwd://torchx/now'")
    db.commit()
    db.close()
    assert [r.rev for r in store.changes(4).records] == [5]


def test_a_store_whose_file_vanished_is_made_again_private(tmp_path: Path) -> None:
    import os
    import stat

    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.add(rec("local_cwd://torchx/a"))
    first = store.changes(0).store_id
    for sfx in ("", "-wal", "-shm"):
        if Path(f"{path}{sfx}").exists():
            os.rename(f"{path}{sfx}", f"{path}{sfx}.aside")
    assert store.list() == []
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = store.changes(0)
    assert again.store_id != first and again.rev == 0
    store.add(rec("local_cwd://torchx/b"))
    assert [r.handle for r in store.list()] == ["local_cwd://torchx/b"]
    # an empty file left in its place (no tables) is given the schema, not a 500 forever
    path.unlink()
    path.touch(mode=0o600)
    assert store.list() == []
    store.add(rec("local_cwd://torchx/c"))
    assert store.get("local_cwd://torchx/c") is not None


def test_a_stale_wal_is_not_replayed_into_a_new_store(tmp_path: Path) -> None:
    import shutil

    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.add(rec("local_cwd://torchx/old"))
    shutil.copy(path, tmp_path / "copy.db")
    path.unlink()
    Path(f"{path}-wal").write_bytes(b"\0" * 4096)
    assert store.list() == []
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").read_bytes()[:4] != b"\0" * 4


def test_search_folds_every_alphabet_and_pages_by_keyset(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    base = time.time()
    store.add(rec("local_cwd://torchx/u", name="Überprüfung-Ärger", submitted=base))
    for q in ("überpr", "ÜBERPRÜ", "ärger", "berpr"):
        assert [r.handle for r in store.page(text=q)[0]] == ["local_cwd://torchx/u"], q
    for i in range(10):
        store.add(rec(f"local_cwd://torchx/k{i}", name="k", submitted=base - 100))  # all tied
    first, total = store.page(text="k", limit=4)
    assert total == 10
    walked = [r.handle for r in first]
    last = first[-1]
    while True:
        store.add(rec(f"local_cwd://torchx/new{len(walked)}", name="k", submitted=base + 1))
        page, _ = store.page(text="k", limit=4, after=(last.submitted, last.handle))
        if not page:
            break
        walked += [r.handle for r in page]
        last = page[-1]
    assert sorted(walked) == sorted(f"local_cwd://torchx/k{i}" for i in range(10))


def test_rows_written_without_our_fold_are_still_found(tmp_path: Path) -> None:
    import sqlite3

    store = JobStore(tmp_path / "jobs.db")
    db = sqlite3.connect(tmp_path / "jobs.db")
    db.execute(
        "INSERT INTO jobs (handle, scheduler, session, app_id, name, submitted, state, updated)"
        " VALUES ('slurm://torchx/9', 'slurm', 'torchx', '9', 'Raw-Writer', 1, 'RUNNING', 1)"
    )
    db.commit()
    db.close()
    assert [r.handle for r in store.page(text="raw-w")[0]] == ["slurm://torchx/9"]


def test_two_processes_bringing_an_old_store_up_to_date_at_once(tmp_path: Path) -> None:
    """A store made before the ``endings`` column, opened by two processes at once after an
    upgrade: the one that adds the column second finds it there (it looked before the other
    added it) and opens the store — it failed with 'duplicate column name: endings; move it
    aside …', advice that throws the job history away. The other process's ALTER is run at
    the exact moment (just as this one's starts), on the same file."""
    import sqlite3

    path = tmp_path / "jobs.db"
    JobStore(path).add(record("local_cwd://t/a"))
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE jobs DROP COLUMN endings")

    class RacedByAnotherProcess(JobStore):
        def _open(self) -> sqlite3.Connection:
            db = super()._open()

            def other_process_first(sql: str) -> None:
                if sql.startswith("ALTER TABLE jobs ADD COLUMN endings"):
                    other = sqlite3.connect(path, isolation_level=None)
                    other.execute("ALTER TABLE jobs ADD COLUMN endings TEXT")
                    other.close()

            db.set_trace_callback(other_process_first)
            return db

    store = RacedByAnotherProcess(path)
    got = store.get("local_cwd://t/a")
    assert got is not None and got.endings is None
    store.update_state("local_cwd://t/a", "FAILED", ended=time.time(), endings='[{"id": 0}]')
    again = JobStore(path).get("local_cwd://t/a")
    assert again is not None and again.state == "FAILED" and again.endings == '[{"id": 0}]'


def test_a_long_lived_process_leaves_the_store_whole_between_calls(tmp_path: Path) -> None:
    """A kernel or the Jupyter server (no ``keep``) holds nothing open between
    calls: no write-ahead log beside the file, so ``cp jobs.sqlite`` has every job, and a
    backup copied back over the store (the same file, rewritten) is what it reads next, not
    the store as it was replayed from a log over it."""
    import shutil

    path = tmp_path / "jobs.db"
    store = CountingStore(path, keep=False)
    store.add(record("local_cwd://torchx/before"))
    backup = tmp_path / "backup.db"
    shutil.copyfile(path, backup)
    assert not Path(f"{path}-wal").exists()
    store.add(record("local_cwd://torchx/later"))
    assert len(store.list()) == 2
    shutil.copyfile(backup, path)  # cp backup.db jobs.db
    assert [r.handle for r in store.list()] == ["local_cwd://torchx/before"]


class CountingStore(JobStore):
    """A store that counts the connections it opens, and on which thread."""

    def __init__(self, path: Path, keep: bool = True) -> None:
        self.opened: list[str] = []
        super().__init__(path, keep=keep)

    def _open(self) -> sqlite3.Connection:
        import threading

        self.opened.append(threading.current_thread().name)
        return super()._open()


def test_each_thread_keeps_one_connection_and_writes_from_threads_all_land(
    tmp_path: Path,
) -> None:
    """A command or a kernel's refresher makes many store calls: each thread opens one
    connection and keeps it (each call opened and closed its own, SQLite checkpointing the
    WAL with an fsync at every close: 10 of them cost a short command most of its store time)."""
    import threading

    store = CountingStore(tmp_path / "jobs.db")
    for i in range(10):
        store.add(record(f"local_cwd://torchx/m{i}"))
        store.update_state(f"local_cwd://torchx/m{i}", "RUNNING")
        assert store.get(f"local_cwd://torchx/m{i}") is not None
    assert store.opened == ["MainThread"]

    def write(worker: int) -> None:
        for i in range(20):
            store.add(record(f"local_cwd://torchx/t{worker}-{i}"))
            store.update_state(f"local_cwd://torchx/t{worker}-{i}", "RUNNING")

    threads = [threading.Thread(target=write, args=(w,), name=f"w{w}") for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(store.opened) == ["MainThread", "w0", "w1", "w2", "w3"]
    assert len(store.list(limit=1000)) == 90
    assert {r.state for r in store.list(limit=1000)} == {"RUNNING"}


def test_a_forked_child_opens_its_own_connection_and_the_parent_goes_on(tmp_path: Path) -> None:
    """A connection never crosses a fork: the child (a kernel's forked helper, a fork-started
    multiprocessing worker) opens its own; the parent's keeps working."""
    import os

    store = CountingStore(tmp_path / "jobs.db")
    store.add(record("local_cwd://torchx/parent"))
    pid = os.fork()
    if pid == 0:  # the child: exits without running the test runner's teardown
        code = 1
        try:
            store.add(record("local_cwd://torchx/child"))
            store.update_state("local_cwd://torchx/child", "RUNNING")
            code = 0 if store.opened == ["MainThread", "MainThread"] else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.update_state("local_cwd://torchx/parent", "RUNNING")
    assert [r.handle for r in store.list()] == [
        "local_cwd://torchx/child",
        "local_cwd://torchx/parent",
    ]
    assert store.opened == ["MainThread"]


def test_a_failed_call_drops_its_connection_and_the_next_one_opens_another(
    tmp_path: Path,
) -> None:
    """A call that failed (here: the store locked past its timeout) leaves no transaction
    open and its connection closed; the next call works on a fresh one."""
    path = tmp_path / "jobs.db"
    store = CountingStore(path)
    store.timeout = 0.2
    store.add(record("local_cwd://torchx/a-1"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(JobStoreError, match="stayed locked"):
            store.update_state("local_cwd://torchx/a-1", "RUNNING")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.update_state("local_cwd://torchx/a-1", "RUNNING")
    assert store.get("local_cwd://torchx/a-1").state == "RUNNING"  # type: ignore[union-attr]
    assert store.opened == ["MainThread", "MainThread"]
