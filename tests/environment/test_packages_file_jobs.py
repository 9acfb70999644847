"""``--packages FILE`` against real parts: a project with a src layout and its uv.lock (a
Windows-only dependency, a forked one, a dev group), a requirements file with an editable
local folder; the dry run downloads and builds nothing (the kernel's index is unreachable and
it still shows the plan), the job on local_docker (registry builder, no daemon; docker
builder) imports the project and what the file names."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path

import pytest

from tests.environment.cells import docker_cli, job_log, last_line, plan_rows, run_cell
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.kernel_venv import KernelVenv

LOCK = """version = 1
requires-python = ">=3.8"
resolution-markers = ["python_full_version >= '3.10'", "python_full_version < '3.10'"]

[[package]]
name = "tnbapp"
version = "0.3.0"
source = { editable = "." }
dependencies = [
    { name = "colorama", marker = "sys_platform == 'win32'" },
    { name = "tnbserved", version = "0.9", source = { registry = "https://127.0.0.1/simple" }, marker = "python_full_version < '3.10'" },
    { name = "tnbserved", version = "1.0", source = { registry = "https://127.0.0.1/simple" }, marker = "python_full_version >= '3.10'" },
]

[package.dev-dependencies]
dev = [{ name = "pytest" }]

[[package]]
name = "colorama"
version = "0.4.6"
source = { registry = "https://127.0.0.1/simple" }

[[package]]
name = "pytest"
version = "8.3.0"
source = { registry = "https://127.0.0.1/simple" }

[[package]]
name = "tnbserved"
version = "0.9"
source = { registry = "https://127.0.0.1/simple" }

[[package]]
name = "tnbserved"
version = "1.0"
source = { registry = "https://127.0.0.1/simple" }
"""
BUILD = '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
CELL = (
    "import tnbapp, tnbhelper, tnbserved\n"
    "print('app', tnbapp.V, 'helper', tnbhelper.V, 'served', tnbserved.VERSION)\n"
)


def _project(tmp_path: Path) -> Path:
    """A workspace that is a project: src layout, its uv.lock, a requirements file naming an
    editable helper folder and the served distribution."""
    ws = tmp_path / "ws"
    (ws / "src" / "tnbapp").mkdir(parents=True)
    (ws / "src" / "tnbapp" / "__init__.py").write_text("V = 'app-1'\n")
    (ws / "pyproject.toml").write_text(
        BUILD + '[project]\nname = "tnbapp"\nversion = "0.3.0"\ndependencies = ["tnbserved"]\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    (ws / "uv.lock").write_text(LOCK)
    helper = ws / "libs" / "tnbhelper"
    helper.mkdir(parents=True)
    (helper / "tnbhelper.py").write_text("V = 'helper-1'\n")
    (helper / "pyproject.toml").write_text(
        BUILD + '[project]\nname = "tnbhelper"\nversion = "2.0"\n'
        '[tool.setuptools]\npy-modules = ["tnbhelper"]\n'
    )
    (ws / "requirements.txt").write_text("-e ./libs/tnbhelper\n-e .\ntnbserved==0.9\n")
    return ws


def _cli(env: dict[str, str], kv: KernelVenv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kv.python), "-m", "torchx_nb.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )


@pytest.mark.parametrize("file", ["uv.lock", "requirements.txt"])
def test_the_dry_run_downloads_and_builds_nothing_and_marks_what_waits_for_submit(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    tmp_path: Path,
    file: str,
) -> None:
    ws = _project(tmp_path)
    env = {k: v for k, v in kernel_venv.env.items() if k not in ("PIP_NO_INDEX", "PIP_FIND_LINKS")}
    env["PIP_INDEX_URL"] = "http://127.0.0.1:9/simple"  # nothing listens: no download possible
    proc = run_cell(
        partial(_cli, env, kernel_venv),
        ws,
        base_images["python"],
        "builder=docker",
        CELL,
        "--dryrun",
        "--json",
        "--packages",
        str(ws / file),
    )
    assert proc.returncode == 0, proc.stderr
    rows = plan_rows(proc.stdout)
    assert (
        "note: a dry run downloads and builds nothing: versions, requirements, local"
        " folders' wheels, URLs and git checkouts are resolved at submit"
    ) in proc.stdout
    if file == "uv.lock":
        assert rows["tnbapp"] == (
            "tnbapp 0.3.0 0 KB missing; the project, built from its folder"
        ), rows
        assert rows["tnbserved"] == "tnbserved 1.0 0 KB missing", rows
        assert "colorama" not in rows and "pytest" not in rows
    else:
        assert rows["tnbhelper"].endswith(f"missing; built from {ws / 'libs' / 'tnbhelper'}")
        assert rows["tnbapp"].endswith(f"missing; built from {ws}"), rows
        assert rows["tnbserved"] == "tnbserved 0.9 0 KB missing; ==0.9, resolved at submit"
    assert not list(ws.rglob("*.egg-info")) and not (ws / "build").exists()  # nothing built


@pytest.mark.parametrize(
    ("file", "builder"), [("uv.lock", "registry"), ("requirements.txt", "docker")]
)
def test_the_job_runs_the_project_and_what_the_file_names(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    python_in_registry: str,
    base_images: dict[str, str],
    registry: Registry,
    tmp_path: Path,
    file: str,
    builder: str,
) -> None:
    ws = _project(tmp_path)
    cell = CELL
    if file == "uv.lock":  # the helper is not in the lock: the workspace ships it as a module
        (ws / "tnbhelper.py").write_text("V = 'ws-helper'\n")
    image, cfg = base_images["python"], f"network=host,builder={builder}"
    if builder == "registry":
        image, cfg = python_in_registry, f"{cfg},image_repo={registry.host}/pkgfile"
    proc = run_cell(
        docker_cli(kernel_venv),
        ws,
        image,
        cfg,
        cell,
        "--packages",
        str(ws / file),
        "--wait",
    )
    log = job_log(kernel_venv.cli, proc)
    helper = "ws-helper" if file == "uv.lock" else "helper-1"
    served = "1.0" if file == "uv.lock" else "0.9"
    assert f"app app-1 helper {helper} served {served}" in log, log


def test_a_folder_line_brings_its_own_dependencies(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """``-e .`` alone in a requirements file: the project's own ``dependencies``
    (tnbserved) are resolved with the rest and travel in the layer, as ``pip install -r``
    installs them (they were dropped: the folder's wheel went in with --no-deps and the job
    failed with ModuleNotFoundError)."""
    ws = _project(tmp_path)
    (ws / "requirements.txt").write_text("-e .\n")
    proc = run_cell(
        docker_cli(kernel_venv),
        ws,
        python_in_registry,
        f"network=host,builder=registry,image_repo={registry.host}/pkgfile-deps",
        "import tnbapp, tnbserved\nprint('app', tnbapp.V, 'served', tnbserved.VERSION)\n",
        "--packages",
        str(ws / "requirements.txt"),
        "--wait",
    )
    log = job_log(kernel_venv.cli, proc)
    assert "app app-1 served 1.0" in log, log


def test_hashes_in_the_file_are_honoured_as_pip_honours_them(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """A requirements file's ``--hash`` and a uv.lock's wheel hashes: a wheel the kernel's
    index serves with another sha256 (a rebuilt or substituted file) is one line before
    anything is built, in the dry run too (pip refuses it; the hashes were dropped and the
    job got whatever the index served); with the right hash the job runs."""
    import hashlib

    wheel = next(kernel_venv.served.glob("tnbserved-1.0-*.whl"))
    right = hashlib.sha256(wheel.read_bytes()).hexdigest()
    ws = tmp_path / "ws"
    ws.mkdir()
    lock = LOCK.replace(
        'name = "tnbserved"\nversion = "1.0"\nsource = { registry = "https://127.0.0.1/simple" }\n',
        'name = "tnbserved"\nversion = "1.0"\nsource = { registry = "https://127.0.0.1/simple" }\n'
        'wheels = [{ url = "https://127.0.0.1/tnbserved-1.0-py3-none-any.whl",'
        f' hash = "sha256:{"0" * 64}" }}]\n',
    )
    (ws / "uv.lock").write_text(lock)
    (ws / "pyproject.toml").write_text(
        BUILD + '[project]\nname = "tnbapp"\nversion = "0.3.0"\n'
        "[tool.setuptools]\npy-modules = []\n"
    )

    def run(file: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_cell(
            docker_cli(kernel_venv),
            ws,
            python_in_registry,
            f"network=host,builder=registry,image_repo={registry.host}/pkgfile-hash",
            "import tnbserved\nprint('served', tnbserved.VERSION)\n",
            *extra,
            "--packages",
            str(ws / file),
        )

    wrong = "b" * 64
    (ws / "requirements.txt").write_text(f"tnbserved==1.0 \\\n  --hash=sha256:{wrong}\n")
    for file, extra in (("requirements.txt", "--dryrun"), ("requirements.txt", "--wait")):
        proc = run(file, extra)
        assert proc.returncode != 0, proc.stdout
        last = last_line(proc)
        assert last.startswith(
            f"torchx-nb: error: --packages {ws / file}: tnbserved==1.0 has hashes that no"
            f" wheel the indexes serve for the image has ({wheel.name} (sha256:{right[:16]}…);"
        ), proc.stderr
        assert "local_docker://" not in proc.stdout
    proc = run("uv.lock", "--dryrun")
    assert proc.returncode != 0 and "tnbserved==1.0 has hashes that no wheel" in proc.stderr
    (ws / "requirements.txt").write_text(f"tnbserved==1.0 --hash=sha256:{right}\n")
    proc = run("requirements.txt", "--wait")
    assert "served 1.0" in job_log(kernel_venv.cli, proc)
