"""The job service without HTTP: the poller runs only while someone listens, and its work
follows the jobs not yet ended, not the size of the store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.server import jobs as jobs_module
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
    monkeypatch.setattr(jobs_module, "LEASE_S", 0.0)
    store = JobStore()
    for i in range(3):
        store.add(record(i, "RUNNING"))
    service = JobService(local_interval=0.05)
    spy = Spy(service)

    async def scenario() -> tuple[int, int]:
        service.connect()
        service.connect()
        await asyncio.sleep(0.3)
        service.disconnect()
        await asyncio.sleep(0.2)
        still = service._poller is not None
        service.disconnect()
        await asyncio.sleep(0.3)
        polls = service.polls
        await asyncio.sleep(0.3)
        return int(still), service.polls - polls

    try:
        still_running, polls_after = asyncio.run(scenario())
    finally:
        service.close()
    assert still_running == 1, "one client left: the poller goes on"
    assert polls_after == 0 and service._poller is None, "no client: no poll"
    assert spy.asked and all(len(h) == 3 for h in spy.asked)


def test_finished_jobs_cost_the_poller_nothing(isolated: Path) -> None:
    store = JobStore()
    for i in range(2000):
        store.add(record(i, "SUCCEEDED"))
    store.add(record(5000, "RUNNING"))
    service = JobService()
    spy = Spy(service)
    try:
        service._refresh()
        assert spy.asked == [["local_cwd://torchx/j-5000"]]
        service._refresh()
        assert service._refresh() == [], "nothing changed: nothing to send"
    finally:
        service.close()
