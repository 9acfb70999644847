"""The job-side runner as a package: shipped whole as a folder, standard library only, started
by the entry points users and docs name; its modules never shadow the workspace's."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.test_cell_main import ended, job_folder, run_cell
from torchx_nb.components.cell import RUNNER, RUNNER_PACKAGE, runner_files
from torchx_nb.results import LocalStore, load_result

PACKAGE = Path(__file__).parents[2] / "torchx_nb" / "apps" / "cell_runner"
#: what a module of the runner may import inside the function that needs it: the job's own
#: SDKs (uploads, a notebook's kernel) and the pickler shipped beside it
JOB_SDKS = {"boto3", "google", "cloudpickle", "nbformat", "nbclient", "ipykernel", "traitlets"}


def test_the_runner_ships_whole_as_a_folder_of_small_modules() -> None:
    files = runner_files()
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert {"cell.py", "notebook.py", "cancel.py", "records.py", "upload.py"} <= set(modules)
    assert sorted(n.rpartition("/")[2] for n in files if n.startswith(f"{RUNNER_PACKAGE}/")) == (
        modules
    )
    assert RUNNER in files
    for name in modules:
        assert len((PACKAGE / name).read_text().splitlines()) <= 600, name


@pytest.mark.parametrize("name", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_the_runner_imports_only_the_standard_library(name: str) -> None:
    """At import, the standard library and the package's own modules (relatively: it runs
    under another name in the job); an SDK of the job's only inside the code that uses it."""
    tree = ast.parse((PACKAGE / name).read_text())
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = [a.name.partition(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                continue
            roots = [(node.module or "").partition(".")[0]]
        else:
            continue
        for root in roots:
            allowed = sys.stdlib_module_names | (set() if id(node) in top_level else JOB_SDKS)
            assert root in allowed, f"{name}:{node.lineno} imports {root}"


@pytest.mark.parametrize("module", ["torchx_nb.apps.cell_main", "torchx_nb.apps.cell_runner"])
def test_python_m_runs_a_cell_where_torchx_nb_is_installed(tmp_path: Path, module: str) -> None:
    folder, script = job_folder(tmp_path, "6 * 7")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", module, str(folder / script)],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "TORCHX_OUTPUT_DIR": str(out)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert load_result(LocalStore(f"file://{out}"), ended(), "h") == 42


def test_the_shipped_runner_runs_under_an_isolated_python(tmp_path: Path) -> None:
    """``python -I`` neither puts the script's folder on sys.path nor reads site-packages (no
    torchx_nb): the runner is found beside its entry point all the same."""
    proc, store = run_cell(
        tmp_path, "import sys\nsys.version_info[0]", python=[sys.executable, "-I"]
    )
    assert proc.returncode == 0, proc.stderr
    assert load_result(store, ended(), "h") == 3


def test_workspace_modules_named_as_the_runners_are_the_workspaces(tmp_path: Path) -> None:
    """A workspace's ``cell.py``, ``common.py``, ``records.py`` are what the cell imports, not
    the runner's modules of the same names."""
    folder, script = job_folder(
        tmp_path, "import cell, common, records, upload\n(cell.X, common.X, records.X, upload.X)"
    )
    for name in ("cell", "common", "records", "upload"):
        (folder / f"{name}.py").write_text(f"X = {name!r}\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(folder / RUNNER), str(folder / script)],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "TORCHX_OUTPUT_DIR": str(out)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = load_result(LocalStore(f"file://{out}"), ended(), "h")
    assert result == ("cell", "common", "records", "upload")


def test_a_cancel_while_a_notebook_job_starts_is_one_line(tmp_path: Path) -> None:
    """SIGTERM while the runner imports nbclient (before the notebook's own handler): the job
    ends 143 with one line (Python's own end on SIGTERM said nothing, status -15). nbclient's
    import is held up here by a finder that waits for the test's signal."""
    import os
    import signal
    import time

    from tests.apps.test_cell_main import notebook_job

    folder = notebook_job(tmp_path, "print('never')")
    hold = tmp_path / "hold"
    hold.mkdir()
    importing = tmp_path / "importing"
    (hold / "sitecustomize.py").write_text(
        "import sys, time\n"
        "class Hold:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'nbclient':\n"
        f"            open({str(importing)!r}, 'w').close()\n"
        "            time.sleep(60)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hold())\n"
    )
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join([str(hold), *(p for p in sys.path if p)]),
        "TORCHX_OUTPUT_DIR": str(tmp_path / "out"),
    }
    proc = subprocess.Popen(
        [sys.executable, str(folder / RUNNER), "--notebook", "nb.ipynb"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not importing.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert importing.exists(), proc.stderr.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.splitlines() == [
        "torchx_nb: stopped before its first cell by SIGTERM (a cancel or a preemption: the"
        " job's status says which), while starting: nothing ran"
    ], err


def test_the_packages_names_loaded_on_first_use_are_listed_and_a_typo_is_one_line() -> None:
    """``run``, ``grid_point``, ``missing_import`` and ``required_imports`` load on first use
    (PEP 562): ``import torchx_nb.apps.cell_runner`` loads neither pickle nor the tracebacks,
    ``dir()`` (IPython's completion, ``help``) lists every name of ``__all__`` (it listed
    none of the four), and a typo is the usual AttributeError naming the package."""
    code = (
        "import sys\n"
        "import torchx_nb.apps.cell_runner as cr\n"
        "print('pickle' in sys.modules, 'traceback' in sys.modules)\n"
        "print(sorted(set(cr.__all__) - set(dir(cr))))\n"
        "print(cr.grid_point.__module__, callable(cr.run))\n"
        "try:\n    cr.rnu\nexcept AttributeError as e:\n    print(e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.splitlines() == [
        "False False",
        "[]",
        "torchx_nb.apps.cell_runner.start True",
        "module 'torchx_nb.apps.cell_runner' has no attribute 'rnu'",
    ], proc.stdout
