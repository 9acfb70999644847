"""Sweeps driven by the real runner on local_cwd: what ``cancel()`` promises while a trial is
still being prepared."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from torchx_nb.runner import Runner, RunRequest, get_runner
from torchx_nb.sweeps import SweepRequest, start


def test_no_trial_runs_after_cancel_even_one_being_prepared(
    tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One trial at a time; the second is being prepared (a slow build, 2 s) when
    ``cancel()`` is called: it is submitted and cancelled with the rest, and the third never
    starts."""
    real_prepare = Runner.prepare
    calls: list[float] = []

    def slow_prepare(self: Runner, request: RunRequest, build: bool = True) -> object:
        calls.append(time.monotonic())
        if len(calls) > 1:
            time.sleep(2)
        return real_prepare(self, request, build=build)

    monkeypatch.setattr(Runner, "prepare", slow_prepare)
    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        sw = start(
            runner,
            SweepRequest(
                RunRequest(
                    cell="import time\ntime.sleep(0 if n == 0 else 60)\nn",
                    scheduler="local_cwd",
                    workspace=str(ws),
                ),
                ["n=0,1,2"],
                max_parallel=1,
            ),
        )
        deadline = time.monotonic() + 60
        while len(calls) < 2:  # the first trial ended; the second is being prepared
            assert time.monotonic() < deadline, "the second trial was never prepared"
            time.sleep(0.05)
        sw.cancel()
        assert sw.handles[1] is not None and sw.handles[2] is None
        settled = sw.wait(timeout=30)
        states = [s.state.name if s else None for s in settled]
        assert states == ["SUCCEEDED", "CANCELLED", None], states
        time.sleep(3)
        assert len(calls) == 2 and sw.handles[2] is None


def test_sweep_wait_asks_nothing_of_its_own_the_refresher_does(isolated: Path) -> None:
    """``Sweep.wait`` watches its trials through the process's one refresher: every status
    call during the wait comes from the refresher's thread, none from the waiting one."""
    import threading

    from torchx_nb.refresher import get_refresher
    from torchx_nb.sweeps import SweepRequest, start

    callers: list[str] = []
    with get_runner() as runner:
        real = runner.refresh

        def spying(handles: list[str], *args: object, **kwargs: object) -> object:
            callers.append(threading.current_thread().name)
            return real(handles, *args, **kwargs)  # type: ignore[arg-type]

        runner.refresh = spying  # type: ignore[method-assign]
        sw = start(
            runner,
            SweepRequest(
                RunRequest(cell="import time\ntime.sleep(0.5)\nn", workspace=str(isolated)),
                ["n=1,2,3"],
            ),
        )
        statuses = sw.wait(timeout=60)
        assert [s.state.name if s else None for s in statuses] == ["SUCCEEDED"] * 3
        assert callers and set(callers) == {"torchx-nb-refresher"}, callers
        assert get_refresher(runner).watching == 0  # every watch ended with its trial
