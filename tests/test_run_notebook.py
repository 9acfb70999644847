"""``torchx-nb run-notebook`` on local_cwd, as a user runs it: the notebook's folder is the
workspace, ``-p`` values are injected after its ``parameters`` cell, the executed notebook is
an output saved as it runs, and a failing, slow or dying cell ends the job FAILED naming the
cell, the partial notebook kept."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tests.conftest import cli, cli_error, wait_for
from torchx_nb.jobstore import JobStore
from torchx_nb.runner import get_runner


def notebook(path: Path, *sources: str, parameters: str | None = None) -> Path:
    cells = [new_markdown_cell("# Report")]
    if parameters is not None:
        cells.append(new_code_cell(parameters, metadata={"tags": ["parameters"]}))
    cells += [new_code_cell(s) for s in sources]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def executed(handle: str, tmp_path: Path) -> nbformat.NotebookNode:
    with get_runner() as runner:
        path = runner.executed_notebook(handle, tmp_path / "fetched")
    return nbformat.read(path, as_version=4)


def outputs_text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text") or out.get("data", {}).get("text/plain", "") or "")
        if out.get("output_type") == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "".join(parts)


def test_a_notebook_runs_with_its_parameters_and_sibling_modules(
    isolated: Path, tmp_path: Path
) -> None:
    (isolated / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    notebook(
        isolated / "report.ipynb",
        "from helper import double\nprint('doubled', double(n), label)",
        "import sys, os\nprint(os.path.dirname(sys.executable), os.getcwd())",
        "from ipykernel.connect import get_connection_info\n"
        "get_connection_info(unpack=True)['transport']",
        parameters="n = 1\nlabel = 'x'",
    )
    code, out, err = cli(
        "run-notebook", "report.ipynb", "-p", "n=21", "-p", "label=a,b", "--wait", timeout=120
    )
    handle = out.splitlines()[0]
    assert code == 0, err
    assert handle.startswith("local_cwd://torchx/report-"), out
    assert "notebook/0 [torchx_nb] cell 3: # Parameters" in out.splitlines(), out
    assert "notebook/0 doubled 42 a,b" in out.splitlines(), out
    assert err.strip().splitlines()[-1] == f"torchx-nb: {handle} SUCCEEDED", err
    nb = executed(handle, tmp_path)
    assert [c.source for c in nb.cells[:3]] == [
        "# Report",
        "n = 1\nlabel = 'x'",
        "# Parameters\nn = 21\nlabel = 'a,b'\n",
    ]
    assert nb.cells[2].metadata["tags"] == ["injected-parameters"]
    assert outputs_text(nb.cells[3]) == "doubled 42 a,b\n"
    # the kernel is the job's own Python (local_cwd's: the kernel's), in the workspace
    assert outputs_text(nb.cells[4]) == f"{Path(sys.executable).parent} {isolated}\n"
    assert outputs_text(nb.cells[5]) == "'ipc'"  # no TCP port a node's other users can reach
    assert nb.metadata["kernelspec"]["name"] == "python3"  # the user's, not the job's
    with get_runner() as runner:
        again = runner.executed_notebook(handle, tmp_path / "fetched")
    assert again.name == "report.executed-2.ipynb"  # never overwrites


def test_a_failing_cell_names_itself_and_keeps_the_partial_notebook(
    isolated: Path, tmp_path: Path
) -> None:
    notebook(isolated / "bad.ipynb", "x = 1", "\n# divide\nx / 0", "print('never')")
    code, out, err = cli("run-notebook", "bad.ipynb", "--wait", timeout=120)
    handle = out.splitlines()[0]
    assert code == 1
    # the cell's traceback is in the job's log (no colour codes)
    assert "notebook/0 ZeroDivisionError: division by zero" in out.splitlines(), out
    assert "\x1b[" not in out
    lines = err.strip().splitlines()
    assert lines[-2:] == [
        f"torchx-nb: {handle} FAILED",
        "torchx-nb: notebook/0 raised ZeroDivisionError in cell 3 ('# divide'): division by"
        " zero (exit code 1)",
    ], err
    code, status, _ = cli("status", handle)
    assert "notebook/0 raised ZeroDivisionError in cell 3 ('# divide')" in status, status
    nb = executed(handle, tmp_path)
    assert outputs_text(nb.cells[2]) == "ZeroDivisionError: division by zero"
    assert nb.cells[3].get("outputs") == [] and nb.cells[3].execution_count is None


def test_a_cell_over_its_time_limit_and_a_dying_kernel_fail_the_job(isolated: Path) -> None:
    notebook(isolated / "slow.ipynb", "import time\ntime.sleep(60)")
    notebook(isolated / "dies.ipynb", "print('before')", "import os\nos._exit(3)")
    code, _, err = cli("run-notebook", "slow.ipynb", "--cell-timeout", "1.5", "--wait")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "torchx-nb: notebook/0 raised CellTimeoutError in cell 2 ('import time'): over"
        " --cell-timeout (1.5 s) (exit code 1)"
    ), err
    code, _, err = cli("run-notebook", "dies.ipynb", "--wait")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "torchx-nb: notebook/0 raised DeadKernelError in cell 3 ('import os'): the kernel died"
        " (killed, out of memory, or os._exit) (exit code 1)"
    ), err


def test_the_notebook_is_saved_as_it_runs_and_a_cancel_keeps_it(
    isolated: Path, tmp_path: Path
) -> None:
    notebook(isolated / "long.ipynb", "print('first done')", "import time\ntime.sleep(60)")
    code, out, err = cli("run-notebook", "long.ipynb")
    handle = out.strip()
    assert code == 0, err

    def saved() -> nbformat.NotebookNode | None:
        with get_runner() as runner:
            try:
                nb = nbformat.read(runner.executed_notebook(handle, tmp_path / "peek"), 4)
            except Exception:
                return None
        return nb if outputs_text(nb.cells[1]) == "first done\n" else None

    wait_for(saved, 60, interval=0.5)  # part-way: the first cell's output is there
    code, _, err = cli("cancel", handle)
    assert code == 0, err
    time.sleep(0.5)
    with get_runner() as runner:
        status = runner.wait(handle, wait_interval=0.2, timeout=30)
    assert status is not None and status.state.name == "CANCELLED", status
    nb = executed(handle, tmp_path)
    assert outputs_text(nb.cells[1]) == "first done\n"
    assert nb.cells[2].get("outputs") == []
    code, log, err = cli("log", handle)
    assert code == 0, err
    # one clean line, not nbclient's dead-kernel error
    assert log.splitlines()[-1] == (
        "notebook/0 torchx_nb: stopped during cell 3 ('import time') by SIGTERM (a cancel or a"
        " preemption: the job's status says which): the notebook is saved as far as it ran"
    ), log
    assert "DeadKernelError" not in log and "died" not in log


def test_a_cancel_while_the_kernel_starts_is_a_cancel_with_one_clean_line(
    isolated: Path, tmp_path: Path
) -> None:
    """A cancel while the kernel is still starting (seconds on a busy node) reached nbclient's
    own SIGTERM handler, which tore the kernel client down under its start: the log ended in a
    raw ``asyncio.CancelledError`` traceback and the job exited 1 (FAILED where the exit code
    decides, local_docker). Now it is the cancel's one line and exit 143. The kernel is held
    in its start by an IPython startup file that says when it runs and sleeps."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    mark = tmp_path / "kernel-starting"
    (startup / "00-slow.py").write_text(
        f"import pathlib, time\npathlib.Path({str(mark)!r}).write_text('x')\ntime.sleep(60)\n"
    )
    notebook(isolated / "late.ipynb", "print('never')")
    env = {"IPYTHONDIR": str(tmp_path / "ipython")}
    code, out, err = cli("run-notebook", "late.ipynb", env=env)
    assert code == 0, err
    handle = out.strip()
    wait_for(mark.exists, 120, interval=0.2)  # the runner waits for its kernel's first reply
    code, _, err = cli("cancel", handle)
    assert code == 0, err
    with get_runner() as runner:
        status = runner.wait(handle, wait_interval=0.2, timeout=60)
    assert status is not None and status.state.name == "CANCELLED", status
    assert status.roles[0].replicas[0].exit_code == 143, status
    code, log, err = cli("log", handle)
    assert code == 0, err
    assert log.splitlines() == [
        "notebook/0 torchx_nb: stopped before its first cell by SIGTERM (a cancel or a"
        " preemption: the job's status says which): the notebook is saved as far as it ran"
    ], log


def test_sys_exit_0_ends_the_run_as_a_success_and_result_points_to_the_notebook(
    isolated: Path, tmp_path: Path
) -> None:
    """As papermill: ``sys.exit(0)`` and ``sys.exit()`` stop the run there, a success (the
    cells after it are not run); ``sys.exit(1)`` fails it. A notebook job has no value:
    ``result()`` says so and names ``job.notebook()``."""
    notebook(isolated / "zero.ipynb", "print('ran')", "import sys\nsys.exit(0)", "print('no')")
    notebook(isolated / "bare.ipynb", "import sys\nsys.exit()", "print('no')")
    notebook(isolated / "one.ipynb", "import sys\nsys.exit(1)")
    handles = {}
    for name in ("zero", "bare", "one"):
        code, out, err = cli("run-notebook", f"{name}.ipynb", "--wait", timeout=120)
        assert code == (1 if name == "one" else 0), (name, err)
        handles[name] = out.splitlines()[0]
        if name != "one":
            assert err.strip().splitlines()[-1] == f"torchx-nb: {handles[name]} SUCCEEDED", err
    nb = executed(handles["zero"], tmp_path)
    assert outputs_text(nb.cells[1]) == "ran\n"
    assert nb.cells[3].execution_count is None and nb.cells[3].outputs == []
    code, log, _ = cli("log", handles["zero"])
    assert (
        "notebook/0 [torchx_nb] cell 3 called sys.exit(0): the run ends there, a success (as"
        " papermill)"
    ) in log.splitlines(), log
    from torchx_nb.specs.exceptions import NoResult

    with get_runner() as runner:
        try:
            runner.result(handles["bare"])
        except NoResult as e:
            message = str(e)
        else:
            raise AssertionError("a notebook job has no result")
    assert message == (
        f"{handles['bare']} ended SUCCEEDED without a result: it ran the notebook bare.ipynb,"
        " which gives no value: job.notebook() fetches the executed notebook"
    )


def test_an_unknown_name_is_warned_at_every_run_of_one_python(isolated: Path) -> None:
    """papermill logs an unknown name at every run; Python shows a warning once per process,
    so the second run_notebook with the same misspelled name in a kernel was silent."""
    import subprocess

    notebook(isolated / "p.ipynb", "print(lr)", parameters="lr = 0.1")
    script = (
        "import torchx_nb\n"
        "for _ in range(2):\n"
        "    torchx_nb.run_notebook('p.ipynb', {'lerning_rate': 0.2}, scheduler='local_cwd')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "Passed unknown parameter" in line]
    assert len(said) == 2, proc.stderr
    assert said[1].endswith(
        "UnknownParameterWarning: Passed unknown parameter: lerning_rate (the parameters cell"
        " assigns lr); it is injected anyway"
    ), said


def test_bad_input_is_one_line_and_nothing_is_submitted(isolated: Path) -> None:
    notebook(isolated / "ok.ipynb", "x = 1")
    (isolated / "notes.txt").write_text("x")
    before = len(JobStore().list())
    assert cli_error("run-notebook", "nope.ipynb") == (
        "torchx-nb: error: notebook 'nope.ipynb' does not exist"
    )
    assert cli_error("run-notebook", "notes.txt") == (
        "torchx-nb: error: 'notes.txt' is not a notebook: give a .ipynb file"
    )
    assert cli_error("run-notebook", "ok.ipynb", "-p", "no value") == (
        "torchx-nb: error: -p 'no value': give NAME=VALUE"
    )
    assert cli_error("run-notebook", "ok.ipynb", "-p", "class=1") == (
        "torchx-nb: error: -p class: a parameter's name must be a Python variable name"
    )
    assert cli_error("run-notebook", "ok.ipynb", "--workspace", "none") == (
        "torchx-nb: error: a notebook job runs from its workspace: drop --workspace none (the"
        " notebook's folder is the default)"
    )
    assert "expected a number of seconds above 0, got 'inf'" in cli_error(
        "run-notebook", "ok.ipynb", "--cell-timeout", "inf"
    )
    # it parses alone, not in the job's dict of values: it was submitted and failed there
    deep = "[" * 200 + "]" * 200
    assert cli_error("run-notebook", "ok.ipynb", "-p", f"x={deep}") == (
        "torchx-nb: error: -p x: it nests deeper than Python's parser reads back (about 200"
        " levels of brackets, the job's own dict of values included); flatten it, or build it"
        " in the notebook"
    )
    (isolated / "other").mkdir()
    assert cli_error("run-notebook", "ok.ipynb", "--workspace", "other").startswith(
        "torchx-nb: error: notebook 'ok.ipynb' is outside the workspace 'other'"
    )
    assert len(JobStore().list()) == before


def test_the_dry_run_names_the_notebook_and_masks_secret_values(isolated: Path) -> None:
    notebook(isolated / "ok.ipynb", "x = 1", parameters="x = 0")
    args = ["run-notebook", "ok.ipynb", "-p", "x=2", "-p", "api_token=s3cr3t-value-1234"]
    code, out, err = cli(*args, "--cell-timeout", "30", "--dryrun")
    assert code == 0, err
    assert out.splitlines()[:2] == [
        "dry run on local_cwd: nothing built, pushed or submitted",
        "program:   the notebook ok.ipynb, 2 parameters (x, api_token), run by nbclient; each"
        " cell at most 30 s",
    ], out
    code, whole, err = cli(*args, "--dryrun", "--json")
    assert code == 0, err
    assert "s3cr3t" not in whole and "api_token" in whole


def test_a_parameters_cell_with_a_magic_is_read_for_its_names(isolated: Path) -> None:
    """``%matplotlib inline`` in the parameters cell made it unreadable: every -p name was
    warned unknown ('the parameters cell assigns nothing')."""
    notebook(isolated / "m.ipynb", "print(lr)", parameters="%matplotlib inline\nlr = 0.1")
    code, _, err = cli("run-notebook", "m.ipynb", "-p", "lr=0.2", "-p", "lr2=1", "--dryrun")
    assert code == 0, err
    assert err.splitlines() == [
        "torchx-nb: warning: Passed unknown parameter: lr2 (the parameters cell assigns lr); it"
        " is injected anyway"
    ], err


def test_a_notebook_sweep_warns_of_a_name_its_parameters_cell_lacks(isolated: Path) -> None:
    """A sweep's ``-p`` names reach the notebook in the job (not through run-notebook's
    check), so a misspelled one was injected into every trial without a word."""
    notebook(isolated / "grid.ipynb", "print(lr)", parameters="lr = 0.1")
    args = ("sweep", "--notebook", "grid.ipynb", "-p", "lerning_rate=1,2", "-p", "lr=1,2")
    code, out, err = cli(*args, "--dryrun")
    assert code == 0, err
    assert err.splitlines() == [
        "torchx-nb: warning: Passed unknown parameter: lerning_rate (the parameters cell assigns"
        " lr); it is injected anyway"
    ], err
    assert "sweep of 4 trials" in out, out


def test_a_notebook_sweep_and_widgets_saved_as_static_state(isolated: Path, tmp_path: Path) -> None:
    """``sweep --notebook``: ``-p`` lists values (a comma separates them, unlike
    ``run-notebook``), one job per trial on local_cwd, each with its own executed notebook;
    a widget a cell shows is saved in the notebook as its static state."""
    notebook(
        isolated / "grid.ipynb",
        "print('lr', lr)",
        "import ipywidgets\nipywidgets.IntSlider(value=int(lr * 10))",
        parameters="lr = 0.0",
    )
    assert cli_error("sweep", "--notebook", "grid.ipynb", "-p", "lr=1", "utils.echo") == (
        "torchx-nb: error: give a component or --notebook, not both"
    )
    code, out, err = cli("sweep", "--notebook", "grid.ipynb", "-p", "lr=0.1,0.2", timeout=120)
    assert code == 0, err
    sweep_id = err.split(":")[1].strip()
    assert sweep_id.startswith("sweep-"), err
    handles = out.split()
    assert len(handles) == 2, out
    code, table, err = cli("watch", sweep_id, timeout=120)
    assert code == 0, table + err
    assert table.count("SUCCEEDED") == 2, table
    for handle, lr in zip(handles, ("0.1", "0.2"), strict=True):
        nb = executed(handle, tmp_path / handle.rsplit("-", 1)[1])
        assert outputs_text(nb.cells[3]) == f"lr {lr}\n"
        state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        sliders = [m for m in state.values() if m["model_name"] == "IntSliderModel"]
        assert [m["state"]["value"] for m in sliders] == [int(float(lr) * 10)]


def test_a_hostile_notebook_name_and_values_run_as_text(isolated: Path, tmp_path: Path) -> None:
    """A notebook whose name holds quotes, ``$(...)``, ``;`` and non-ASCII, with parameter
    values holding code and newlines: the job runs that notebook, and the values arrive as the
    text they were, never run."""
    name = "r'; touch PWNED; $(touch PWNED2) \u2013 \u00fc.ipynb"
    notebook(isolated / name, "print(repr(payload))", parameters="payload = ''")
    hostile = "'); import os; os.system('touch PWNED3'); ('\nx"
    code, out, err = cli("run-notebook", name, "-p", f"payload={hostile}", "--wait")
    handle = out.splitlines()[0]
    assert code == 0, err
    nb = executed(handle, tmp_path)
    assert outputs_text(nb.cells[3]) == repr(hostile) + "\n"
    assert not any((isolated / p).exists() for p in ("PWNED", "PWNED2", "PWNED3"))


def test_a_cell_that_survives_its_interrupt_is_stopped_and_fails_the_job(isolated: Path) -> None:
    """``--cell-timeout`` holds whatever the cell does with SIGINT: the cell is interrupted at
    the limit and, still running a few seconds later, its kernel is stopped; the job ends
    FAILED naming the cell and the limit (nbclient's ``interrupt_on_timeout`` alone let these
    run on and end SUCCEEDED)."""
    cells = {
        "shell": "!sleep 40",
        "ignores": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "time.sleep(40)",
        "catches": "import time\nfor _ in range(400):\n    try:\n        time.sleep(0.1)\n"
        "    except KeyboardInterrupt:\n        pass",
        "bash": "%%bash\nsleep 40",
    }
    handles = {}
    for name, source in cells.items():
        notebook(isolated / f"{name}.ipynb", source, "print('never')")
        code, out, err = cli("run-notebook", f"{name}.ipynb", "--cell-timeout", "2")
        assert code == 0, err
        handles[name] = out.strip()
    began = time.monotonic()
    stopped = "; still running 5 s after its interrupt, so its kernel was stopped"
    expected = {"shell": "", "ignores": stopped, "catches": stopped, "bash": ""}
    for name, handle in handles.items():
        code, _, err = cli("watch", handle, timeout=120)
        assert code == 1, err
        first = cells[name].splitlines()[0]
        assert err.strip().splitlines()[-1] == (
            f"torchx-nb: notebook/0 raised CellTimeoutError in cell 2 ({first!r}): over"
            f" --cell-timeout (2 s){expected[name]} (exit code 1)"
        ), (name, err)
    assert time.monotonic() - began < 40  # none ran on to its end


def test_values_arrive_exactly_as_they_were_given(isolated: Path, tmp_path: Path) -> None:
    """Python-API values travel as Python literals (repr, read back with ast.literal_eval):
    int dict keys, tuples, sets, bytes and complex arrive as they were, and a 200 KB value
    travels in a file (it failed with "Argument list too long"); ``-p`` keeps spaces inside
    quotes; an unknown name is one warning line; a non-literal value is refused in one line."""
    import datetime

    from torchx_nb.notebook.notebook_jobs import run_notebook

    notebook(
        isolated / "exact.ipynb",
        "for k in ('d', 't', 's', 'b', 'c'):\n    print(k, repr(globals()[k]))\nprint(len(big))",
        parameters="d = t = s = b = c = big = None",
    )
    values = {"d": {1: "one"}, "t": (1, 2), "s": {1, 2}, "b": b"xy", "c": 1j, "big": "x" * 200_000}
    with get_runner() as runner:
        job = run_notebook(isolated / "exact.ipynb", values, runner=runner)
        status = job.wait(timeout=120, interval=0.5)
        assert status is not None and status.state.name == "SUCCEEDED", job.logs()
        nb = nbformat.read(job.notebook(tmp_path / "back"), 4)
        assert outputs_text(nb.cells[3]) == (
            "d {1: 'one'}\nt (1, 2)\ns {1, 2}\nb b'xy'\nc 1j\n200000\n"
        )
        try:
            run_notebook(isolated / "exact.ipynb", {"d": datetime.date(2020, 1, 2)}, runner=runner)
        except ValueError as e:
            assert str(e) == (
                "-p d: a date is not a Python literal; give numbers, text, booleans, None, or"
                " lists and dicts of them"
            )
        else:
            raise AssertionError("a date is refused")
    notebook(isolated / "spaces.ipynb", "print(repr(b))", parameters="b = ''")
    code, out, err = cli(
        # what the shell passes for -p b=" spaced "
        "run-notebook",
        "spaces.ipynb",
        "-p",
        "b= spaced ",
        "-p",
        "lerning_rate=0.1",
        "--wait",
    )
    assert code == 0, err
    assert "notebook/0 ' spaced '" in out.splitlines(), out
    assert err.splitlines()[0] == (
        "torchx-nb: warning: Passed unknown parameter: lerning_rate (the parameters cell assigns"
        " b); it is injected anyway"
    ), err


def test_the_kernel_runs_in_the_notebooks_folder_and_leaves_nothing_behind(
    isolated: Path, tmp_path: Path
) -> None:
    """With ``--workspace .`` for ``sub/nb.ipynb`` the kernel runs in ``sub`` (its relative
    paths work as in JupyterLab); a 98-character TMPDIR (too long for an IPC socket's path
    under it) still runs; the kernel's private folder is removed when the job ends."""
    (isolated / "sub").mkdir()
    (isolated / "sub" / "data.txt").write_text("beside the notebook")
    notebook(isolated / "sub" / "nb.ipynb", "print(open('data.txt').read())")
    short = tmp_path / "t"
    short.mkdir()
    long = tmp_path / ("x" * (97 - len(str(tmp_path))))
    long.mkdir()
    assert len(str(long)) == 98
    for tmpdir in (long, short):
        code, out, err = cli(
            "run-notebook", "sub/nb.ipynb", "--workspace", ".", "--wait",
            env={"TMPDIR": str(tmpdir)}, timeout=120,
        )  # fmt: skip
        assert code == 0, out + err
        assert "notebook/0 beside the notebook" in out.splitlines(), out
        assert list(tmpdir.iterdir()) == [], list(tmpdir.iterdir())


def test_an_old_notebook_comes_back_valid_and_a_skipped_save_is_made_up(
    isolated: Path, tmp_path: Path
) -> None:
    """An nbformat 4.4 notebook is upgraded to 4.5 as papermill does (its injected cell has an
    id), so the executed copy validates; a save skipped by the 3 s throttle (a cell ending
    right after another) is made up within a few seconds, not only after the next cell."""
    nb = nbformat.v4.new_notebook(
        cells=[
            new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
            new_code_cell("print('a')"),
            new_code_cell("print('b')"),
            new_code_cell("import time\ntime.sleep(40)"),
        ]
    )
    nb.nbformat_minor = 4
    for cell in nb.cells:
        del cell["id"]
    nbformat.write(nb, isolated / "old.ipynb")
    code, out, err = cli("run-notebook", "old.ipynb", "-p", "x=2")
    handle = out.strip()
    assert code == 0, err

    def saved() -> nbformat.NotebookNode | None:
        with get_runner() as runner:
            try:
                got = nbformat.read(runner.executed_notebook(handle, tmp_path / "peek"), 4)
            except Exception:
                return None
        return got if outputs_text(got.cells[3]) == "b\n" else None

    began = time.monotonic()
    part = wait_for(saved, 60, interval=0.5)
    assert time.monotonic() - began < 25  # during the 40 s cell, not after it
    assert isinstance(part, nbformat.NotebookNode)
    assert part.nbformat_minor == 5
    nbformat.validate(part)
    assert [c.metadata.get("tags") for c in part.cells[:2]] == [
        ["parameters"],
        ["injected-parameters"],
    ]
    code, _, err = cli("cancel", handle)
    assert code == 0, err


def test_non_finite_floats_arrive_and_a_too_long_int_is_one_line(
    isolated: Path, tmp_path: Path
) -> None:
    """``float("nan")``, ``inf`` and ``-p x=1e5000`` were refused as "a float is not a Python
    literal" (papermill injects them); now they are injected as papermill writes them,
    ``float('nan')``, from Python and from ``-p`` (``nan``/``inf`` read as floats, as
    papermill's -p reads them), and the panel's JSON stays JSON. An int of more than 4300
    digits, kept as text by -p without a word and refused as "a int is not a Python literal"
    from Python, is one line saying why."""
    from torchx_nb.notebook.notebook_jobs import run_notebook
    from torchx_nb.server.pages import trial_params

    show = "for k in ('x', 'y', 'z'):\n    print(k, repr(globals()[k]))"
    notebook(isolated / "floats.ipynb", show, parameters="x = y = z = 0.0")
    values = {"x": float("nan"), "y": [float("inf"), -float("inf")], "z": {"w": float("nan")}}
    with get_runner() as runner:
        job = run_notebook(isolated / "floats.ipynb", values, runner=runner)
        status = job.wait(timeout=120, interval=0.5)
        assert status is not None and status.state.name == "SUCCEEDED", job.logs()
        nb = nbformat.read(job.notebook(tmp_path / "back"), 4)
        assert nb.cells[2].source == (
            "# Parameters\nx = float('nan')\ny = [float('inf'), -float('inf')]\n"
            "z = {'w': float('nan')}\n"
        )
        assert outputs_text(nb.cells[3]) == "x nan\ny [inf, -inf]\nz {'w': nan}\n"
        rec = runner.jobstore.get(job.handle)
        assert rec is not None
        assert trial_params(rec.params) == {"x": "nan", "y": ["inf", "-inf"], "z": {"w": "nan"}}
        for big in (10**5000, [1, 10**5000]):
            try:
                run_notebook(isolated / "floats.ipynb", {"x": big}, runner=runner)
            except ValueError as e:
                assert str(e) == (
                    "-p x: an int of more than 4300 digits has no text in Python"
                    " (sys.get_int_max_str_digits); give it as text, or compute it in the notebook"
                )
            else:
                raise AssertionError("a 5001-digit int is refused")
    code, out, err = cli(
        "run-notebook", "floats.ipynb", "-p", "x=nan", "-p", "y=1e5000", "-p", "z=-Inf", "--wait"
    )
    assert code == 0, err
    assert [
        line
        for line in out.splitlines()
        if line[:13] in ("notebook/0 x ", "notebook/0 y ", "notebook/0 z ")
    ] == ["notebook/0 x nan", "notebook/0 y inf", "notebook/0 z -inf"], out
    digits = "9" * 5000
    for given, said in (
        (digits, "an int of 5000 digits is over Python's limit for int text (4300)"),
        (f"[{digits}]", "an int in it is over Python's limit for int text (4300 digits)"),
    ):
        assert cli_error("run-notebook", "floats.ipynb", "-p", f"x={given}") == (
            f"torchx-nb: error: -p x: {said}; give it as text, in quotes, or compute it in the"
            " notebook"
        )
