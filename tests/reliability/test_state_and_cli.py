"""Unlucky state and hostile input at the command line: a corrupt, unreadable or locked job
store, late writes, hostile job names and handles, bad regexes, template placeholders,
helper functions given as components, missing extras, log output that is one huge line."""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import cli, cli_error
from tests.test_jobstore import record
from torchx_nb.errors import one_line
from torchx_nb.jobstore import JobStore, JobStoreError
from torchx_nb.schedulers.logs import LineSplitter, split_lines_iterator


def test_corrupt_job_store_gives_one_line_naming_the_file_and_fix(tmp_path: Path) -> None:
    store = tmp_path / "jobs.sqlite"
    store.write_bytes(b"this is not a database" * 100)
    code, out, err = cli("list", env={"TORCHX_NB_JOBSTORE": str(store)})
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"cannot use the job store {store}" in lines[0]
    assert f"mv {store} {store}.bad" in lines[0]


def test_unreadable_job_store_names_the_file(tmp_path: Path) -> None:
    store = tmp_path / "jobs.sqlite"
    store.mkdir()  # a folder where the file should be: unreadable as a database, even for root
    with pytest.raises(JobStoreError, match=f"cannot use the job store {store}"):
        JobStore(store)


def test_locked_job_store_names_the_holder_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    JobStore(path).add(record("local_cwd://torchx/a-1"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(JobStoreError, match="stayed locked for 0.3 s"):
            JobStore(path, timeout=0.3).update_state("local_cwd://torchx/a-1", "RUNNING")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_finished_job_is_never_moved_back_to_running(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    handle = "local_cwd://torchx/a-1"
    store.add(record(handle))
    store.update_state(handle, "SUCCEEDED", ended=123.0)
    store.update_state(handle, "RUNNING")
    store.update_state(handle, "FAILED")
    rec = store.get(handle)
    assert rec is not None and rec.state == "SUCCEEDED" and rec.ended == 123.0


def test_job_store_file_is_private(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "sub" / "jobs.sqlite")
    assert store.path.stat().st_mode & 0o077 == 0
    assert store.path.parent.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    "name",
    ["$(touch PWNED)", "'; touch PWNED; '", "`touch PWNED`", "../../escape", "a b\nc", "-rf"],
)
def test_hostile_job_names_are_harmless(name: str, isolated: Path) -> None:
    code, out, err = cli("run", "--wait", "utils.python", f"--name={name}", "-c", "print('ran')")
    assert code == 0, err
    assert not (isolated / "PWNED").exists()
    handle = next(ln for ln in out.splitlines() if ln.startswith("local_cwd://"))
    app_id = handle.rsplit("/", 1)[1]
    assert app_id.replace("-", "").replace("_", "").isalnum()
    data = Path(__import__("os").environ["TORCHX_NB_DATA_DIR"])
    assert (data / "local_cwd" / "torchx" / app_id).is_dir()
    assert not list(isolated.parent.glob("escape*"))


def test_hostile_name_cannot_inject_into_the_torchrun_line() -> None:
    from torchx_nb.runner import get_runner

    runner = get_runner()
    info = runner.dryrun_component(
        "dist.ddp", ["--name", "x/'; touch PWNED; '", "-j", "1x1", "--script", "t.py"], "local_cwd"
    )
    args = next(iter(info.request.role_params.values()))[0].args
    line = args[-1]
    tokens = shlex.split(line)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", tokens[tokens.index("--rdzv_id") + 1])
    assert ";" not in line and "'" not in tokens[tokens.index("--rdzv_id") + 1]


def test_hostile_handles_give_one_line() -> None:
    for handle in ("local_cwd://torchx/../../etc", "local_cwd://torchx/..", "nope"):
        code, out, err = cli("status", handle)
        assert code != 0 and out == ""
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err


def test_bad_regex_is_one_usage_line() -> None:
    code, _, err = cli("log", "local_cwd://torchx/x-1", "--regex", "(")
    assert code == 2
    assert err.strip().splitlines() == [
        "torchx-nb: error: argument --regex: bad regular expression '(': missing ): ("
        " [RE2 syntax: no backreferences or lookaround] (see `torchx-nb log --help`)"
    ]


def test_version() -> None:
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("torchx-nb 0.")


def test_configure_placeholders_are_not_used_as_values(isolated: Path) -> None:
    code, _, err = cli("configure", "-s", "aws_batch")
    assert code == 0, err
    code, out, err = cli(
        "run", "--dryrun", "-s", "aws_batch", "utils.echo", env={"TORCHXCONFIG": ".torchxconfig"}
    )
    assert code == 1 and out == ""
    assert "queue is still the template's placeholder" in err
    assert len(err.strip().splitlines()) == 1


def test_required_option_given_empty_is_refused() -> None:
    code, _, err = cli("run", "--dryrun", "-s", "aws_batch", "-cfg", "queue=", "utils.echo")
    assert code == 1 and "missing required option 'queue'" in err


def test_helper_function_given_as_component_is_one_line(isolated: Path) -> None:
    (isolated / "comp.py").write_text("def helper(x: str = 'a') -> str:\n    return x\n")
    code, _, err = cli("run", "--dryrun", "comp.py:helper")
    assert code != 0
    assert err.strip().splitlines() == [
        "torchx-nb: error: torchx-nb run comp.py:helper is not a component: helper() returned"
        " str, not an AppDef"
    ]


def test_missing_extra_names_the_pip_command() -> None:
    e = ModuleNotFoundError("No module named 'boto3'", name="boto3")
    assert (
        one_line(e) == "boto3 is not installed; install it with: pip install 'torchx_nb[aws_batch]'"
    )


def test_carriage_return_progress_line_costs_bounded_memory() -> None:
    splitter = LineSplitter(max_pending=1 << 16)
    chunk = "\r" + "47% |#####     | " * 200
    for _ in range(2000):  # about 7 MB in one "line"
        assert list(splitter.feed(chunk)) == []
        assert splitter._size < (1 << 16) + len(chunk)
    (line,) = splitter.feed("\rdone\n")
    assert line.endswith("\rdone\n") and len(line) < (1 << 16) + 2 * len(chunk)


def test_multibyte_characters_split_across_chunks_survive() -> None:
    data = "größe → 温度 🙂\n".encode()
    chunks = [data[i : i + 1] for i in range(len(data))]
    assert list(split_lines_iterator(chunks)) == ["größe → 温度 🙂\n"]


JOB_VARS = ", ".join(f"j{i}" for i in range(10))


def test_fifty_concurrent_submissions_from_cli_and_kernels_are_all_recorded(
    isolated: Path,
) -> None:
    """30 CLI processes and two kernels submitting 10 cells each, all at once: every job runs
    and every one is in the job store."""
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.notebook.test_quickstart import execute

    results: list[tuple[int, str, str]] = []
    notebooks = [
        new_notebook(
            cells=[
                new_code_cell("%load_ext torchx_nb"),
                *[new_code_cell(f"%%torchx run -o j{i}\nprint('k{k} c{i}')") for i in range(10)],
                new_code_cell(f"print(' '.join(j.handle for j in [{JOB_VARS}]))"),
            ]
        )
        for k in range(2)
    ]
    lock = threading.Lock()

    def submit(i: int) -> None:
        r = cli("run", "utils.echo", "--msg", f"m{i}", timeout=180)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(30)]
    threads += [threading.Thread(target=execute, args=(nb, isolated)) for nb in notebooks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(code == 0 for code, _, _ in results), [e for c, _, e in results if c]
    handles = {out.strip().splitlines()[-1] for _, out, _ in results}
    for nb in notebooks:
        last = nb.cells[-1].outputs[0]["text"].split()
        handles |= set(last)
    assert len(handles) == 50
    stored = {r.handle for r in JobStore().list()}
    assert handles <= stored


def _planted_data_dir(root: Path) -> tuple[Path, subprocess.Popen[bytes]]:
    """A data dir someone prepared in advance, world-writable, with a local_cwd state.json
    naming a live process (that ``list`` would otherwise signal as a leftover)."""
    data = root / "shared-data"
    app = data / "local_cwd" / "torchx" / "planted-1"
    app.mkdir(parents=True)
    victim = subprocess.Popen(["sleep", "60"])
    (app / "request.json").write_text(
        json.dumps({"roles": [], "role_params": {}, "log_dir": str(app)})
    )
    (app / "state.json").write_text(
        json.dumps(
            {
                "roles": {"r": [{"exitcode": None, "pid": victim.pid}]},
                "cancelled": False,
                "supervisor_pid": victim.pid,
                "supervisor_start_ticks": 1,
            }
        )
    )
    for folder in (data, data / "local_cwd", data / "local_cwd" / "torchx", app):
        os.chmod(folder, 0o777)
    return data, victim


def test_a_planted_world_writable_data_dir_is_refused(tmp_path: Path) -> None:
    data, victim = _planted_data_dir(tmp_path)
    try:
        for args in (
            ("list",),
            ("run", "utils.echo", "--msg", "hi"),
            ("status", "local_cwd://torchx/planted-1"),
        ):
            line = cli_error(*args, env={"TORCHX_NB_DATA_DIR": str(data)})
            assert line == (
                f"torchx-nb: error: {data} is writable by others (mode 777), so its contents"
                f" cannot be trusted: check them, then chmod 700 {data} (or set"
                " TORCHX_NB_DATA_DIR to a new folder)"
            ), line
        assert victim.poll() is None, "the planted state named a process: it must live"
        assert not (data / "jobs.sqlite").exists(), "no job landed in the shared store"
    finally:
        victim.kill()
        victim.wait()


def test_a_data_dir_or_store_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    data = tmp_path / "theirs"
    data.mkdir(mode=0o700)
    os.chown(data, 65534, 65534)
    line = cli_error("list", env={"TORCHX_NB_DATA_DIR": str(data)})
    assert line == (
        f"torchx-nb: error: {data} belongs to another user (uid 65534); torchx_nb will not keep"
        " its state there: set TORCHX_NB_DATA_DIR to a folder of your own"
    )
    store = tmp_path / "their-jobs.sqlite"
    store.write_text("")
    os.chown(store, 65534, 65534)
    line = cli_error("list", env={"TORCHX_NB_JOBSTORE": str(store)})
    assert "belongs to another user" in line and str(store) in line


def test_a_negative_limit_and_a_deleted_folder_are_one_line(tmp_path: Path) -> None:
    line = cli_error("list", "-n", "-5")
    assert line == (
        "torchx-nb: error: argument -n/--limit: expected a whole number of at least 1, got '-5'"
        " (see `torchx-nb list --help`)"
    )
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.rmdir(sys.argv[1]); from torchx_nb.cli import"
            " main; sys.exit(main(['run', 'utils.echo', '--msg', 'hi']))",
            str(gone),
        ],
        cwd=gone,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "torchx-nb: error: the current folder no longer exists (it was deleted or moved): cd to"
        " an existing folder and run again"
    ]
