"""The ``torchx-nb`` command, run as a real subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI, cli, cli_error, wait_for


def test_console_script_runs_echo_end_to_end() -> None:
    exe = shutil.which("torchx-nb")
    if exe is None:
        if IN_CI:
            pytest.fail("torchx-nb is not on PATH: the package is not installed")
        pytest.skip("torchx-nb not installed")
    out = subprocess.run(
        [exe, "run", "-s", "local_cwd", "--wait", "utils.echo", "--msg", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    handle, log = out.stdout.splitlines()[:2]
    assert handle.startswith("local_cwd://torchx/echo-")
    assert log == "echo/0 hi"
    assert f"{handle} SUCCEEDED" in out.stderr


def test_the_command_ends_as_the_interpreter_would_without_its_teardown(tmp_path: Path) -> None:
    """``command`` waits for a non-daemon thread, runs the atexit handlers, flushes a line
    without its newline and keeps the exit code, as the interpreter's exit does; but it skips
    the teardown (no object is freed: a finalizer never runs), which cost a command 20 to
    45 ms."""
    import sys
    import textwrap

    script = tmp_path / "command.py"
    script.write_text(
        textwrap.dedent(
            """
            import atexit, threading, time
            import torchx_nb.cli as cli

            class Held:
                def __del__(self):
                    print("torn down")

            held = Held()

            def late():
                time.sleep(0.2)
                print("thread done")

            def main(argv=None):
                threading.Thread(target=late).start()
                print("main ", end="")
                return 3

            atexit.register(print, "atexit ran")
            cli.main = main
            cli.command()
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (3, "main thread done\natexit ran\n", "")


def test_the_command_ends_with_a_thread_pool_left_open(tmp_path: Path) -> None:
    """A thread pool nobody shut down (a plugin scheduler's, a library's) is shut down as the
    interpreter's exit does (``concurrent.futures`` asks it through ``threading``): the
    command ends, with its code, rather than waiting for its idle workers for ever."""
    import sys
    import textwrap

    script = tmp_path / "pool.py"
    script.write_text(
        textwrap.dedent(
            """
            from concurrent.futures import ThreadPoolExecutor
            import torchx_nb.cli as cli

            POOL = ThreadPoolExecutor(2)

            def main(argv=None):
                print(POOL.submit(lambda: "pool done").result())
                return 5

            cli.main = main
            cli.command()
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout, out.stderr) == (5, "pool done\n", "")


def test_a_command_leaves_the_store_whole_for_a_copy_and_a_restore(isolated: Path) -> None:
    """After a command the store is one file again, as a user copies it: ``cp jobs.sqlite``
    holds the job it ran, and a backup copied back over it is what the next command lists
    (a write-ahead log left behind would hold the job outside the copy, and replay the
    store as it was over the restored backup)."""
    import sqlite3

    store = Path(os.environ["TORCHX_NB_DATA_DIR"]) / "jobs.sqlite"
    code, out, err = cli("run", "-s", "local_cwd", "--wait", "utils.echo", "--msg", "one")
    assert code == 0, err
    first = out.splitlines()[0]
    backup = isolated / "backup.sqlite"
    shutil.copyfile(store, backup)
    assert not Path(f"{store}-wal").exists()
    with sqlite3.connect(backup) as db:
        assert db.execute("SELECT handle FROM jobs").fetchall() == [(first,)]
    code, out, err = cli("run", "-s", "local_cwd", "--wait", "utils.echo", "--msg", "two")
    assert code == 0, err
    shutil.copyfile(backup, store)  # cp backup.sqlite jobs.sqlite: the same file, rewritten
    code, out, err = cli("list")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == [first]


def test_run_status_log_describe_list_cancel() -> None:
    code, out, err = cli("run", "utils.sh", "--", "sh", "-c", "echo one; echo two >&2; sleep 30")
    assert code == 0, err
    handle = out.strip()
    # the same role/replica prefix as run --wait, followed or not
    out = str(wait_for(lambda: cli("log", f"{handle}/sh/0", "--streams", "stdout")[1]))
    assert out.splitlines() == ["sh/0 one"]
    code, out, _ = cli("status", handle)
    assert code == 0 and "State: RUNNING" in out
    ui = next(line for line in out.splitlines() if "UI URL:" in line)
    assert "file://" not in ui and ui.split("UI URL: ")[1].startswith("/"), ui
    code, out, _ = cli("describe", handle)
    assert code == 0 and '"entrypoint": "sh"' in out
    code, out, _ = cli("list")
    assert code == 0 and handle in out and "RUNNING" in out
    code, _, err = cli("cancel", handle)
    assert code == 0 and "cancel requested" in err
    code, out, _ = cli("log", handle, "--tail", "--regex", "one|two")
    assert (code == 0 and out.splitlines() == ["sh/0 one", "sh/0 two"]) or sorted(
        out.splitlines()
    ) == ["sh/0 one", "sh/0 two"]
    code, out, _ = cli("status", handle)
    assert "State: CANCELLED" in out


def test_failed_job_exits_non_zero_with_reason() -> None:
    code, _out, err = cli("run", "--wait", "utils.python", "--c", "import sys; sys.exit(4)")
    assert code == 1
    assert "FAILED" in err and "python/0 exited with code 4" in err


def test_dryrun_prints_request_and_submits_nothing(isolated: Path) -> None:
    """A few lines first (what runs where, what ships, how big the request is); the whole
    request, masked, with --json."""
    args = ("run", "--dryrun", "utils.sh", "--env", "DB_PASSWORD=hunter2", "--", "true")
    code, out, err = cli(*args)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:3] == [
        "dry run on local_cwd: nothing built, pushed or submitted",
        "program:   sh -c true",
        "runs:      sh: 1 replica · 1 cpu, 1024 MB",
    ]
    assert lines[3] == f"ships:     runs in {isolated} (nothing is copied)"
    assert lines[4].startswith("request:   ") and lines[4].endswith(
        " KB; the whole request: --json"
    )
    assert len(lines) == 5 and "hunter2" not in out
    code, out, err = cli(*args[:2], "--json", *args[2:])
    assert code == 0, err
    assert out.startswith("dry run on local_cwd:") and "the whole request (" in out
    assert '"role_params"' in out and "hunter2" not in out
    code, out, _ = cli("list")
    assert out.strip().splitlines() == ["HANDLE  STATE  NAME  SUBMITTED  DURATION  QUEUED  RAN"]


@pytest.mark.parametrize(
    ("scheduler", "rank0"),
    [("local_cwd", "TORCHX_RANK0_HOST"), ("slurm", "SLURM_JOB_NODELIST_HET_GROUP_0")],
)
def test_the_dry_runs_program_line_shows_macros_as_the_request_has_them(
    isolated: Path, scheduler: str, rank0: str
) -> None:
    """``dist.ddp``'s ``$${${rank0_env}:=localhost}`` is shown as the backend's request has
    it, ``${VARIABLE:=localhost}`` (was the raw template, which no request holds)."""
    (isolated / "train.py").write_text("print(1)\n")
    code, out, err = cli(
        "run", "--dryrun", "-s", scheduler, "dist.ddp", "-j", "2x1", "--script", "train.py"
    )
    assert code == 0, err
    program = out.splitlines()[1]
    endpoint = f"--rdzv_endpoint ${{{rank0}:=localhost}}"  # the line is cut at 100 characters
    assert program.startswith(f"program:   bash -c torchrun --rdzv_backend c10d {endpoint}")
    assert "rank0_env" not in program and "$$" not in program
    code, out, err = cli(
        "run",
        "--dryrun",
        "--json",
        "-s",
        scheduler,
        "dist.ddp",
        "-j",
        "2x1",
        "--script",
        "train.py",
    )
    assert code == 0 and endpoint in out.split("the whole request (", 1)[1], err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "-s", "local_cdw", "utils.echo"],
            "unknown scheduler 'local_cdw'; did you mean 'local_cwd'?",
        ),
        (["run", "utils.ecko"], "unknown component 'utils.ecko'; did you mean 'utils.echo'?"),
        (
            ["run", "-cfg", "logdir=/x", "utils.echo"],
            "unknown option 'logdir'; did you mean 'log_dir'?",
        ),
        (["run", "-cfg", "prepend_cwd=perhaps", "utils.echo"], "option 'prepend_cwd' expects bool"),
        (["run", "-cfg", "novalue", "utils.echo"], "write them as KEY=VALUE"),
        (  # a shell's $'\xff': argv's byte that is not UTF-8, read as a lone surrogate
            ["run", "-cfg", "log_dir=/tmp/\udcff", "utils.echo"],
            "option 'log_dir' holds a byte that is not UTF-8 ('/tmp/\\xff'): give -cfg log_dir=",
        ),
        (
            ["run", "--dryrun", "-cfg", "log\udcff_dir=/tmp", "utils.echo"],
            "an option name holds a byte that is not UTF-8 ('log\\xff_dir')",
        ),
        (["status", "not-a-handle"], "malformed app handle 'not-a-handle'"),
        (["status", "local_cwd://torchx/nope-1"], "unknown app"),
        (["run", "dist.ddp", "--script", "t.py", "-j", "2y3"], "bad -j '2y3'"),
        (
            ["run", "utils.sh", "--h", "gpu.smal", "true"],
            "unknown named resource 'gpu.smal'; did you mean 'gpu.small'?",
        ),
        (["run", "utils.echo", "--nope", "1"], "unrecognized arguments: --nope"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (
            ["cancel", "sweep-nope"],
            "no sweep 'sweep-nope' in the job store (see %torchx list, or torchx-nb list)",
        ),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], message: str) -> None:
    code, _out, err = cli(*args)
    assert code != 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("torchx-nb: error: ")
    assert message in lines[0]
    assert "Traceback" not in err


def test_missing_required_option_from_a_plugin_scheduler(plugin_path: Path) -> None:
    code, _, err = cli("run", "-s", "needs_queue", "utils.echo")
    assert code == 1
    assert "missing required option 'queue'" in err and "-cfg queue=VALUE" in err
    code, out, err = cli(
        "run",
        "-s",
        "needs_queue",
        "-cfg",
        "queue=q1,priority=2",
        "--wait",
        "utils.echo",
        "--msg",
        "plugged",
    )
    assert code == 0, err
    assert out.startswith("needs_queue://torchx/echo-")
    code, _, err = cli("run", "-s", "needs_queue", "-cfg", "queue=q,priority=high", "utils.echo")
    assert "option 'priority' expects int" in err


def test_torchxconfig_supplies_scheduler_options(tmp_path: Path, plugin_path: Path) -> None:
    conf = tmp_path / "tx.ini"
    conf.write_text("[needs_queue]\nqueue = from-file\n[cli:run]\nscheduler = needs_queue\n")
    code, out, err = cli("run", "--dryrun", "utils.echo", env={"TORCHXCONFIG": str(conf)})
    assert code == 0, err
    code, out, err = cli("run", "utils.echo", env={"TORCHXCONFIG": str(conf)})
    assert code == 0 and out.startswith("needs_queue://"), err


def test_info_commands(isolated: Path) -> None:
    code, out, _ = cli("runopts", "local_cwd")
    assert code == 0 and "log_dir=LOG_DIR (str, None)" in out
    code, out, _ = cli("schedulers")
    assert code == 0 and "local_cwd" in out
    code, out, _ = cli("resources")
    assert code == 0 and "aws_p4d.24xlarge" in out and "gpu.small" in out
    code, out, _ = cli("configure", "--print", "--all", "-s", "local_cwd")
    assert code == 0 and "[local_cwd]\nlog_dir = None" in out
    code, _, err = cli("configure", "-s", "local_cwd")
    assert code == 0 and (isolated / ".torchxconfig").exists()
    code, _, err = cli("configure", "-s", "local_cwd")
    assert code == 2 and "exists already" in err


def test_component_help() -> None:
    code, out, _ = cli("run", "utils.echo", "--help")
    assert code == 0 and "Echoes a message" in out and "--msg" in out


def test_result_and_outputs_commands(isolated: Path, tmp_path: Path) -> None:
    """``torchx-nb result`` and ``outputs`` print exactly what the user needs, and their
    failures are one line (a cell's exception: its traceback first, then the line)."""
    from torchx_nb.components.cell import cell
    from torchx_nb.runner import get_runner

    ws = tmp_path / "ws"
    ws.mkdir()
    source = (
        "import os\n"
        "open(os.environ['TORCHX_OUTPUT_DIR'] + '/a.txt', 'w').write('hello')\n"
        "{'answer': 42}\n"
    )
    with get_runner() as runner:
        ok = runner.run(cell(source=source), "local_cwd", {}, str(ws))
        bad = runner.run(cell(source="x = 1\nx / 0"), "local_cwd", {}, str(ws))
    code, out, err = cli("result", ok)
    assert (code, out, err) == (0, "{'answer': 42}\n", "")
    code, out, err = cli("outputs", ok)
    assert (code, out) == (0, "           5  a.txt\n")
    dest = tmp_path / "got"
    code, out, err = cli("outputs", ok, "--download", str(dest))
    assert code == 0 and out == ""
    assert err.endswith(f"torchx-nb: downloaded the outputs of {ok} to {dest}\n")
    assert (dest / "a.txt").read_text() == "hello"
    code, out, err = cli("result", bad)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[:2] == [
        "Traceback (most recent call last):",
        '  File "<cell>", line 2, in <module>',
    ]
    assert lines[-1] == "torchx-nb: error: the cell raised ZeroDivisionError: division by zero"
    missing = cli_error("result", "local_cwd://torchx/nope-123")
    assert missing.startswith("torchx-nb: error: unknown app 'local_cwd://torchx/nope-123'")
    echo = cli("run", "--wait", "utils.echo", "--msg", "hi")[1].splitlines()[0]
    assert cli_error("result", echo) == (
        f"torchx-nb: error: {echo} ended SUCCEEDED without a result: nothing of torchx_nb's"
        " cell runner is in its output folder (a component rather than a cell, or the folder"
        " was emptied)"
    )


def test_sweep_command(isolated: Path) -> None:
    """``torchx-nb sweep``: ${NAME} in the arguments, one handle per trial in grid order on
    stdout, --wait prints the table and exits 1 when a trial failed; bad grids are one line."""
    code, out, err = cli(
        "sweep", "--wait", "-p", "n=1,2", "utils.sh", "--", "sh", "-c", "exit $((${n} - 1))"
    )
    handles = out.splitlines()[:2]
    assert all(h.startswith("local_cwd://torchx/sh-") for h in handles), out
    assert code == 1
    assert err.startswith("torchx-nb: sweep-") and "2 trials, one job per trial" in err
    table = out.splitlines()[2:]
    assert "1 done · 1 failed · 0 running · 0 waiting" in table[0]
    assert [line.split()[:3] for line in table[2:]] == [
        ["0", "1", "SUCCEEDED"],
        ["1", "2", "FAILED"],
    ]
    assert cli_error("sweep", "-p", "n=1", "-p", "n=2", "utils.echo") == (
        "torchx-nb: error: -p n is given twice; list all its values in one -p"
    )
    assert cli_error("sweep", "-p", "n=1", "utils.echo", "--msg", "${m}") == (
        "torchx-nb: error: ${m} in the arguments is not a -p parameter (parameters: n)"
    )
    assert cli_error("sweep", "--max-parallel", "0", "-p", "n=1", "utils.echo").startswith(
        "torchx-nb: error: argument --max-parallel"
    )
    from torchx_nb.runner import get_runner

    assert len(get_runner().jobstore.list()) == 2  # nothing submitted by the refused lines


def test_watch_follows_a_job_submitted_by_another_process(isolated: Path) -> None:
    """``torchx-nb watch`` finds a job from the job store and follows it as ``run --wait``
    does: its lines, its end, the exit status; a sweep's id waits for every trial."""
    code, out, err = cli("run", "utils.sh", "--", "sh", "-c", "echo first; sleep 2; echo second")
    assert code == 0, err
    handle = out.strip()
    code, out, err = cli("watch", handle)
    assert code == 0, err
    assert out.splitlines() == ["sh/0 first", "sh/0 second"], out  # as run --wait prints them
    assert err.strip().endswith(f"{handle} SUCCEEDED")
    code, out, err = cli("run", "utils.sh", "--", "sh", "-c", "echo bad; exit 3")
    handle = out.strip()
    code, out, err = cli("watch", "--no-log", handle)
    assert code == 1 and out == ""
    assert f"{handle} FAILED" in err and "exit" in err, err
    code, out, err = cli("watch", "local_cwd://torchx/never-was-1")
    assert code != 0 and err.strip().splitlines()[-1].startswith(
        "torchx-nb: error: unknown app 'local_cwd://torchx/never-was-1'"
    ), err
    code, out, err = cli("sweep", "-p", "n=1,2", "utils.sh", "--", "true")
    assert code == 0, err
    sweep_id = err.split(":")[1].strip()
    code, out, err = cli("watch", sweep_id)
    assert code == 0, err
    assert sweep_id in out and out.count("SUCCEEDED") == 2, out


def test_a_failed_cell_shows_its_failure_card(isolated: Path) -> None:
    """``status`` of a cell that raised: the card says which replica, what it raised, its exit
    code and its last lines; ``watch`` ends with the same headline."""
    from torchx_nb.components.cell import cell
    from torchx_nb.runner import get_runner

    with get_runner() as runner:
        handle = runner.run(
            cell(source="print('loading', flush=True)\nraise ValueError('boom')"),
            "local_cwd",
            {},
            workspace=str(isolated),
        )
        runner.wait(handle, wait_interval=0.1, timeout=60)
    code, out, err = cli("status", handle)
    assert code == 0, err
    card = out[out.index("cell/0 raised") :].splitlines()
    assert card[0] == "cell/0 raised ValueError: boom (exit code 1)"
    assert card[1] == "  last lines:" and card[2] == "    loading"
    assert card[-1] == "    ValueError: boom"
    code, out, err = cli("watch", "--no-log", handle)
    assert code == 1
    assert "torchx-nb: cell/0 raised ValueError: boom (exit code 1)" in err, err


def test_preempt_a_local_job_and_its_status_tells_the_story(tmp_path: Path) -> None:
    """``torchx-nb preempt`` on a running local_cwd job: one line, the job runs again from
    its checkpoint (a file here) under the same handle, and ``status`` tells the preemption."""
    ck = tmp_path / "ck"
    program = (
        f"import os, sys, time\nif os.path.exists({str(ck)!r}):\n    print('resumed'); sys.exit(0)\n"
        f"open({str(ck)!r}, 'w').close()\ntime.sleep(120)\n"
    )
    code, out, err = cli("run", "utils.python", "--c", program)
    assert code == 0, err
    handle = out.strip()
    wait_for(lambda: ck.exists() and "State: RUNNING" in cli("status", handle)[1], timeout=60)
    code, _, err = cli("preempt", handle, "--grace", "2")
    assert code == 0 and err.splitlines() == [
        f"torchx-nb: preempted {handle}: it gets SIGTERM, then runs again as its backend runs"
        " a preempted job"
    ], err
    wait_for(lambda: "State: SUCCEEDED" in cli("status", handle)[1], timeout=90)
    _, out, _ = cli("status", handle)
    lines = out.splitlines()
    at = lines.index("Attempts: 2 (1 preemption, 0 failures)")
    assert lines[at + 1].startswith("  preempted at ") and ", resumed at " in lines[at + 1]


def test_preempt_where_the_backend_cannot_is_one_line() -> None:
    code, out, err = cli("preempt", "aws_batch://torchx/queue:job-1")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "torchx-nb: error: aws_batch cannot preempt a job on request: run it on spot capacity"
        " (-cfg spot=True) and its preemptions are told as they come"
    ]
    code, _, err = cli("preempt", "local_cwd://torchx/nope-1")
    assert code == 1 and err.splitlines() == [
        "torchx-nb: error: unknown app 'local_cwd://torchx/nope-1': the scheduler has no record"
        " of it (check the handle with `torchx-nb list`)"
    ], err


def test_max_preemptions_is_an_option_and_past_it_the_job_fails(tmp_path: Path) -> None:
    """``-cfg max_preemptions=0`` on local_cwd: the first preemption fails the job with the
    limit's one line, instead of running it again."""
    ck = tmp_path / "ck"
    program = f"import time\nopen({str(ck)!r}, 'w').close()\ntime.sleep(120)\n"
    code, out, err = cli("run", "-cfg", "max_preemptions=0", "utils.python", "--c", program)
    assert code == 0, err
    handle = out.strip()
    wait_for(lambda: ck.exists() and "State: RUNNING" in cli("status", handle)[1], timeout=60)
    assert cli("preempt", handle, "--grace", "1")[0] == 0
    wait_for(lambda: "State: FAILED" in cli("status", handle)[1], timeout=90)
    _, out, _ = cli("status", handle)
    assert "preempted 1 times (limit 0): preempted at " in out, out
    code, _, err = cli("run", "--dryrun", "-cfg", "max_preemptions=-1", "utils.echo")
    assert code != 0 and "max_preemptions must be 0 or more, not -1" in err, err
