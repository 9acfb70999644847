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
    call during the wait comes from the refresher's polls, none from the waiting thread."""
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
        # asked by the refresher (each poll on a thread of its own), never by the waiting thread
        assert callers and set(callers) == {"torchx-nb-refresher-ask"}, callers
        assert get_refresher().watching == 0  # every watch ended with its trial


def _states(sw: object) -> list[str | None]:
    return [s.state.name if s else None for s in sw.statuses()]  # type: ignore[attr-defined]


def test_a_trial_whose_cancel_fails_is_named_and_the_others_are_cancelled(
    tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three running local_cwd trials; trial 1's cancel fails for real (its backend cannot
    write the cancel mark: a directory stands where the mark's temporary file goes). The
    other two are cancelled all the same, and the error names trial 1, one line, with why;
    trial 1 still runs (nothing says otherwise). The view's Cancel all shows that line, its
    text escaped (the data folder's name is markup here)."""
    import os

    from tests.conftest import wait_for
    from tests.notebook.test_sweep_view import SilentPoller
    from torchx_nb.notebook.sweep_view import SweepView
    from torchx_nb.sweeps import TrialsNotCancelled

    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "<i>data</i>"))

    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        sw = start(
            runner,
            SweepRequest(
                RunRequest(
                    cell="import time\ntime.sleep(120)\nn", scheduler="local_cwd", workspace=str(ws)
                ),
                ["n=0,1,2"],
            ),
        )
        wait_for(lambda: _states(sw) == ["RUNNING"] * 3, timeout=60)
        h1 = sw.handles[1]
        assert h1 is not None
        state_dir = runner.get_scheduler("local_cwd")._app_dir(h1.rsplit("/", 1)[1])  # type: ignore[attr-defined]
        blocker = state_dir / f"cancel.{os.getpid()}.tmp"
        blocker.mkdir()
        try:
            with pytest.raises(TrialsNotCancelled) as caught:
                sw.cancel()
            (line,) = str(caught.value).splitlines()
            assert line.startswith(
                f"{sw.id}: trial 1 ({h1}) could not be cancelled and may still run: "
            ), line
            assert "Is a directory" in line
            assert caught.value.failed == [(1, h1, line.split("may still run: ", 1)[1])]
            view = SweepView(sw, runner, SilentPoller())
            view._on_cancel(None)  # the Cancel all button
            wait_for(lambda: sw.error is not None, timeout=30)
            page = view.html()
            assert "&lt;i&gt;data&lt;/i&gt;" in page and "<i>data" not in page
            assert f"trial 1 ({h1}) could not be cancelled and may still run" in page
            wait_for(lambda: _states(sw) == ["CANCELLED", "RUNNING", "CANCELLED"], timeout=60)
        finally:
            blocker.rmdir()
            runner.cancel(h1)
        wait_for(lambda: _states(sw) == ["CANCELLED"] * 3, timeout=60)


def test_a_trial_slurm_refuses_stops_the_sweep_and_the_ones_before_stay_cancellable(
    slurm_env: object, isolated: Path
) -> None:
    """A component sweep on the real Slurm cluster whose third trial asks for a GPU, which
    the cluster has none of: sbatch refuses it. The two trials before it stay submitted and in the job
    store, the error is one line naming them and sbatch's refusal, and ``torchx-nb cancel``
    of the sweep's id cancels them."""
    from tests.conftest import cli, wait_for
    from torchx_nb.sweeps import SweepPartlySubmitted

    with get_runner() as runner:
        with pytest.raises(SweepPartlySubmitted) as caught:
            start(
                runner,
                SweepRequest(
                    RunRequest(
                        component="utils.sh",
                        component_args=["--gpu", "${g}", "--memMB", "100", "sleep", "300"],
                        scheduler="slurm",
                    ),
                    ["g=0,0,1,0"],
                ),
            )
        sw = caught.value.sweep
        text = str(caught.value)
        assert "\n" not in text
        head, _, rest = text.partition("; ")
        assert head.startswith(f"{sw.id}: trial 2 could not be submitted: "), text
        assert rest == (
            f"trials 0-1 of 4 were submitted and run on (cancel them: %torchx cancel {sw.id},"
            f" or torchx-nb cancel {sw.id}); trials 2-3 were not"
        ), text
        h0, h1, h2, h3 = sw.handles
        assert h0 and h1 and h2 is None and h3 is None
        assert sorted(r.handle for r in runner.jobstore.trials(sw.id)) == sorted([h0, h1])
        code, _, err = cli("cancel", sw.id)
        assert code == 0 and err == f"torchx-nb: cancel requested for the trials of {sw.id}\n"
        wait_for(lambda: _states(sw) == ["CANCELLED", "CANCELLED", None, None], timeout=90)


def test_an_interrupt_during_the_first_trials_build_leaves_nothing_submitted(
    tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (a real SIGINT to this process) while the first trial is being built: the
    interrupt comes through as it is, and no trial was submitted, recorded or started."""
    import os
    import signal
    import threading

    real_prepare = Runner.prepare
    building = threading.Event()

    def slow_prepare(self: Runner, request: RunRequest, build: bool = True) -> object:
        building.set()
        time.sleep(5)  # the build, interrupted here
        return real_prepare(self, request, build=build)

    monkeypatch.setattr(Runner, "prepare", slow_prepare)
    ws = tmp_path / "ws"
    ws.mkdir()
    threading.Thread(
        target=lambda: building.wait(30) and os.kill(os.getpid(), signal.SIGINT), daemon=True
    ).start()
    with get_runner() as runner:
        with pytest.raises(KeyboardInterrupt) as caught:
            start(
                runner,
                SweepRequest(
                    RunRequest(
                        cell="open('ran', 'w')\nn", scheduler="local_cwd", workspace=str(ws)
                    ),
                    ["n=0,1"],
                ),
            )
        assert type(caught.value) is KeyboardInterrupt  # nothing submitted: nothing to say
        assert runner.jobstore.list() == []
    time.sleep(2)
    assert not (ws / "ran").exists()


def test_wait_with_a_timeout_returns_in_time_when_the_backend_hangs(isolated: Path) -> None:
    """``Sweep.wait(timeout=2)`` while its backend's describe hangs (an API that accepts and
    never answers) returns after about 2 s with each trial's last recorded state: it then
    asked the backend itself, on the waiting thread, for each trial the refresher had not
    answered for — 40 s here (20 s a trial), for ever against an API that never answers."""
    import threading

    from torchx_nb.schedulers import get_scheduler_factories
    from torchx_nb.schedulers.local_cwd import LocalCwdScheduler

    hang = threading.Event()
    release = threading.Event()

    class Hangs(LocalCwdScheduler):
        def describe(self, app_id: str) -> object:  # type: ignore[override]
            if hang.is_set():
                release.wait(timeout=20)
            return super().describe(app_id)

    factories = dict(get_scheduler_factories())
    factories["hangs"] = lambda session, **kw: Hangs(session, **kw)
    with Runner(scheduler_factories=factories) as runner:
        sw = start(
            runner,
            SweepRequest(
                RunRequest(
                    cell="import time\ntime.sleep(60)\nn",
                    scheduler="hangs",
                    workspace=str(isolated),
                ),
                ["n=1,2"],
            ),
        )
        try:
            from tests.conftest import wait_for

            wait_for(lambda: all(sw.handles) and not sw.submitting, timeout=60)
            hang.set()
            began = time.monotonic()
            statuses = sw.wait(timeout=2)
            took = time.monotonic() - began
            assert took < 10, f"wait(timeout=2) took {took:.0f} s"  # before: 40 s
            states = [s.state.name if s else None for s in statuses]
            assert set(states) <= {"SUBMITTED", "PENDING", "RUNNING"}, states
        finally:
            release.set()
            hang.clear()
            sw.cancel()
