from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest

from torchx_nb import specs
from torchx_nb.schedulers import get_scheduler_factories
from torchx_nb.schedulers.abilities import SubmitsArrays
from torchx_nb.schedulers.api import (  # TorchX's import path, as TorchX users write it
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    filter_regex,
    split_lines,
    split_lines_iterator,
)
from torchx_nb.workspace.api import WorkspaceMixin


def test_line_helpers() -> None:
    assert split_lines("a\nb\n\nc") == ["a\n", "b\n", "\n", "c"]
    assert list(split_lines_iterator(["a", "b\nc", "\nd\n", "e"])) == ["ab\n", "c\n", "d\n", "e"]
    assert list(filter_regex(r"^b", ["a\n", "bb\n", "cb\n"])) == ["bb\n"]


def test_split_lines_as_torchx_tests_it() -> None:
    """TorchX 0.7.0's ``test_split_lines``, through ``torchx_nb.schedulers.api``."""
    assert split_lines("") == []
    assert split_lines("\n") == ["\n"]
    assert split_lines("foo\nbar") == ["foo\n", "bar"]
    assert split_lines("foo\nbar\n") == ["foo\n", "bar\n"]
    assert list(split_lines_iterator(["1\n2\n3\n4\n"])) == ["1\n", "2\n", "3\n", "4\n"]


class TorchxStyle(Scheduler[Mapping[str, Any]], WorkspaceMixin[None]):
    """A scheduler written as TorchX 0.7.0's tests write one: a required string option, and
    its own ``build_workspace_and_update_role``."""

    def __init__(self) -> None:
        super().__init__("mock", "test_session")

    def schedule(self, dryrun_info: specs.AppDryRunInfo[Any]) -> str:
        app = dryrun_info._app
        assert app is not None
        return app.name

    def _submit_dryrun(self, app: specs.AppDef, cfg: Mapping[str, Any]) -> specs.AppDryRunInfo[Any]:
        return specs.AppDryRunInfo(None, lambda _: "None")

    def _run_opts(self) -> specs.runopts:
        opts = specs.runopts()
        opts.add("foo", type_=str, required=True, help="required option")
        return opts

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return None

    def list(self, cfg: Mapping[str, Any] | None = None) -> list[ListAppResponse]:
        return []

    def _cancel_existing(self, app_id: str) -> None:
        pass

    def build_workspace_and_update_role(
        self, role: specs.Role, workspace: str, cfg: Mapping[str, Any]
    ) -> None:
        role.image = workspace


def test_submit_workspace_as_torchx_tests_it() -> None:
    """TorchX 0.7.0's ``test_submit_workspace``, with ``WorkspaceMixin`` from
    ``torchx_nb.workspace.api``: ``submit(..., workspace=)`` calls the scheduler's own build."""
    app = specs.AppDef("test_app", roles=[specs.Role(name="sleep", image="", entrypoint="foo.sh")])
    assert TorchxStyle().submit(app, {"foo": "asdf"}, workspace="some_workspace") == "test_app"
    assert app.roles[0].image == "some_workspace"
    with pytest.raises(specs.InvalidRunConfigException):
        TorchxStyle().submit(app, {})


class Recording(Scheduler[Mapping[str, Any]]):
    def __init__(self) -> None:
        super().__init__("rec", "s")
        self.cancelled: list[str] = []

    def schedule(self, dryrun_info: specs.AppDryRunInfo[Any]) -> str:
        return "id-1"

    def _submit_dryrun(self, app: specs.AppDef, cfg: Mapping[str, Any]) -> specs.AppDryRunInfo[Any]:
        return specs.AppDryRunInfo({"app": app.name, "cfg": dict(cfg)}, repr)

    def _run_opts(self) -> specs.runopts:
        opts = specs.runopts()
        opts.add("n", type_=int, help="n", default=1)
        return opts

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return DescribeAppResponse(app_id=app_id) if app_id == "id-1" else None

    def list(self, cfg: Mapping[str, Any] | None = None) -> list[ListAppResponse]:
        return [ListAppResponse("id-1", specs.AppState.RUNNING)]

    def _cancel_existing(self, app_id: str) -> None:
        self.cancelled.append(app_id)


def test_scheduler_lifecycle_defaults() -> None:
    s = Recording()
    called = []

    class PreRole(specs.Role):
        def pre_proc(
            self, scheduler: str, dryrun_info: specs.AppDryRunInfo[Any]
        ) -> specs.AppDryRunInfo[Any]:
            called.append(scheduler)
            return dryrun_info

    app = specs.AppDef("a", roles=[PreRole(name="r", image="i", entrypoint="e")])
    info = s.submit_dryrun(app, {})
    assert info.request == {"app": "a", "cfg": {"n": 1}}
    assert info.app is app and info.cfg == {"n": 1} and called == ["rec"]
    assert s.submit(app, {"n": 2}) == "id-1"
    assert s.exists("id-1") and not s.exists("nope")
    s.cancel("nope")
    s.cancel("id-1")
    s.delete("id-1")
    assert s.cancelled == ["id-1", "id-1"]
    with pytest.raises(NotImplementedError, match="rec does not support fetching logs"):
        s.log_iter("id-1", "r")
    with pytest.raises(ValueError, match="no resource for role 'r'"):
        s._validate(app, "rec", {})
    s.close()
    s.close()


class RecordingArrays(SubmitsArrays, Recording):
    def array_request(
        self, info: specs.AppDryRunInfo[Any], size: int, max_parallel: int | None
    ) -> specs.AppDryRunInfo[Any]:
        return info

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        return [f"{app_id}_{i}" for i in range(size)]

    def _cancel_existing(self, app_id: str) -> None:
        if app_id.endswith("_1"):
            raise RuntimeError("it has just ended")
        super()._cancel_existing(app_id)


def test_cancelling_arrays_by_default_cancels_each_trial_one_failing_not_keeping_others() -> None:
    s = RecordingArrays()
    s.cancel_arrays(s.trial_ids("id-1", 3))
    assert s.cancelled == ["id-1_0", "id-1_2"]


def test_factories_are_lazy_and_include_local_cwd() -> None:
    code = (
        "import sys; from torchx_nb.schedulers import get_scheduler_factories as g; f = g(); "
        "assert 'local_cwd' in f, f; "
        "assert 'torchx_nb.schedulers.local_cwd' not in sys.modules; "
        "s = f['local_cwd']('torchx'); print(type(s).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "LocalCwdScheduler"


def test_entry_point_plugins_are_discovered(plugin_path: object) -> None:
    factories = get_scheduler_factories()
    assert "needs_queue" in factories
    sched = factories["needs_queue"]("torchx")
    opts = sched.run_opts()
    assert opts.get("queue") is not None and opts.get("queue").is_required  # type: ignore[union-attr]


def test_a_torchx_style_plugin_scheduler_runs_end_to_end(plugin_path: object) -> None:
    """``tx_style`` (tests/fixtures/plugin/torchx_nb_txstyle.py) is written against our API with
    TorchX's signatures: ``_validate(app, scheduler)``, ``list()``, TorchX's ``log_iter``."""
    from torchx_nb.runner import get_runner
    from torchx_nb.specs import AppState

    with get_runner() as runner:
        assert "tx_style" in runner.scheduler_backends()
        code = "import os; print('rank0 at', os.environ['TX_RANK0_HOST'])"
        handle = runner.run_component("utils.python", ["--c", code], "tx_style")
        assert handle.startswith("tx_style://torchx/torchx_utils_python-")
        status = runner.wait(handle, wait_interval=0.1)
        assert status is not None and status.state == AppState.SUCCEEDED
        assert list(runner.log_lines(handle, "python", 0)) == ["rank0 at localhost\n"]
        assert list(runner.log_lines(handle, "python", 0, regex="nothing")) == []
        assert [a.app_handle for a in runner.list("tx_style")] == [handle]
        assert runner.jobstore.get(handle) is not None

        slow = runner.run_component("utils.sh", ["sleep", "30"], "tx_style")
        runner.cancel(slow)
        status = runner.wait(slow, wait_interval=0.1)
        assert status is not None and status.state == AppState.CANCELLED

        with pytest.raises(ValueError, match="tx_style runs at most 4 replicas per role"):
            runner.dryrun_component("utils.echo", ["--num_replicas", "5"], "tx_style")


def test_a_torchx_style_workspace_scheduler_subclasses_and_builds_its_workspace() -> None:
    """TorchX's api_test: ``class S(Scheduler[T], WorkspaceMixin[None])`` overriding
    ``build_workspace_and_update_role``; ``submit(..., workspace=...)`` calls it."""
    from torchx_nb.workspace import WorkspaceMixin

    class WithWorkspace(Recording, WorkspaceMixin[None]):
        def build_workspace_and_update_role(
            self, role: specs.Role, workspace: str, cfg: Mapping[str, Any]
        ) -> None:
            role.image = f"{workspace}-built"

    sched = WithWorkspace()
    app = specs.AppDef("app", roles=[specs.Role("r", image="base", entrypoint="true")])
    assert sched.submit(app, {}, workspace="ws") == "id-1"
    assert app.roles[0].image == "ws-built"


def test_one_resolver_for_typed_and_torchx_style_options() -> None:
    """``resolve_opts`` is the one place options are resolved: a TorchX-style scheduler gets a
    dict, a typed one its own structure (returned as is when already typed); ``strict`` (the
    Runner's) names the closest option for an unknown key; only some options given is
    ``given_opts``'s mapping, not a partial options object."""
    from torchx_nb.runner import get_runner
    from torchx_nb.schedulers.aws_batch import AwsBatchOpts, create_scheduler

    assert Recording().resolve_opts(None) == {"n": 1}
    assert Recording().resolve_opts({"n": "3"}) == {"n": 3}
    with pytest.raises(specs.InvalidRunConfigException) as err:
        Recording().resolve_opts({"nn": 1}, strict=True)
    assert (
        str(err.value) == "rec has no option 'nn'; did you mean 'n'? (see `torchx-nb runopts rec`)"
    )

    batch = create_scheduler("s")
    opts = batch.resolve_opts({"queue": "q", "image_repo": "127.0.0.1:9/r"})
    assert isinstance(opts, AwsBatchOpts) and opts.queue == "q" and opts.builder == "auto"
    assert batch.resolve_opts(opts) is opts
    assert batch.given_opts(None) == {}
    with pytest.raises(specs.InvalidRunConfigException, match="missing required option 'queue'"):
        batch.resolve_opts({})
    with get_runner() as runner, pytest.raises(specs.InvalidRunConfigException) as err:
        runner.resolve_opts("aws_batch", {"queu": "q"})
    assert "aws_batch has no option 'queu'; did you mean 'queue'?" in str(err.value)
