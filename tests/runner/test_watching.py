"""Watching's refresh: a round over many jobs of one scheduler reads the job store once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from torchx_nb.components.utils import sh
from torchx_nb.jobstore import JobStore
from torchx_nb.runner import get_runner
from torchx_nb.specs import AppState


def test_a_refresh_round_of_many_local_jobs_reads_the_store_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """local_cwd has no batched describe: each job is described alone, but the current
    attempts' ids come from one read of the store (a kernel watching 20 jobs read it 20
    times a round, twice a second, each on a connection of its own then — most of its CPU
    while watching)."""
    go = tmp_path / "go"
    with get_runner() as runner:
        handles = [
            runner.run(sh("sh", "-c", f"while [ ! -e '{go}' ]; do sleep 0.05; done"), "local_cwd")
            for _ in range(8)
        ]
        try:
            # every job seen RUNNING and recorded so: a later round has nothing to write
            wait_for(
                lambda: all(
                    getattr(s, "state", None) == AppState.RUNNING
                    for s in runner.refresh(handles).values()
                ),
                timeout=60,
            )
            calls: list[int] = []
            real = JobStore._connect

            def counted(self: JobStore, make: bool = True) -> Any:
                calls.append(1)
                return real(self, make)

            monkeypatch.setattr(JobStore, "_connect", counted)
            again = runner.refresh(handles)
            assert set(again) == set(handles)
            assert all(getattr(s, "state", None) == AppState.RUNNING for s in again.values())
            assert len(calls) == 1, f"{len(calls)} store calls for one round"
        finally:
            go.touch()
            for h in handles:
                runner.wait(h, wait_interval=0.05)
