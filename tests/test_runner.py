from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from torchx_nb import specs
from torchx_nb.components.utils import echo, sh
from torchx_nb.runner import AppValidationError, NoSuchReplica, Runner, get_runner
from torchx_nb.specs import AppState


def test_dryrun_injects_job_id_and_does_not_mutate_the_app() -> None:
    app = echo(msg="x")
    with get_runner() as runner:
        info = runner.dryrun(app, "local_cwd", parent_run_id="parent-1")
    assert "TORCHX_JOB_ID" not in app.roles[0].env
    params = info.request.role_params["echo"][0]
    app_id = info.request.app_id
    assert params.env["TORCHX_JOB_ID"] == f"local_cwd://torchx/{app_id}"
    assert params.env["TORCHX_PARENT_RUN_ID"] == "parent-1"
    assert params.env["TORCHX_INTERNAL_SESSION_ID"]
    assert info.app is not None and info.app.roles[0].env["TORCHX_JOB_ID"].startswith("local_cwd")


def test_run_records_in_job_store_and_tracks_state() -> None:
    with get_runner() as runner:
        handle = runner.run(echo(msg="hi"), "local_cwd", notebook="nb.ipynb", cell_hash="abc")
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.state == "SUBMITTED" and rec.name == "echo"
        assert (rec.notebook, rec.cell_hash, rec.scheduler) == ("nb.ipynb", "abc", "local_cwd")
        status = runner.wait(handle, wait_interval=0.2)
        assert status is not None and status.state == AppState.SUCCEEDED
        assert runner.jobstore.get(handle).state == "SUCCEEDED"  # type: ignore[union-attr]
        assert "".join(runner.log_lines(handle, "echo")) == "hi\n"
        assert runner.describe(handle).name == "echo"  # type: ignore[union-attr]
        listed = runner.list("local_cwd")
        assert [a.app_handle for a in listed] == [handle]
    with get_runner() as fresh:
        app = fresh.describe(handle)
        assert app is not None and app.roles[0].entrypoint == "echo"


def test_log_lines_refuses_a_role_or_replica_the_job_lacks_from_one_describe() -> None:
    with get_runner() as runner:
        handle = runner.run(echo(msg="hi", num_replicas=2), "local_cwd")
        runner.wait(handle, wait_interval=0.2)
        sched = runner.get_scheduler("local_cwd")
        calls = []
        describe = sched.describe
        sched.describe = lambda app_id: calls.append(app_id) or describe(app_id)  # type: ignore[method-assign]
        assert "".join(runner.log_lines(handle, "echo", 1)) == "hi\n"
        assert len(calls) == 1
        with pytest.raises(NoSuchReplica, match=r"no role 'nosuch' \(roles: echo\)"):
            runner.log_lines(handle, "nosuch")
        with pytest.raises(NoSuchReplica, match=r"role 'echo' has replicas 0..1, not 2"):
            runner.log_lines(handle, "echo", 2)
        with pytest.raises(NoSuchReplica, match="not -1"):
            runner.log_lines(handle, "echo", -1)


def test_cancel_and_wait() -> None:
    with Runner(scheduler_params={"grace_seconds": 1}) as runner:
        handle = runner.run(sh("sleep", "30"), "local_cwd")
        runner.cancel(handle)
        status = runner.wait(handle, wait_interval=0.2, timeout=20)
        assert status is not None and status.state == AppState.CANCELLED
        runner.cancel(handle)


def test_unknown_scheduler_and_option_errors() -> None:
    with get_runner() as runner:
        with pytest.raises(specs.UnknownSchedulerException, match="did you mean 'local_cwd'"):
            runner.dryrun(echo(), "local_cdw")
        with pytest.raises(specs.InvalidRunConfigException, match="did you mean 'log_dir'"):
            runner.dryrun(echo(), "local_cwd", {"logdir": "/tmp"})
        with pytest.raises(specs.InvalidRunConfigException, match="expects bool"):
            runner.dryrun(echo(), "local_cwd", {"prepend_cwd": "maybe"})
        with pytest.raises(specs.InvalidRunConfigException, match="expects bool"):
            runner.cfg_from_str("local_cwd", "prepend_cwd=maybe")


def test_app_validation() -> None:
    with get_runner() as runner:
        with pytest.raises(AppValidationError, match="has no roles"):
            runner.dryrun(specs.AppDef("a"), "local_cwd")
        with pytest.raises(AppValidationError, match="has no entrypoint"):
            runner.dryrun(specs.AppDef("a", [specs.Role("r", "i")]), "local_cwd")
        bad = echo()
        bad.roles[0].num_replicas = 0
        with pytest.raises(AppValidationError, match="at least one replica"):
            runner.dryrun(bad, "local_cwd")


def test_unknown_app() -> None:
    with get_runner() as runner:
        assert runner.status("local_cwd://torchx/nope-1") is None
        assert runner.describe("local_cwd://torchx/nope-1") is None
        with pytest.raises(specs.UnknownAppException):
            runner.log_lines("local_cwd://torchx/nope-1", "r")
        with pytest.raises(specs.MalformedAppHandleException):
            runner.status("nope")


def test_scheduler_params_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCHX_STATE_ROOT", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TORCHX_SOMETHING_ELSE", "ignored")
    with get_runner() as runner:
        handle = runner.run(echo(), "local_cwd")
        runner.wait(handle, wait_interval=0.2)
    assert (tmp_path / "elsewhere" / "torchx" / handle.rsplit("/", 1)[1]).is_dir()


def test_workspace_sets_cwd(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.txt").write_text("payload")
    with get_runner() as runner:
        handle = runner.run(sh("cat", "data.txt"), "local_cwd", workspace=str(ws))
        assert runner.wait(handle, wait_interval=0.2).state == AppState.SUCCEEDED  # type: ignore[union-attr]
        assert "".join(runner.log_lines(handle, "sh")) == "payload"
        assert runner.jobstore.get(handle).workspace == str(ws)  # type: ignore[union-attr]


def test_config_files_fill_cfg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.write_text("[local_cwd]\nlog_dir = /from/config\nprepend_cwd = true\n")
    monkeypatch.setenv("TORCHXCONFIG", str(conf))
    with get_runner() as runner:
        cfg = runner.cfg_with_config_files("local_cwd", {"log_dir": "/explicit"})
    assert cfg == {"log_dir": "/explicit", "prepend_cwd": True}
    assert os.environ["TORCHXCONFIG"] == str(conf)


def test_a_state_the_store_could_not_take_is_written_at_the_next_look(tmp_path: Path) -> None:
    """The job store is write-locked past its timeout when a job's end is seen: the status
    call still answers (one warning), and the end is written once the lock is gone."""
    import sqlite3
    import warnings

    from torchx_nb.jobstore import JobStore

    store = JobStore(tmp_path / "jobs.db", timeout=0.2)
    with Runner(jobstore=store) as runner:
        handle = runner.run(sh("true"), "local_cwd", {})
        holder = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                status = runner.wait(handle, wait_interval=0.1, timeout=30)
            assert status is not None and status.state == AppState.SUCCEEDED
            assert any("could not update the job store" in str(w.message) for w in caught)
            assert store.get(handle).state != "SUCCEEDED"  # type: ignore[union-attr]
        finally:
            holder.execute("COMMIT")
            holder.close()
        runner.status(handle)
        assert store.get(handle).state == "SUCCEEDED"  # type: ignore[union-attr]


def test_outputs_of_an_ended_job_whose_folder_was_deleted_say_so(tmp_path: Path) -> None:
    import shutil

    from torchx_nb.components.cell import cell
    from torchx_nb.results import NoResult

    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(cell(source="1"), "local_cwd", {}, workspace=str(ws))
        runner.wait(handle, wait_interval=0.1, timeout=60)
        assert runner.outputs(handle) == []
        shutil.rmtree(runner.output_store(handle).root)
        with pytest.raises(NoResult, match="no longer exists: it was deleted or moved"):
            runner.outputs(handle)


def test_a_prepared_run_is_one_frozen_value_and_the_dry_run_info_holds_nothing_else(
    tmp_path: Path,
) -> None:
    """The workspace's use, the environment plan and the build are fields of the prepared run,
    made by the scheduler's workspace ability; TorchX's AppDryRunInfo keeps only what the
    scheduler put there (before, the runner stuck the preview, the plan, the build time and
    the scheduler's name onto it and read them back)."""
    import dataclasses

    from torchx_nb.runner import PreparedRun, RunRequest
    from torchx_nb.schedulers.abilities import FolderWorkspace
    from torchx_nb.specs.program import CellProgram

    with get_runner() as runner:
        prepared = runner.prepare(
            RunRequest(cell="1 + 1", scheduler="local_cwd", workspace=str(tmp_path))
        )
    assert isinstance(prepared, PreparedRun)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.environment = object()  # type: ignore[misc]
    assert isinstance(prepared.program, CellProgram) and prepared.program.source == "1 + 1"
    assert isinstance(prepared.workspace_use, FolderWorkspace)
    assert prepared.workspace_use.runs_program and prepared.workspace == str(tmp_path)
    assert prepared.environment is None and prepared.build is None
    assert prepared.request is prepared.info.request
    assert set(vars(prepared.info)) == {"request", "_fmt", "_app", "_cfg", "_scheduler"}
    assert prepared.info._scheduler is None


def test_schedule_takes_only_what_dryrun_made() -> None:
    from torchx_nb.specs.api import AppDryRunInfo, TorchxNbError

    with get_runner() as runner:
        made = runner.dryrun(echo(msg="x"), "local_cwd")
        assert made.cfg and made.app is not None and "echo" in repr(made)
        foreign = runner.get_scheduler("local_cwd").submit_dryrun(echo(msg="x"), made.cfg)
        assert isinstance(foreign, AppDryRunInfo)
        with pytest.raises(TorchxNbError, match="not made by Runner.dryrun"):
            runner.schedule(foreign)


def test_a_dry_run_cannot_be_sent_and_a_prepared_run_is_sent_once(tmp_path: Path) -> None:
    """``Runner.schedule`` of a ``Runner.dryrun`` with a workspace sent a job whose files were
    never written (it ended FAILED, exit 2: cell_main.py not found); a second ``schedule`` of
    the same dry run crashed with local_cwd's FileExistsError (other backends sent a second
    job of the same name). Both are one line now, before anything is sent."""
    from torchx_nb.components.cell import cell
    from torchx_nb.specs.api import TorchxNbError

    with get_runner() as runner:
        dry = runner.dryrun(cell(source="6 * 7"), "local_cwd", workspace=str(tmp_path))
        with pytest.raises(TorchxNbError, match=r"prepared for a dry run: .*build_workspace=True"):
            runner.schedule(dry)
        assert runner.jobstore.list() == []
        built = runner.dryrun(
            cell(source="6 * 7"), "local_cwd", workspace=str(tmp_path), build_workspace=True
        )
        handle = runner.schedule(built)
        with pytest.raises(TorchxNbError, match=f"already submitted as {handle}; prepare it"):
            runner.schedule(built)
        assert [r.handle for r in runner.jobstore.list()] == [handle]
        status = runner.wait(handle, wait_interval=0.2)
        assert status is not None and status.state == AppState.SUCCEEDED
        assert runner.result(handle) == 42


def test_the_dry_run_info_answers_torchx_070s_fields() -> None:
    """Code written for TorchX 0.7.0 (whose AppDryRunInfo has no ``app``/``cfg``) reads
    ``_app``, ``_cfg`` and ``_scheduler`` of what ``Runner.dryrun`` returns, as TorchX's own
    ``Runner.schedule`` reads ``_scheduler``: since the dry run became a façade over the
    prepared run each was an AttributeError. Read from the prepared run, kept on nothing."""
    with get_runner() as runner:
        info = runner.dryrun(echo(msg="hi"), "local_cwd", {"log_dir": "/tmp/x"})
    assert info._app is info.app and info._app.name == "echo"
    assert info._cfg == info.cfg and info._cfg["log_dir"] == "/tmp/x"
    assert info._scheduler == "local_cwd"
    with pytest.raises(AttributeError):
        info._scheduler = "slurm"  # type: ignore[misc]


def test_the_dry_run_summary_reads_the_program_not_its_args(tmp_path: Path) -> None:
    """A cell that mentions the runner's file, sent with ``python -c`` (no workspace), was
    said to run under the cell runner: the summary searched the args for that name."""
    from torchx_nb.dryrun_summary import summarize
    from torchx_nb.runner import RunRequest

    source = "print('.torchx-nb/cell_main.py')"
    with get_runner() as runner:
        bare = runner.prepare(RunRequest(cell=source, scheduler="local_cwd", workspace="none"))
        shipped = runner.prepare(
            RunRequest(cell=source, scheduler="local_cwd", workspace=str(tmp_path))
        )
        assert summarize(runner, bare).lines[1] == "program:   a cell of 1 line, run by python -c"
        assert summarize(runner, shipped).lines[1] == (
            "program:   a cell of 1 line, run by the cell runner"
        )


def test_the_runner_is_composed_of_its_parts_each_method_one_delegation() -> None:
    """No mixins glued by TYPE_CHECKING stubs of each other's methods (a stub could drift):
    the Runner holds its parts over one context, and each public method is one call to the
    part's method of the same name, with the same signature."""
    import ast
    import inspect

    from torchx_nb import runner as runner_package
    from torchx_nb.runner.attempts import Attempts
    from torchx_nb.runner.core import RunnerContext
    from torchx_nb.runner.logs import Logs
    from torchx_nb.runner.noticing import Noticing
    from torchx_nb.runner.results import Results
    from torchx_nb.runner.submitting import Submitting
    from torchx_nb.runner.watching import Watching

    assert Runner.__mro__ == (Runner, object)
    parts = {
        "_ctx": RunnerContext,
        "_submitting": Submitting,
        "_watching": Watching,
        "_results": Results,
        "_logs": Logs,
        "_noticing": Noticing,
        "_attempts": Attempts,
    }
    import typing

    from torchx_nb.runner.part import RunnerPart

    # a part's only base is RunnerPart, which holds the shared fields and no method of a part
    assert [n for n in vars(RunnerPart) if callable(getattr(RunnerPart, n))] == ["__init__"]
    for part in parts.values():
        assert set(part.__mro__) <= {part, RunnerPart, typing.Generic, object}, part
    folder = Path(inspect.getfile(runner_package)).parent
    for path in folder.glob("*.py"):  # data types for the checker, never stubs of methods
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                assert not any(isinstance(n, ast.FunctionDef) for n in ast.walk(node)), path
    tree = ast.parse(Path(inspect.getfile(runner_package)).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Runner")
    own = {
        "__init__",
        "__enter__",
        "__exit__",
        "close",
        "name",
        "hand_off_notices",
        "keep_store_connections",
        "jobstore",
    }
    assert {f.name for f in cls.body if isinstance(f, ast.FunctionDef)} == own
    classes = {cls.__name__: cls for cls in parts.values()}
    delegated = 0
    for node in cls.body:
        if not isinstance(node, ast.Assign):
            continue
        (target,) = node.targets
        assert isinstance(target, ast.Name)
        value = node.value
        if isinstance(value, ast.Name):  # an alias, as TorchX's stop
            assert (target.id, value.id) == ("stop", "cancel")
            continue
        assert isinstance(value, ast.Call) and isinstance(value.func, ast.Name), target.id
        if value.func.id == "staticmethod":  # a static method of the context
            (method,) = value.args
        else:
            assert value.func.id == "_delegate", target.id
            where, method = value.args
            assert isinstance(where, ast.Constant) and where.value in parts, target.id
        assert isinstance(method, ast.Attribute) and isinstance(method.value, ast.Name)
        part = classes[method.value.id]
        if value.func.id == "_delegate":
            assert part is parts[where.value], target.id
        expected = "send_owed" if target.id == "send_owed_notices" else target.id
        assert method.attr == expected, target.id
        mine, theirs = getattr(Runner, target.id), getattr(part, method.attr)
        assert inspect.signature(mine) == inspect.signature(theirs), target.id
        assert mine.__doc__ == theirs.__doc__, target.id
        delegated += 1
    assert delegated >= 50
    assert Runner.stop is Runner.cancel


def test_a_job_seen_ending_by_the_runner_owes_its_notice_through_the_composed_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Watching tells Noticing of a job's end; a failed job's notice carries the failure
    cards Results reads (through Watching's status and Logs' tail)."""
    from torchx_nb import notices
    from torchx_nb.runner.noticing import Noticing

    sent: list[dict[str, Any]] = []
    monkeypatch.setenv("TORCHX_NB_NOTIFY_URL", "http://127.0.0.1:9/hook")
    # no end-of-job watcher process of local_cwd's own: this runner's wait sees the end
    monkeypatch.setattr(Noticing, "end_hook", lambda self: None)

    class Recorder:
        def submit(self, url: str, build: Any, owed: Any, hand_off: bool = False) -> None:
            sent.append(build())

    monkeypatch.setattr(notices, "notifier", lambda: Recorder())
    with get_runner() as runner:
        handle = runner.run(sh("sh", "-c", "echo boom >&2; exit 3"), "local_cwd")
        status = runner.wait(handle, wait_interval=0.1, timeout=60)
        assert status is not None and status.state == AppState.FAILED
    assert len(sent) == 1, sent
    assert "FAILED" in sent[0]["text"] and "boom" in sent[0]["text"], sent[0]["text"]
