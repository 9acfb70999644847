"""Scaffolding shared by the benchmarks: many sleeping jobs on one scheduler, running."""

from __future__ import annotations

import sys
import time
from typing import Any


def start_sleepers(
    scheduler: str, jobs: int, image: str, mem_mb: int, timeout: float, poll: float
) -> tuple[Any, list[str]]:
    """Submit ``jobs`` one-role ``sleep 600`` apps to ``scheduler`` and wait (up to
    ``timeout``) until they all run; returns the Runner and the handles."""
    from torchx_nb import specs
    from torchx_nb.runner import get_runner

    role = specs.Role(
        name="r",
        image=image,
        entrypoint="sleep",
        args=["600"],
        resource=specs.Resource(cpu=1, gpu=0, memMB=mem_mb),
    )
    runner = get_runner()
    handles = [runner.run(specs.AppDef(f"b{i}", roles=[role]), scheduler, {}) for i in range(jobs)]
    deadline = time.monotonic() + timeout
    running = 0
    while time.monotonic() < deadline:
        states = runner.status_many(handles)
        running = sum(1 for s in states.values() if s and s.state == specs.AppState.RUNNING)
        if running == jobs:
            break
        time.sleep(poll)
    print(f"{running} of {jobs} jobs running", file=sys.stderr)
    return runner, handles
