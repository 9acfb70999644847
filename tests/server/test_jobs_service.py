"""The job service without HTTP: the poller runs only while someone listens, and its work
follows the jobs not yet ended, not the size of the store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.server import feed as feed_module
from torchx_nb.server.jobs import JobService


def record(i: int, state: str) -> JobRecord:
    t = time.time() - 1000 + i
    return JobRecord(
        f"local_cwd://torchx/j-{i}", "local_cwd", "torchx", f"j-{i}", "j", "", t, state, t
    )


class Spy:
    """Counts the handles the service asks the runner to refresh."""

    def __init__(self, service: JobService) -> None:
        self.asked: list[list[str]] = []
        real = service.runner.refresh

        def refresh(handles: Any, record_unknown: bool = False) -> Any:
            self.asked.append(list(handles))
            return real(handles, record_unknown=record_unknown)

        service.runner.refresh = refresh


def test_the_poller_stops_when_the_last_client_leaves(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "LEASE_S", 0.0)
    store = JobStore()
    for i in range(3):
        store.add(record(i, "RUNNING"))
    service = JobService(local_interval=0.05)
    spy = Spy(service)

    async def scenario() -> tuple[int, int]:
        service.feed.connect()
        service.feed.connect()
        await asyncio.sleep(0.3)
        service.feed.disconnect()
        await asyncio.sleep(0.2)
        still = service.feed._poller is not None
        service.feed.disconnect()
        await asyncio.sleep(0.3)
        polls = service.feed.polls
        await asyncio.sleep(0.3)
        return int(still), service.feed.polls - polls

    try:
        still_running, polls_after = asyncio.run(scenario())
    finally:
        service.close()
    assert still_running == 1, "one client left: the poller goes on"
    assert polls_after == 0 and service.feed._poller is None, "no client: no poll"
    assert spy.asked and all(len(h) == 3 for h in spy.asked)
    assert service.refresher._clocks == {}, "the feed's clock stopped with it"


def test_the_feed_runs_on_the_refreshers_thread(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server runs no loop of its own: while a client listens, the feed's look at the
    store is work on the process's one refresher thread (it was an asyncio task of the
    server's, re-registering watches from the service's pool)."""
    import threading

    monkeypatch.setattr(feed_module, "LEASE_S", 0.0)
    store = JobStore()
    store.add(record(0, "RUNNING"))
    service = JobService(local_interval=0.05)
    threads: list[str] = []
    real = service.feed._refresh

    def refresh(poke: Any = None) -> Any:
        threads.append(threading.current_thread().name)
        return real(poke)

    service.feed._refresh = refresh  # type: ignore[method-assign]

    async def scenario() -> None:
        service.feed.connect()
        assert service.feed._poller in service.refresher._clocks
        await asyncio.sleep(0.4)
        service.feed.disconnect()
        await asyncio.sleep(0.3)

    try:
        asyncio.run(scenario())
    finally:
        service.close()
    assert len(threads) >= 3 and set(threads) == {"torchx-nb-refresher"}, threads


def wait_for(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_finished_jobs_cost_the_poller_nothing(isolated: Path) -> None:
    store = JobStore()
    for i in range(2000):
        store.add(record(i, "SUCCEEDED"))
    store.add(record(5000, "RUNNING"))
    service = JobService()
    spy = Spy(service)
    try:
        service.feed._refresh()
        wait_for(lambda: spy.asked)
        wait_for(lambda: store.get("local_cwd://torchx/j-5000").state == "UNKNOWN")  # type: ignore[union-attr]
        assert all(h == ["local_cwd://torchx/j-5000"] for h in spy.asked)
        service.feed._refresh()
        assert service.feed._refresh() == [], "nothing changed: nothing to send"
    finally:
        service.close()


def test_the_server_and_a_kernels_watch_share_the_processs_refresher(isolated: Path) -> None:
    """One refresher loop per process: the server's watch of the store's active jobs and a
    kernel-side watch of one of them are asked for together, one call per round, each job
    once; when the poller stops, its watches go."""
    from torchx_nb.refresher import get_refresher

    store = JobStore()
    for i in range(3):
        store.add(record(i, "RUNNING"))
    service = JobService(local_interval=0.2)
    spy = Spy(service)
    refresher = service.refresher  # made on the service's clocks
    assert get_refresher() is refresher  # a kernel-side caller asks for none
    seen: list[Any] = []
    try:
        service.feed._refresh()
        kernel_watch = refresher.watch(
            "local_cwd://torchx/j-0", lambda st, err: seen.append(st), runner=service.runner
        )
        wait_for(lambda: seen and not refresher.is_watched(kernel_watch))
        assert max(len(h) for h in spy.asked) == 3, spy.asked
        assert all(len(set(h)) == len(h) for h in spy.asked), "each job asked once per call"
        assert seen == [None] and not refresher.is_watched(kernel_watch), "unknown: ended"
        service.feed._let_go()
        assert not service.feed._watched and refresher.watching == 0
    finally:
        service.close()


def test_a_store_made_anew_is_a_reset_then_followed_from_its_own_start(isolated: Path) -> None:
    """The store's file moved aside after many writes: the new store is a reset (its rows are
    not replayed one by one), and a change written there later is still reported (the old
    position must not hide it)."""
    store = JobStore()
    for i in range(20):
        store.add(record(i, "SUCCEEDED"))
    service = JobService()
    try:
        assert service.feed._refresh() == []
        for sfx in ("", "-wal", "-shm"):
            f = store.path.with_name(store.path.name + sfx)
            if f.exists():
                f.rename(f.with_name(f.name + ".aside"))
        fresh = JobStore()
        fresh.add(record(100, "SUCCEEDED"))
        assert service.feed._refresh() == [] and service.feed._store_swapped
        fresh.add(record(101, "FAILED"))
        assert [(r["handle"], r["state"]) for r in service.feed._refresh()] == [
            ("local_cwd://torchx/j-101", "FAILED")
        ]
    finally:
        service.close()


def test_a_page_resumes_from_before_what_it_read(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A jobs page is read on a worker thread while the poller logs changes on the event
    loop: a change logged during the read is not in the page, so the page's event id must be
    from before it (it was taken after the read, and a client resuming from it never got
    that row: the panel's filtered list missed a job)."""
    store = JobStore()
    store.add(record(0, "SUCCEEDED"))
    service = JobService()
    try:
        service.feed._refresh()  # the feed has started
        real = service.runner.jobstore.page

        def page(**kwargs: Any) -> Any:
            found = real(**kwargs)
            store.add(record(1, "FAILED"))  # written just after the read ...
            service.feed._record(service.feed._refresh())  # ... and logged by the poller meanwhile
            return found

        monkeypatch.setattr(service.runner.jobstore, "page", page)
        body = service.page(None, None, None, None, 1, 50)
        assert [j["handle"] for j in body["jobs"]] == ["local_cwd://torchx/j-0"]
        _, rows = asyncio.run(service.feed.changes(service.feed.resume_from(body["event_id"])))
        assert rows is not None and [r["handle"] for r in rows] == ["local_cwd://torchx/j-1"]
    finally:
        service.close()
