from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from torchx_nb import specs
from torchx_nb.schedulers.local_cwd import LocalCwdScheduler, create_scheduler
from torchx_nb.specs import AppState, TorchxNbError
from torchx_nb.specs.log_line import Stream


def app(
    *args: str,
    entrypoint: str = "sh",
    n: int = 1,
    name: str = "t",
    env: dict[str, str] | None = None,
) -> specs.AppDef:
    return specs.AppDef(
        name=name,
        roles=[
            specs.Role(
                name="r",
                image="unused",
                entrypoint=entrypoint,
                args=list(args),
                num_replicas=n,
                env=env or {},
            )
        ],
    )


def run(sched: LocalCwdScheduler, a: specs.AppDef, **cfg: object) -> str:
    return sched.schedule(sched.submit_dryrun(a, cfg))


def wait_terminal(sched: LocalCwdScheduler, app_id: str, timeout: float = 30) -> AppState:
    def done() -> AppState | None:
        d = sched.describe(app_id)
        assert d is not None
        return d.state if specs.is_terminal(d.state) else None

    return wait_for(done, timeout)  # type: ignore[return-value]


@pytest.fixture
def sched() -> LocalCwdScheduler:
    return create_scheduler("torchx", grace_seconds=1.0)


def test_success_log_layout_and_env(sched: LocalCwdScheduler, isolated: Path) -> None:
    script = (
        'echo "rank0=$TORCHX_RANK0_HOST id=$APPID rep=$REP pwd=$(pwd)"; echo oops >&2; '
        'echo "pet=$PET_LOG_DIR err=$TORCHELASTIC_ERROR_FILE unbuf=$PYTHONUNBUFFERED"'
    )
    a = app("-c", script, n=2, env={"APPID": specs.macros.app_id, "REP": specs.macros.replica_id})
    app_id = run(sched, a)
    assert app_id.startswith("t-")
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    app_dir = Path(os.environ["TORCHX_NB_DATA_DIR"]) / "local_cwd" / "torchx" / app_id
    for k in (0, 1):
        rdir = app_dir / "r" / str(k)
        out = (rdir / "stdout.log").read_text()
        assert f"rank0=localhost id={app_id} rep={k} pwd={isolated}" in out
        assert "unbuf=x" in out and f"err={rdir}/error.json" in out
        assert (rdir / "stderr.log").read_text() == "oops\n"
        combined = (rdir / "combined.log").read_text()
        assert "oops" in combined and "rank0=localhost" in combined
    desc = sched.describe(app_id)
    assert desc is not None
    assert desc.ui_url == f"file://{app_dir}"
    assert [r.state for r in desc.roles_statuses[0].replicas] == [AppState.SUCCEEDED] * 2
    assert desc.roles[0].name == "r" and desc.roles[0].num_replicas == 2


def test_an_interrupt_aimed_at_the_kernel_while_the_supervisor_starts_is_not_its_end(
    sched: LocalCwdScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel interrupt reaches the kernel's whole process group; a supervisor being spawned
    is still in it until its setsid, so it gets that SIGINT before it runs. It was killed by it
    (the job FAILED, "the job's supervisor exited before starting it": a sweep interrupted
    mid-submit left its last trial so). The supervisor starts with SIGINT blocked and drops
    one that is pending; here the SIGINT is sent the moment it is spawned."""
    from torchx_nb.schedulers import local_cwd

    spawn = local_cwd._spawn_detached

    def spawn_then_interrupt(argv: list[str], log: Path) -> int:
        pid = spawn(argv, log)
        os.kill(pid, signal.SIGINT)
        return pid

    monkeypatch.setattr(local_cwd, "_spawn_detached", spawn_then_interrupt)
    app_id = run(sched, app("-c", "echo ran"))
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    assert "".join(sched.log_iter(app_id, "r", 0)) == "ran\n"


def test_failure_reports_exit_code(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app("-c", "exit 3"))
    assert wait_terminal(sched, app_id) == AppState.FAILED
    desc = sched.describe(app_id)
    assert desc is not None and "r/0 exited with code 3" in desc.msg


def test_missing_entrypoint_fails_clearly(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app(entrypoint="no-such-program-xyz"))
    assert wait_terminal(sched, app_id) == AppState.FAILED
    desc = sched.describe(app_id)
    assert desc is not None and "could not start 'no-such-program-xyz'" in desc.structured_error_msg
    lines = list(sched.log_iter(app_id, "r", streams=Stream.STDERR))
    assert any("could not start" in ln for ln in lines)


def test_state_is_readable_from_another_process(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app("-c", "echo from-child"))
    wait_terminal(sched, app_id)
    code = (
        "from torchx_nb.schedulers.local_cwd import create_scheduler as c; s = c('torchx'); "
        f"d = s.describe({app_id!r}); print(d.state.name); "
        f"print(''.join(s.log_iter({app_id!r}, 'r')).strip()); "
        "print(len(s.list()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["SUCCEEDED", "from-child", "1"]


def test_unknown_app(sched: LocalCwdScheduler) -> None:
    assert sched.describe("nope-123") is None
    assert not sched.exists("nope-123")
    with pytest.raises(ValueError, match="unknown app"):
        list(sched.log_iter("nope-123", "r"))


def test_log_iter_streams_regex_and_tail(sched: LocalCwdScheduler) -> None:
    script = "for i in 1 2 3 4 5; do echo line$i; echo err$i >&2; sleep 0.1; done"
    app_id = run(sched, app("-c", script))
    tailed = list(sched.log_iter(app_id, "r", should_tail=True, streams=Stream.STDOUT))
    assert tailed == [f"line{i}\n" for i in range(1, 6)]
    assert list(sched.log_iter(app_id, "r", regex=r"err[24]", streams=Stream.STDERR)) == [
        "err2\n",
        "err4\n",
    ]
    combined = list(sched.log_iter(app_id, "r"))
    assert len(combined) == 10
    with pytest.raises(ValueError, match="no role 'x'"):
        sched.log_iter(app_id, "x")
    with pytest.raises(ValueError, match="replicas 0..0, not 3"):
        sched.log_iter(app_id, "r", k=3)


def test_cancel_kills_the_process_group(sched: LocalCwdScheduler, isolated: Path) -> None:
    pidfile = isolated / "grandchild.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    app_id = run(sched, app("-c", script))
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    grandchild = int(pidfile.read_text())
    sched.cancel(app_id)
    assert wait_terminal(sched, app_id) == AppState.CANCELLED

    def gone() -> bool:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return True
        st = Path(f"/proc/{grandchild}/stat")
        return st.exists() and st.read_text().rsplit(")", 1)[1].split()[0] == "Z"

    wait_for(gone, 10)


def test_cancel_escalates_to_sigkill(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app("-c", "trap '' TERM; echo ready; while true; do sleep 0.1; done"))
    wait_for(lambda: any("ready" in ln for ln in sched.log_iter(app_id, "r")))
    t0 = time.monotonic()
    sched.cancel(app_id)
    assert wait_terminal(sched, app_id) == AppState.CANCELLED
    assert time.monotonic() - t0 >= 0.9


def test_killed_supervisor_is_reported(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app("-c", "sleep 30"))
    wait_for(lambda: sched.describe(app_id).state == AppState.RUNNING)  # type: ignore[union-attr]
    state = json.loads((sched._app_dir(app_id) / "state.json").read_text())
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: sched.describe(app_id).state == AppState.FAILED)  # type: ignore[union-attr]
    desc = sched.describe(app_id)
    assert desc is not None and "supervisor was killed" in desc.msg
    child = state["roles"]["r"][0]["pid"]
    os.killpg(child, signal.SIGKILL)


def test_a_job_read_just_before_its_supervisor_ended_it_is_not_called_killed(
    sched: LocalCwdScheduler,
) -> None:
    """describe read state.json, then the supervisor wrote its final state and exited, then
    describe found it gone: that job ended, its supervisor was not killed (a fresh-clone CI
    read a SUCCEEDED job as FAILED 'the job's supervisor was killed'). The state read before the
    end is replayed against the real files of a job that ended."""
    from torchx_nb.schedulers.local_cwd_status import response_from_files
    from torchx_nb.schedulers.local_supervisor import is_same_process

    app_id = run(sched, app("-c", "true"))
    assert wait_terminal(sched, app_id) == AppState.SUCCEEDED
    app_dir = sched._app_dir(app_id)
    state = json.loads((app_dir / "state.json").read_text())
    supervisor = (state["supervisor_pid"], state["supervisor_start_ticks"])
    wait_for(lambda: sched._reap(every=0) or not is_same_process(*supervisor), timeout=10)
    request = json.loads((app_dir / "request.json").read_text())
    before_end = {**state, "final_state": None, "ended": None}
    for rep in before_end["roles"]["r"]:
        rep.update(exitcode=None, ended=None)
    resp, _ = response_from_files(app_id, app_dir, request, before_end)
    assert resp.state == AppState.SUCCEEDED and "killed" not in resp.msg, resp
    # nor one read before it wrote any state at all
    resp, _ = response_from_files(app_id, app_dir, request, None)
    assert resp.state == AppState.SUCCEEDED


def test_list_and_log_dir_option(sched: LocalCwdScheduler, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    app_id = run(sched, app("-c", "echo hi"), log_dir=str(logs))
    wait_terminal(sched, app_id)
    assert (logs / "torchx" / app_id / "r" / "0" / "stdout.log").read_text() == "hi\n"
    listed = sched.list()
    assert [(x.app_id, x.state, x.name) for x in listed] == [(app_id, AppState.SUCCEEDED, "t")]


def test_workspace_becomes_cwd_and_dryrun_has_no_side_effects(
    sched: LocalCwdScheduler, tmp_path: Path
) -> None:
    from torchx_nb.runner import Runner
    from torchx_nb.schedulers.abilities import DirWorkspaceMixin, LocalWorkspace

    ws = tmp_path / "ws"
    ws.mkdir()
    a = app("-c", "pwd")
    assert isinstance(sched, DirWorkspaceMixin) and not sched.copies_workspace(None)
    info = sched.submit_dryrun(a, {}, LocalWorkspace(str(ws)))
    assert info.request.role_params["r"][0].cwd == str(ws)
    assert not Path(info.request.state_dir).exists()
    assert '"app_id"' in repr(info)
    with pytest.raises(TorchxNbError, match="is not a folder"):
        Runner().dryrun(a, "local_cwd", {}, workspace=str(tmp_path / "missing"))


def test_dryrun_masks_secret_env(sched: LocalCwdScheduler) -> None:
    info = sched.submit_dryrun(app("-c", "true", env={"MY_API_TOKEN": "s3cr3t"}), {})
    text = repr(info)
    assert "s3cr3t" not in text and "MY_API_TOKEN" in text


def test_python_of_the_submitter_comes_first_on_path(sched: LocalCwdScheduler) -> None:
    app_id = run(sched, app("-c", "import sys; print(sys.executable)", entrypoint="python"))
    wait_terminal(sched, app_id)
    out = "".join(sched.log_iter(app_id, "r", streams=Stream.STDOUT)).strip()
    assert Path(out).parent == Path(sys.executable).parent


def test_results_come_back_survive_a_new_runner_and_a_cancel_has_none(
    isolated: Path, tmp_path: Path
) -> None:
    from tests.result_checks import (
        RAISE_CELL,
        RESULT_CELL,
        assert_raises_remotely,
        assert_round_trip,
        result_workspace,
    )
    from torchx_nb.components.cell import cell
    from torchx_nb.notebook.handle import JobHandle
    from torchx_nb.results import NoResult
    from torchx_nb.runner import Runner, get_runner

    ws = result_workspace(tmp_path)
    with get_runner() as runner:
        ok = runner.run(cell(source=RESULT_CELL), "local_cwd", {}, workspace=str(ws))
        bad = runner.run(cell(source=RAISE_CELL), "local_cwd", {}, workspace=str(ws))
        slow = runner.run(
            cell(source="import time\ntime.sleep(60)\n1"), "local_cwd", {}, workspace=str(ws)
        )
        assert_round_trip(runner, ok, tmp_path / "dl")
        assert_raises_remotely(runner, bad)
        with pytest.raises(TimeoutError, match="still RUNNING after 0.5 s"):
            JobHandle(slow, runner).result(timeout=0.5)
        runner.cancel(slow)
        with pytest.raises(NoResult, match=r"ended CANCELLED .*without a result"):
            JobHandle(slow, runner).result(timeout=30)
    # the job's files are private to the user
    rec = Runner("torchx").jobstore.get(ok)
    assert rec is not None and rec.outputs
    out = Path(rec.outputs.removeprefix("file://"))
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    # a kernel restart: a new runner finds the result through the job store
    with Runner("torchx") as again:
        assert JobHandle(ok, again).result().acc == 0.9
    # the workspace got nothing written into it (it holds only the module the cell imports)
    assert [p.name for p in ws.iterdir()] == ["tnb_wsmod.py"]
    # a component run has outputs but no result: one clear line
    with get_runner() as runner:
        echo = runner.run(runner.component_app("utils.echo", {"msg": "hi"}), "local_cwd", {})
        with pytest.raises(
            NoResult, match="SUCCEEDED without a result: nothing of torchx_nb's cell runner"
        ):
            JobHandle(echo, runner).result(timeout=30)


def test_a_python_entry_point_under_torchrun_gets_its_exception_in_the_card(
    tmp_path: Path,
) -> None:
    """dist.ddp of a script whose main is torchelastic's @record: torchrun writes the error
    file, local_cwd passes it through, and the failure card names the exception."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from tests.infra.fixtures import missing

        missing("torch (bash scripts/test installs its CPU build)")
    from torchx_nb.runner import get_runner

    (tmp_path / "train.py").write_text(
        "from torch.distributed.elastic.multiprocessing.errors import record\n\n"
        "@record\ndef main():\n    raise ValueError('bad batch')\n\nmain()\n"
    )
    with get_runner() as runner:
        app = runner.component_app("dist.ddp", ["-j", "1x1", "--script", "train.py"])
        handle = runner.run(app, "local_cwd", {}, workspace=str(tmp_path))
        status = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert status is not None and status.state.name == "FAILED"
        cards = runner.failure_cards(handle, status)
        assert cards and cards[0].exception == "ValueError: bad batch", cards
        assert cards[0].headline().startswith(f"{cards[0].role}/0 raised ValueError: bad batch")


def test_who_cancelled_is_said_ours_or_a_signal_from_elsewhere(isolated: Path) -> None:
    """``torchx-nb cancel`` of a job: its status says it was cancelled, by whom and with
    what; a SIGTERM sent to another job's supervisor from outside torchx_nb: its status says
    that signal stopped it, from outside torchx_nb (it is not called a torchx_nb cancel)."""
    import getpass
    import re

    from tests.conftest import cli
    from torchx_nb.runner import get_runner

    code, out, err = cli("run", "-s", "local_cwd", "utils.sh", "sleep", "60")
    assert code == 0, err
    ours = out.strip().splitlines()[-1]
    code, out, err = cli("run", "-s", "local_cwd", "utils.sh", "sleep", "60")
    assert code == 0, err
    theirs = out.strip().splitlines()[-1]
    with get_runner() as runner:
        for handle in (ours, theirs):
            wait_for(lambda h=handle: runner.status(h).state == AppState.RUNNING, 30)  # type: ignore[union-attr]
        code, _, err = cli("cancel", ours)
        assert code == 0, err
        sched = runner.get_scheduler("local_cwd")
        assert isinstance(sched, LocalCwdScheduler)
        state_dir = sched._app_dir(theirs.rsplit("/", 1)[1])
        pid = int((state_dir / "supervisor.pid").read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
        cancelled = runner.wait(ours, wait_interval=0.2, timeout=60)
        stopped = runner.wait(theirs, wait_interval=0.2, timeout=60)
    assert cancelled is not None and cancelled.state == AppState.CANCELLED
    assert stopped is not None and stopped.state == AppState.CANCELLED
    user = getpass.getuser()
    assert re.fullmatch(
        rf"it was cancelled by {user} with torchx-nb cancel \(pid \d+\)", cancelled.msg
    ), cancelled.msg
    assert stopped.msg == (
        f"it was stopped by SIGTERM sent to its supervisor (pid {pid}) from outside torchx_nb"
    )
    (rep,) = [r for rs in cancelled.roles for r in rs.replicas]
    assert rep.ending == cancelled.msg.removeprefix("it ")
    code, out, err = cli("status", theirs)
    assert code == 0, err
    assert "State: CANCELLED" in out and "from outside torchx_nb" in out, out


def test_who_cancelled_is_one_clean_bounded_line_for_a_hostile_user_name(isolated: Path) -> None:
    """A user name with a newline, terminal escapes and 10,000 characters ($LOGNAME, which
    getpass reads first) cancels a job: its status, card ending and CLI status say who in
    one line without the escapes, the name cut short (it forged a second 'Msg' line)."""
    import re

    from tests.conftest import cli
    from torchx_nb.runner import get_runner

    code, out, err = cli("run", "-s", "local_cwd", "utils.sh", "sleep", "60")
    assert code == 0, err
    handle = out.strip().splitlines()[-1]
    hostile = "alice\x1b[31m\nState: SUCCEEDED\x1b]0;title\x07" + "x" * 10_000
    with get_runner() as runner:
        wait_for(lambda: runner.status(handle).state == AppState.RUNNING, 30)  # type: ignore[union-attr]
        code, _, err = cli("cancel", handle, env={"LOGNAME": hostile, "USER": hostile})
        assert code == 0, err
        cancelled = runner.wait(handle, wait_interval=0.2, timeout=60)
    assert cancelled is not None and cancelled.state == AppState.CANCELLED
    assert re.fullmatch(
        r"it was cancelled by alice State: SUCCEEDEDx+… \(\d+ more characters\) with"
        r" torchx-nb cancel \(pid \d+\)",
        cancelled.msg,
    ), cancelled.msg[:300]
    assert len(cancelled.msg) < 150
    (rep,) = [r for rs in cancelled.roles for r in rs.replicas]
    assert rep.ending == cancelled.msg.removeprefix("it ")
    code, out, err = cli("status", handle)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out, out
    (msg,) = [line for line in out.splitlines() if "cancelled by" in line]
    assert msg.strip() == f"Msg: {cancelled.msg}", out
    assert "State: SUCCEEDED" not in out.replace(cancelled.msg, ""), out


def test_the_supervisors_child_list_names_a_live_child_until_it_is_reaped() -> None:
    """The supervisor skips its scan of every process at a job's end when it has no child
    (what a job leaves is its descendant): the list it asks must name a live child."""
    from torchx_nb.schedulers.local_supervisor.processes import child_pids

    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert proc.pid in (child_pids() or [])
    finally:
        proc.kill()
        proc.wait()
    assert child_pids() is not None and proc.pid not in (child_pids() or [])
