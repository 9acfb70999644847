"""The cell runner as a job runs it: a separate ``python`` on the files ``cell_files`` makes,
with the output folder in ``$TORCHX_OUTPUT_DIR``; what it leaves there read back with
``torchx_nb.results``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchx_nb.components.cell import RUNNER, cell, cell_files, cell_program
from torchx_nb.results import LocalStore, NoResult, RemoteError, RemoteTraceback, load_result
from torchx_nb.results import result_repr as repr_of
from torchx_nb.specs.api import AppState, AppStatus, TorchxNbError


def job_folder(tmp_path: Path, source: str, push: bytes | None = None) -> tuple[Path, str]:
    """The files a cell job ships (the runner, the cell, the pushed variables) written to
    ``tmp_path/job``; the folder and the cell's file name."""
    files = cell_files(cell_program(source), push)
    folder = tmp_path / "job"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder, next(n for n in files if n.startswith(".torchx-cell-"))


def run_cell(
    tmp_path: Path,
    source: str,
    env: dict[str, str] | None = None,
    push: bytes | None = None,
    python: list[str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], LocalStore]:
    folder, script = job_folder(tmp_path, source, push)
    out = tmp_path / "out"
    full_env = {"PATH": "/usr/bin:/bin", "TORCHX_OUTPUT_DIR": str(out), **(env or {})}
    if push is not None:
        full_env["TORCHX_NB_PUSH"] = str(folder / ".torchx-nb/push.pkl")
    proc = subprocess.run(
        [*(python or [sys.executable]), str(folder / RUNNER), str(folder / script)],
        cwd=folder,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, LocalStore(f"file://{out}")


def ended(state: AppState = AppState.SUCCEEDED) -> AppStatus:
    return AppStatus(state=state)


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("x = 6 * 7\nx", 42),
        ("x = 6 * 7\nx;", None),  # a trailing ; hides the value, as in IPython
        ("x = 1", None),  # the last statement is not an expression
        ("for i in range(2):\n    pass", None),
        ("print('hi')", None),  # print's value is None
        ("import math\nif True:\n    y = 2\nmath.sqrt(y * 8)", 4.0),
        ("[i * i for i in range(4)]  # a comment after it", [0, 1, 4, 9]),
        ("1+1  # note;", 2),  # a ; in the trailing comment is not IPython's suppression
        ("x = [1, 2]\nx;  # hidden", None),
        ("'a;'", "a;"),
        ("class P:\n    def __init__(self): self.v = 3\nP()", "P"),
        ("f = lambda n: n + 1\nf", "lambda"),
    ],
)
def test_the_last_expression_is_the_result(tmp_path: Path, source: str, value: Any) -> None:
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 0, proc.stderr
    got = load_result(store, ended(), "h")
    if value == "P":  # a class defined in the cell comes back (cloudpickle, by value)
        assert type(got).__name__ == "P" and got.v == 3
    elif value == "lambda":
        assert got(1) == 2
    else:
        assert got == value
    if value is None:  # nothing to show, as IPython shows no Out for None
        assert repr_of(store) is None


def test_an_exception_comes_back_with_the_cells_traceback(tmp_path: Path) -> None:
    proc, store = run_cell(tmp_path, "def f(d):\n    return d['missing']\n\nf({})\n")
    assert proc.returncode == 1
    assert 'File "<cell>", line 4, in <module>' in proc.stderr
    with pytest.raises(KeyError) as info:
        load_result(store, ended(AppState.FAILED), "h")
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert 'File "<cell>", line 2, in f' in cause.text and "return d['missing']" in cause.text
    # the runner's own frames are left out
    assert "cell_main" not in cause.text and "torchx_nb_cell_runner" not in cause.text
    assert repr_of(store) == "raised KeyError: 'missing'"


def test_an_exception_that_cannot_be_pickled_is_a_remote_error(tmp_path: Path) -> None:
    source = (
        "import threading\n"
        "class Odd(Exception):\n"
        "    def __init__(self):\n"
        "        super().__init__('odd')\n"
        "        self.lock = threading.Lock()\n"
        "raise Odd()\n"
    )
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 1
    with pytest.raises(RemoteError, match="the cell raised Odd: odd") as info:
        load_result(store, ended(AppState.FAILED), "h")
    assert isinstance(info.value.__cause__, RemoteTraceback)


def test_a_value_that_cannot_be_pickled_fails_the_job_with_a_clear_error(tmp_path: Path) -> None:
    proc, store = run_cell(tmp_path, "import threading\nthreading.Lock()")
    assert proc.returncode == 1
    assert "the cell's value cannot be pickled" in proc.stderr
    with pytest.raises(TypeError, match="cannot be pickled"):
        load_result(store, ended(AppState.FAILED), "h")


def test_sys_exit_keeps_its_code_and_leaves_no_result(tmp_path: Path) -> None:
    proc, store = run_cell(tmp_path, "import sys\nsys.exit(3)")
    assert proc.returncode == 3
    status = AppStatus(state=AppState.FAILED)
    with pytest.raises(NoResult, match="ended FAILED"):
        load_result(store, status, "local_cwd://s/app")


def test_only_rank_zero_writes_the_result_every_failing_rank_its_error(tmp_path: Path) -> None:
    source = "import os\nrank = int(os.environ['RANK'])\nif rank == 2: raise ValueError('r2')\nrank"
    for rank in (1, 2):
        proc, store = run_cell(tmp_path, source, env={"RANK": str(rank)})
    assert repr_of(store) == "raised ValueError: r2"
    proc, store = run_cell(tmp_path, source.replace("rank == 2", "rank == 9"), {"RANK": "0"})
    assert proc.returncode == 0
    with pytest.raises(ValueError, match="r2") as info:  # rank 2's error is still there
        load_result(store, ended(), "h")
    assert isinstance(info.value.__cause__, RemoteTraceback)


def test_pushed_variables_are_in_the_namespace(tmp_path: Path) -> None:
    from torchx_nb.notebook.push import pickle_push

    scale = 3
    pushed = pickle_push({"data": [1, 2, 3], "mul": lambda x: x * scale}, ["data", "mul"])
    proc, store = run_cell(tmp_path, "sum(mul(x) for x in data)", push=pushed)
    assert proc.returncode == 0, proc.stderr
    assert load_result(store, ended(), "h") == 18


def test_an_image_without_cloudpickle_uses_the_copy_shipped_beside_the_runner(
    tmp_path: Path,
) -> None:
    # -S: no site-packages, as in an image with only the standard library
    proc, store = run_cell(tmp_path, "{'a': (lambda: 5)()}", python=[sys.executable, "-S"])
    assert proc.returncode == 0, proc.stderr
    assert load_result(store, ended(), "h") == {"a": 5}


def test_a_result_from_another_python_is_refused_before_unpickling(tmp_path: Path) -> None:
    proc, store = run_cell(tmp_path, "1")
    assert proc.returncode == 0
    (store.root / ".torchx-nb" / "python.txt").write_text("3.6")
    with pytest.raises(TorchxNbError, match=r"ran Python '3.6' and this kernel runs 3\.\d+"):
        load_result(store, ended(), "h")


def test_outputs_are_uploaded_to_an_object_store_url_at_the_end(
    tmp_path: Path, aws_env: Any
) -> None:
    """``$TORCHX_NB_OUTPUT_URL``: the whole output folder goes to S3 (moto), even after the
    cell raised."""
    s3 = aws_env.client("s3")
    s3.create_bucket(
        Bucket="cell-main-out", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    source = "import os\nopen(os.environ['TORCHX_OUTPUT_DIR'] + '/f.txt', 'w').write('x')\n1/0"
    import os

    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["TORCHX_NB_OUTPUT_URL"] = "s3://cell-main-out/runs/job-1/"
    proc, _ = run_cell(tmp_path, source, env=env)
    assert proc.returncode == 1
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="cell-main-out")["Contents"])
    assert keys == [
        "runs/job-1/.torchx-nb/environment.json",
        "runs/job-1/.torchx-nb/error-0.pkl",
        "runs/job-1/.torchx-nb/error-0.txt",
        "runs/job-1/.torchx-nb/python.txt",
        "runs/job-1/f.txt",
    ]


def _trial_env(gcs: Any, url: str, index: int, poll: str = "0.2") -> dict[str, str]:
    """What an array task of a GCP Batch sweep gets: the grid, its index, the upload target
    and the cancel look-up interval."""
    import json
    import os

    return {
        **gcs.env,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "TORCHX_NB_OUTPUT_URL": url,
        "TORCHX_NB_GRID": json.dumps({"names": ["lr"], "lists": [[0.1, 0.2]], "zip": False}),
        "TORCHX_NB_TRIAL_FROM": "TASK_INDEX",
        "TASK_INDEX": str(index),
        "TORCHX_NB_CANCEL_POLL": poll,
    }


def test_a_trial_stops_when_its_cancel_mark_appears(tmp_path: Path, gcs_env: Any) -> None:
    """The cancel mark under the trial's upload target ends a running trial within one look
    (exit 170), its outputs so far uploaded; a mark already there ends it before the cell
    runs."""
    import time

    from torchx_nb.apps.cell_main import CANCELLED_EXIT

    bucket = gcs_env.bucket("cell-cancel")
    source = (
        "import os, time\n"
        "open(os.environ['TORCHX_OUTPUT_DIR'] + '/partial.txt', 'w').write(str(lr))\n"
        "print('running', lr, flush=True)\n"
        "time.sleep(60)\n"
    )
    folder, script = job_folder(tmp_path, source)
    out = tmp_path / "out"
    env = {
        "PATH": "/usr/bin:/bin",
        "TORCHX_OUTPUT_DIR": str(out),
        **_trial_env(gcs_env, "gs://cell-cancel/runs/job-1/", 1),
    }
    proc = subprocess.Popen(
        [sys.executable, str(folder / RUNNER), str(folder / script)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (out / "1" / "partial.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None
        bucket.blob("runs/job-1/1/.torchx-nb/cancel").upload_from_string(b"x")
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == CANCELLED_EXIT, stderr
    assert stdout == "running 0.2\n"
    assert "torchx_nb: this trial was cancelled" in stderr
    assert bucket.blob("runs/job-1/1/partial.txt").download_as_bytes() == b"0.2"

    bucket.blob("runs/job-1/0/.torchx-nb/cancel").upload_from_string(b"x")
    env0 = _trial_env(gcs_env, "gs://cell-cancel/runs/job-1/", 0)
    ran, _ = run_cell(tmp_path / "t0", source, env=env0)
    assert ran.returncode == CANCELLED_EXIT
    assert ran.stdout == "" and "cancelled before it started" in ran.stderr


def test_a_trial_whose_cancel_mark_cannot_be_looked_for_runs_on(
    tmp_path: Path, gcs_env: Any
) -> None:
    """An unreachable object store is one warning; the cell still runs and keeps its value
    (the upload at the end then retries, as google-cloud-storage does: not waited for here)."""
    import time

    from tests.infra.dockerd import free_port

    folder, script = job_folder(tmp_path, "lr * 10")
    out = tmp_path / "out"
    env = {
        "PATH": "/usr/bin:/bin",
        "TORCHX_OUTPUT_DIR": str(out),
        **_trial_env(gcs_env, "gs://nowhere/runs/job-1/", 0),
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{free_port()}",
    }
    proc = subprocess.Popen(
        [sys.executable, str(folder / RUNNER), str(folder / script)],
        cwd=folder,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (out / "0" / ".torchx-nb" / "result.pkl").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        proc.kill()
        _, stderr = proc.communicate(timeout=10)
    assert stderr.count("cannot look for this trial's cancel mark") == 1, stderr
    assert load_result(LocalStore(f"file://{out / '0'}"), ended(), "h") == 1.0


def test_an_exception_the_kernel_cannot_rebuild_keeps_its_type_message_and_traceback(
    tmp_path: Path,
) -> None:
    """``MyErr(1, 2)`` pickles in the job but cannot be rebuilt here (its ``__init__`` needs
    two arguments): a RemoteError with its type and message, the cell's traceback as cause."""
    source = (
        "class MyErr(Exception):\n"
        "    def __init__(self, a, b):\n"
        "        super().__init__(f'{a} and {b} disagree')\n"
        "raise MyErr(1, 2)\n"
    )
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 1
    with pytest.raises(RemoteError) as info:
        load_result(store, ended(AppState.FAILED), "h")
    assert str(info.value) == "the cell raised MyErr: 1 and 2 disagree"
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback) and 'File "<cell>", line 4' in cause.text
    assert repr_of(store) == "raised MyErr: 1 and 2 disagree"


def test_a_syntax_error_is_the_cells_exception(tmp_path: Path) -> None:
    proc, store = run_cell(tmp_path, "x = 1\nif x\n    print(x)\n")
    assert proc.returncode == 1
    with pytest.raises(SyntaxError) as info:
        load_result(store, ended(AppState.FAILED), "h")
    assert info.value.lineno == 2
    assert 'File "<cell>", line 2' in str(info.value.__cause__)
    assert (repr_of(store) or "").startswith("raised SyntaxError: expected ':'")


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("import sys\nsys.exit(0)\n1", "the cell called sys.exit(0) before its last line"),
        (
            "import os\nos._exit(0)\n1",
            "the cell's process ended before its last line finished (os._exit in the cell, a"
            " kill or a crash)",
        ),
    ],
)
def test_a_cell_that_exits_early_is_told_as_such(tmp_path: Path, source: str, said: str) -> None:
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 0
    with pytest.raises(NoResult) as info:
        load_result(store, ended(), "h")
    assert str(info.value) == f"h ended SUCCEEDED without a result: {said}"


def test_a_deleted_output_folder_is_said_so(tmp_path: Path) -> None:
    import shutil

    proc, store = run_cell(tmp_path, "1")
    assert proc.returncode == 0
    shutil.rmtree(store.root)
    with pytest.raises(NoResult, match=r"output folder .* no longer exists: it was deleted"):
        load_result(store, ended(), "h")


def test_result_text_is_read_as_a_bounded_prefix(tmp_path: Path) -> None:
    """A cell that writes 50 MB where the short repr goes, then ends before the runner caps
    it: every reader gets at most SHORT_CHARS of it."""
    from torchx_nb.results import SHORT_CHARS

    source = (
        "import os\n"
        "own = os.path.join(os.environ['TORCHX_OUTPUT_DIR'], '.torchx-nb')\n"
        "os.makedirs(own, exist_ok=True)\n"
        "for name in ('result.txt', 'error-0.txt'):\n"
        "    with open(os.path.join(own, name), 'w') as f:\n"
        "        f.write('x' * (50 << 20))\n"
        "os._exit(0)\n"
    )
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 0
    text = repr_of(store)
    assert text is not None and len(text) == SHORT_CHARS + 1 and text.endswith("…")
    (store.root / ".torchx-nb" / "result.txt").unlink()
    text = repr_of(store)
    assert text is not None and text.startswith("raised xxx")
    assert len(text) == len("raised ") + SHORT_CHARS + 1


# Runs its arguments as a child and prints the child's peak RSS (KiB). Linux gives a process
# the high-water RSS of the memory it had before its exec (ru_maxrss), so a job started
# straight from a pytest worker that has grown to 600 MiB "peaks" at 600 MiB: started from
# this small process it counts only its own.
PEAK_OF_CHILD = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(usage.ru_maxrss, flush=True)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


@pytest.mark.parametrize("kind", ["bytes", "bytearray"])
def test_a_large_bytes_result_costs_no_more_than_its_pickle_to_show(
    tmp_path: Path, kind: str
) -> None:
    """A 128 MiB binary result: the job's peak memory (measured by the kernel's wait4) stays
    under the value plus its pickle plus a margin; repr of the whole value would add 4x. The
    job is started by a small process (``PEAK_OF_CHILD``): the peak is the job's, not that
    of the test process it would otherwise be spawned from (it read 3.1x-5.8x in CI, the
    size of the pytest worker, while the job itself stays near 2.2x)."""
    size = 128 << 20
    folder, script = job_folder(tmp_path, f"{kind}({size})")
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK_OF_CHILD,
            sys.executable,
            str(folder / RUNNER),
            str(folder / script),
        ],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "TORCHX_OUTPUT_DIR": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    peak = int(proc.stdout) * 1024  # Linux counts it in KiB
    assert peak < 3 * size, f"the job peaked at {peak / size:.1f}x its {size >> 20} MiB result"
    text = repr_of(LocalStore(f"file://{out}"))
    assert text is not None
    start = "b'\\x00" if kind == "bytes" else "bytearray(b'\\x00"
    assert text.startswith(start) and "..." in text and len(text) <= 301


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("%time x = 1\nx", "line 1 of the cell, '%time x = 1', is an IPython magic"),
        (
            "import os\n!pip install requests",
            "line 2 of the cell, '!pip install requests', is a shell escape",
        ),
        ("x = 1\n%%bash\necho", "line 2 of the cell, '%%bash', is an IPython magic"),
        # IPython's assignment forms: they reached the job as a SyntaxError after the build
        ("files = !ls", "line 1 of the cell, 'files = !ls', is a shell escape"),
        ("x = 1\nt = %timeit -o x", "line 2 of the cell, 't = %timeit -o x', is an IPython magic"),
        ("d = {}\nd['a'], b = !ls", "line 2 of the cell, \"d['a'], b = !ls\", is a shell escape"),
    ],
)
def test_magics_and_shell_escapes_are_refused_before_submit(source: str, line: str) -> None:
    with pytest.raises(ValueError) as info:
        cell(source=source)
    assert str(info.value).startswith(line + ": a job runs plain Python")


def test_a_percent_or_bang_inside_python_is_not_a_magic() -> None:
    cell(source='s = """\n%time not a magic\n!nor this\n"""\nx = 10 % 3')


def test_two_downloads_into_one_folder_do_not_trip_on_each_other(tmp_path: Path) -> None:
    import threading

    from torchx_nb.results import download

    proc, store = run_cell(
        tmp_path,
        "import os\nopen(os.environ['TORCHX_OUTPUT_DIR'] + '/w.bin', 'wb').write(os.urandom(3 << 20))",
    )
    assert proc.returncode == 0
    dest = tmp_path / "dl"
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            for _ in range(5):
                download(store, dest)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (dest / "w.bin").read_bytes() == (store.root / "w.bin").read_bytes()
    assert [p.name for p in dest.iterdir()] == ["w.bin"]


def notebook_job(tmp_path: Path, *sources: str) -> Path:
    """A job folder holding the cell runner and a notebook of ``sources``."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from torchx_nb.components.cell import runner_files

    folder = tmp_path / "job"
    for name, data in runner_files().items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), folder / "nb.ipynb")
    return folder


def test_a_notebook_is_uploaded_as_it_runs_on_an_object_store(tmp_path: Path, aws_env: Any) -> None:
    """On an object-store backend the executed notebook alone goes up while the job runs
    (the rest of the outputs at the end): opened part-way, it holds the cells run so far."""
    import os
    import time

    import nbformat

    s3 = aws_env.client("s3")
    s3.create_bucket(Bucket="nb-out", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    go = tmp_path / "go"  # the second cell waits for it: the job runs until the test has seen
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.2)"
    folder = notebook_job(tmp_path, "print('early')", wait, "print(2)")
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    env.update(
        PATH=os.environ["PATH"],
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        TORCHX_OUTPUT_DIR=str(tmp_path / "out"),
        TORCHX_NB_OUTPUT_URL="s3://nb-out/runs/j/",
    )
    proc = subprocess.Popen(
        [sys.executable, str(folder / RUNNER), "--notebook", "nb.ipynb"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        early = None
        while time.monotonic() < deadline and early is None:
            time.sleep(0.3)
            try:
                body = s3.get_object(Bucket="nb-out", Key="runs/j/nb.ipynb")["Body"].read()
            except s3.exceptions.NoSuchKey:
                continue
            nb = nbformat.reads(body.decode(), 4)
            if nb.cells[0].get("outputs"):
                early = nb
        assert proc.poll() is None, "the notebook should still be running"
        assert early is not None and early.cells[0].outputs[0].text == "early\n"
        assert early.cells[2].get("outputs") == []
    finally:
        go.touch()
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    final = nbformat.reads(
        s3.get_object(Bucket="nb-out", Key="runs/j/nb.ipynb")["Body"].read().decode(), 4
    )
    assert final.cells[2].outputs[0].text == "2\n"


def test_notebook_uploads_are_spaced_and_a_held_back_one_goes_up_later(
    tmp_path: Path, aws_env: Any
) -> None:
    """Uploads at most every interval (30 s by default; 6 s here through
    $TORCHX_NB_NOTEBOOK_UPLOAD_EVERY): the save held back by it goes up once the interval is
    over, with no cell ending meanwhile (the store is never more than one interval behind),
    and the last state goes up at the end. Every PUT is seen: the bucket keeps versions."""
    import os
    import time

    import nbformat

    from torchx_nb.apps.cell_runner.notebook import NOTEBOOK_UPLOAD_EVERY, upload_every

    assert NOTEBOOK_UPLOAD_EVERY == 30.0
    s3 = aws_env.client("s3")
    s3.create_bucket(
        Bucket="nb-spaced", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    s3.put_bucket_versioning(Bucket="nb-spaced", VersioningConfiguration={"Status": "Enabled"})
    go = tmp_path / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.2)"
    folder = notebook_job(
        tmp_path, "print('a')", "import time\ntime.sleep(1)\nprint('b')", wait, "print('end')"
    )
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    env.update(
        PATH=os.environ["PATH"],
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        TORCHX_OUTPUT_DIR=str(tmp_path / "out"),
        TORCHX_NB_OUTPUT_URL="s3://nb-spaced/runs/j/",
        TORCHX_NB_NOTEBOOK_UPLOAD_EVERY="6",
    )
    key = {"Bucket": "nb-spaced", "Key": "runs/j/nb.ipynb"}
    seen: list[tuple[float, str, Any]] = []  # (when, version, the notebook uploaded)

    def look() -> None:
        try:
            head = s3.head_object(**key)
        except s3.exceptions.ClientError:
            return
        if not seen or seen[-1][1] != head["VersionId"]:
            body = s3.get_object(**key, VersionId=head["VersionId"])["Body"].read()
            seen.append((time.monotonic(), head["VersionId"], nbformat.reads(body.decode(), 4)))

    def outputs(nb: Any) -> list[str]:
        return ["".join(o.get("text", "") for o in c.get("outputs", [])) for c in nb.cells]

    proc = subprocess.Popen(
        [sys.executable, str(folder / RUNNER), "--notebook", "nb.ipynb"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (seen and outputs(seen[-1][2])[1]):
            look()
            time.sleep(0.1)
        quiet = time.monotonic() + 8  # the third cell waits: nothing is owed any more
        while time.monotonic() < quiet:
            look()
            time.sleep(0.1)
        assert proc.poll() is None, "the notebook should still be running"
    finally:
        go.touch()
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    look()
    running = [outputs(nb) for _, _, nb in seen]
    # first 'a' alone (the first save goes up at once), then 'b', held back by the
    # interval and uploaded when it was over, while the third cell still runs
    assert running[:2] == [["a\n", "", "", ""], ["a\n", "b\n", "", ""]], running
    # S3 keeps whole seconds; the first PUT also makes the S3 client (up to a second): 'b'
    # would have gone up 3 s after 'a' without the interval (the save's own 3 s), not 6
    versions = s3.list_object_versions(Bucket="nb-spaced", Prefix="runs/j/nb.ipynb")["Versions"]
    when = {v["VersionId"]: v["LastModified"] for v in versions}
    gap = (when[seen[1][1]] - when[seen[0][1]]).total_seconds()
    assert gap >= 5, (gap, sorted(when.values()))
    assert running[-1] == ["a\n", "b\n", "", "end\n"]  # the last state, at the end
    versions = s3.list_object_versions(Bucket="nb-spaced", Prefix="runs/j/nb.ipynb")["Versions"]
    assert len(versions) <= 4, when  # a, b, the third cell's end, the end's upload
    # the interval: a number of at least 1 second, else the 30 s default
    for given, every in (("4", 4.0), ("0.2", 30.0), ("nan", 30.0), ("x", 30.0), ("", 30.0)):
        os.environ["TORCHX_NB_NOTEBOOK_UPLOAD_EVERY"] = given
        try:
            assert upload_every() == every, given
        finally:
            del os.environ["TORCHX_NB_NOTEBOOK_UPLOAD_EVERY"]


def test_a_job_python_without_nbclient_is_one_line(tmp_path: Path) -> None:
    folder = notebook_job(tmp_path, "x = 1")
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(folder / RUNNER), "--notebook", "nb.ipynb"],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "TORCHX_OUTPUT_DIR": str(tmp_path / "out")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        f"torchx_nb: ModuleNotFoundError: the job's Python ({sys.executable}) has no "
    ), proc.stderr
    assert proc.stderr.rstrip().endswith(
        "a notebook job needs nbclient and ipykernel there (pip install nbclient ipykernel in"
        " the image)"
    )
    assert (
        (tmp_path / "out" / ".torchx-nb" / "error-0.txt")
        .read_text()
        .startswith("ModuleNotFoundError: the job's Python")
    )


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        ("import os\nimport tnb_not_installed_x\n1", "tnb_not_installed_x"),
        ('"""doc"""\nfrom tnb_nope.sub import f\n', "tnb_nope"),
        ("import json, tnb_nope2 as t\n", "tnb_nope2"),
    ],
)
def test_a_module_the_job_lacks_is_one_line_before_the_cell_runs(
    tmp_path: Path, source: str, missing: str
) -> None:
    marker = tmp_path / "ran"
    proc, store = run_cell(tmp_path, f"{source}\nopen({str(marker)!r}, 'w')")
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "\n" not in line, proc.stderr
    assert line.startswith(
        f"torchx_nb: ModuleNotFoundError: No module named {missing!r} in this job"
    )
    assert f"the job's Python is {sys.executable}; install {missing} there" in line
    assert not marker.exists()  # nothing of the cell ran
    with pytest.raises(RemoteError, match=f"No module named '{missing}' in this job"):
        load_result(store, ended(AppState.FAILED), "h")


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    import tnb_optional\nexcept ImportError:\n    tnb_optional = None\n'ok'",
        "import sys\nsys.path.insert(0, 'vendor')\nimport tnb_vendored\n",
        "def f():\n    import tnb_lazy\n'ok'",
        "import tnb_wsmod\n'ok'",
    ],
)
def test_optional_late_lazy_and_workspace_imports_are_not_judged_early(
    tmp_path: Path, source: str
) -> None:
    folder = tmp_path / "job"
    (folder / "vendor").mkdir(parents=True)
    (folder / "vendor" / "tnb_vendored.py").write_text("X = 1\n")
    (folder / "tnb_wsmod.py").write_text("X = 1\n")
    proc, _ = run_cell(tmp_path, source)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("source", "message", "line"),
    [
        (  # a file name read with surrogateescape: a lone surrogate in the message
            "raise ValueError(b'bad \\xff name'.decode('utf-8', 'surrogateescape'))",
            "bad \udcff name",
            "raised ValueError: bad \\udcff name",
        ),
        (
            "class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
            "raise Odd()",
            "<str() failed: RuntimeError>",
            "raised Odd: <str() failed: RuntimeError>",
        ),
    ],
)
def test_an_exception_whose_message_cannot_be_written_plainly_is_still_recorded(
    tmp_path: Path, source: str, message: str, line: str
) -> None:
    """Before, the runner itself crashed writing these (a surrogate cannot be UTF-8 encoded, a
    raising ``__str__`` raised again): the card said only "exited with code 1", no result."""
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "cell_main" not in proc.stderr, proc.stderr
    assert "torchx_nb_cell_runner" not in proc.stderr, proc.stderr
    with pytest.raises(Exception) as info:  # the cell's own exception, rebuilt here
        load_result(store, ended(AppState.FAILED), "h")
    assert type(info.value).__name__ == line.split()[1].rstrip(":")
    if type(info.value) is ValueError:
        assert str(info.value) == message
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert repr_of(store) == line


def test_a_syntax_error_beside_a_percent_s_line_in_a_string_is_the_syntax_error(
    tmp_path: Path,
) -> None:
    """A template string with ``%s`` on a line of its own, and a real syntax error later:
    before, the raw-line scan called line 3 a magic and refused the cell; the tokens say it
    is inside a string, so the job runs and its Python reports the real error, line 5."""
    source = 'template = """\nHello\n%s\n""" % "you"\nif template\n    print(template)\n'
    cell(source=source)  # not refused as a magic
    proc, store = run_cell(tmp_path, source)
    assert proc.returncode == 1
    with pytest.raises(SyntaxError) as info:
        load_result(store, ended(AppState.FAILED), "h")
    assert info.value.lineno == 5
    # a magic at the start of a statement, even indented under a block, is still refused
    with pytest.raises(ValueError, match=r"^line 5 of the cell, '%time y', is an IPython magic"):
        cell(source='s = """\n%s\n"""\nif s:\n    %time y\n')
