"""TorchX users subclass ``Runner``: its composite calls go through the Runner's own methods
(``run`` and ``run_component`` through ``dryrun``/``dryrun_component`` and ``schedule``,
``wait`` through ``status``), so an override is called; and a prepared run is sent once, its
copies too (runner/entries.py, runner/submitting.py)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from torchx_nb.components.utils import echo
from torchx_nb.runner import Runner, RunRequest
from torchx_nb.specs.api import AppDryRunInfo, AppHandle, AppState, AppStatus, TorchxNbError


class Counting(Runner):
    """A TorchX-style subclass: it counts what goes through its overrides."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def dryrun(self, *args: Any, **kwargs: Any) -> AppDryRunInfo[Any]:
        self.calls.append("dryrun")
        return super().dryrun(*args, **kwargs)

    def schedule(self, dryrun_info: AppDryRunInfo[Any], **record: str | None) -> AppHandle:
        self.calls.append("schedule")
        return super().schedule(dryrun_info, **record)

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        self.calls.append("status")
        return super().status(app_handle)


def test_a_runner_subclass_s_overrides_are_called_by_run_component_run_and_wait() -> None:
    """Since the Runner was composed, ``run_component`` and ``wait`` called the parts' own
    ``schedule`` and ``status``: a subclass's overrides were skipped."""
    with Counting() as runner:
        handle = runner.run_component("utils.echo", ["--msg", "hi"], "local_cwd")
        assert runner.calls == ["dryrun", "schedule"], "dryrun_component goes through dryrun"
        status = runner.wait(handle, wait_interval=0.1)
        assert status is not None and status.state == AppState.SUCCEEDED
        assert runner.calls[2:] and set(runner.calls[2:]) == {"status"}
        runner.calls.clear()
        again = runner.run(echo(msg="again"), "local_cwd")
        assert runner.calls == ["dryrun", "schedule"]
        assert runner.jobstore.get(again) is not None


class TorchxSignatures(Runner):
    """A subclass written to TorchX 0.7.0's signatures, which its ``run`` calls with TorchX's
    arguments only: ``dryrun(app, scheduler, cfg=, workspace=, parent_run_id=)`` and
    ``schedule(dryrun_info)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def dryrun(  # type: ignore[override]
        self,
        app: Any,
        scheduler: str,
        cfg: Any = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppDryRunInfo[Any]:
        self.calls.append("dryrun")
        return super().dryrun(app, scheduler, cfg, workspace, parent_run_id)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> AppHandle:  # type: ignore[override]
        self.calls.append("schedule")
        return super().schedule(dryrun_info)


def test_overrides_with_torchx_s_signatures_are_called_as_torchx_calls_them(
    tmp_path: Any,
) -> None:
    """``run`` passed ``build_workspace``/``packages`` to ``dryrun`` and ``workspace`` to
    ``schedule``: an override with TorchX's signature failed with a TypeError. The run still
    builds its workspace (a run, not a dry run) and records it."""
    (tmp_path / "data.txt").write_text("payload\n")
    with TorchxSignatures() as runner:
        handle = runner.run_component("utils.echo", ["--msg", "hi"], "local_cwd")
        assert runner.calls == ["dryrun", "schedule"]
        runner.calls.clear()
        again = runner.run(echo(msg="again"), "local_cwd", workspace=str(tmp_path))
        assert runner.calls == ["dryrun", "schedule"]
        for h in (handle, again):
            status = runner.wait(h, wait_interval=0.1)
            assert status is not None and status.state == AppState.SUCCEEDED
        record = runner.jobstore.get(again)
        assert record is not None and record.workspace == str(tmp_path)
        # a dry run asked for by itself still only lists its workspace
        info = runner.dryrun(echo(msg="dry"), "local_cwd", workspace=str(tmp_path))
        with pytest.raises(TorchxNbError, match="prepared for a dry run"):
            runner.schedule(info)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_of_a_sent_prepared_run_is_not_sent_again(how: str) -> None:
    """The sent-once guard keyed on ``id()``: a deep copy (or a pickle's round trip) of a
    prepared run that had been sent was sent again, a second job of the same request."""
    with Runner() as runner:
        prepared = runner.prepare(RunRequest(cell="6 * 7", scheduler="local_cwd"), build=True)
        handle = runner.submit(prepared)
        twin = (
            copy.deepcopy(prepared) if how == "deepcopy" else pickle.loads(pickle.dumps(prepared))
        )
        with pytest.raises(TorchxNbError, match=f"already submitted as {handle}; prepare it"):
            runner.submit(twin)
        assert [r.handle for r in runner.jobstore.list()] == [handle]
        fresh = runner.prepare(RunRequest(cell="6 * 7", scheduler="local_cwd"), build=True)
        assert fresh.token != prepared.token
        runner.wait(handle, wait_interval=0.1)


def test_a_copy_sent_through_another_runner_is_refused_and_a_failed_send_can_be_retried() -> None:
    """The guard was each Runner's own: a pickled copy of a sent run handed to a second Runner
    (the magic's beside get_runner()'s) was sent again — on local_cwd a raw FileExistsError,
    elsewhere a second job. A send that fails (its scheduler refused it) is no send."""
    with Runner() as first, Runner() as second:
        prepared = first.prepare(RunRequest(cell="6 * 7", scheduler="local_cwd"), build=True)
        handle = first.submit(prepared)
        with pytest.raises(TorchxNbError, match=f"already submitted as {handle}; prepare it"):
            second.submit(pickle.loads(pickle.dumps(prepared)))
        assert [r.handle for r in first.jobstore.list()] == [handle]
        first.wait(handle, wait_interval=0.1)

        again = first.prepare(RunRequest(cell="6 * 7", scheduler="local_cwd"), build=True)
        sched = second.get_scheduler("local_cwd")
        real = sched.schedule

        def refuse(info: object) -> str:
            raise OSError("the disk is full")

        sched.schedule = refuse  # type: ignore[method-assign]
        with pytest.raises(OSError, match="disk is full"):
            second.submit(again)
        sched.schedule = real  # type: ignore[method-assign]
        retried = second.submit(again)
        assert second.wait(retried, wait_interval=0.1).state.name == "SUCCEEDED"
