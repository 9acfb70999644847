"""The layer joins the site directory of the Python the job really runs, on images with the
layouts real ones have (built offline: tests/infra/python_images.py): a /usr/local CPython
as in ``python:3.x-slim``, a virtualenv on PATH over Debian's python3, a conda prefix first
on PATH. The dry run says which Python and why; the job, on local_docker with either
builder, imports the kernel's packages with that Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.environment.cells import last_line, plan_rows
from tests.environment.test_environment_jobs import _dryrun, _job_output, _submit, _workspace
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.kernel_venv import KernelVenv
from tests.infra.python_images import python_layout_images

CELL = (
    "import sys, tnbprobe, tnbserved\n"
    "print('ran', sys.executable, tnbprobe.__file__, 'served', tnbserved.VERSION)\n"
)
PYTHONS = {
    "usrlocal": (
        "/usr/local/bin/python (`python` on the image's PATH is /usr/local/bin/python ->"
        " /usr/local/bin/python3.11, an installation in /usr/local, Python 3.11); packages go"
        " to /usr/local/lib/python3.11/site-packages"
    ),
    "venv": (
        "/opt/venv/bin/python (`python` on the image's PATH is /opt/venv/bin/python ->"
        " /usr/bin/python3.11, a virtualenv (/opt/venv/pyvenv.cfg) (VIRTUAL_ENV names it too)"
        " of Python 3.11); packages go to /opt/venv/lib/python3.11/site-packages"
    ),
    "conda": (
        "/opt/conda/bin/python (`python` on the image's PATH is /opt/conda/bin/python ->"
        " /opt/conda/bin/python3.11, a conda environment (/opt/conda/conda-meta), Python"
        " 3.11); packages go to /opt/conda/lib/python3.11/site-packages"
    ),
}


@pytest.fixture(scope="session")
def layouts(dockerd: DockerDaemon, base_images: dict[str, str]) -> dict[str, str]:
    return python_layout_images(dockerd.client(), base_images["python"])


@pytest.mark.parametrize("layout", ["usrlocal", "venv", "conda"])
def test_the_dry_run_names_the_python_the_job_runs_and_why(
    kernel_venv: KernelVenv,
    layouts: dict[str, str],
    docker_env: DockerDaemon,
    tmp_path: Path,
    layout: str,
) -> None:
    proc = _dryrun(kernel_venv, _workspace(tmp_path), layouts[layout], CELL, "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"python:    {PYTHONS[layout]}" in proc.stdout.splitlines(), proc.stdout
    assert f"python: {PYTHONS[layout]}" in proc.stdout.splitlines()  # the plan's section


@pytest.mark.parametrize(
    ("layout", "builder"),
    [("venv", "docker"), ("venv", "registry"), ("conda", "registry"), ("usrlocal", "docker")],
)
def test_the_job_imports_the_kernels_packages_with_the_image_s_own_python(
    kernel_venv: KernelVenv,
    layouts: dict[str, str],
    docker_env: DockerDaemon,
    registry: Registry,
    tmp_path: Path,
    layout: str,
    builder: str,
) -> None:
    from tests.infra.fixtures import push_to_registry

    image = layouts[layout]
    cfg = [f"builder={builder}"]
    if builder == "registry":
        image = push_to_registry(docker_env, image, f"{registry.host}/layouts/{layout}:1")
        cfg.append(f"image_repo={registry.host}/layoutjobs")
    handle = _submit(kernel_venv, _workspace(tmp_path), image, *cfg, cell=CELL)
    python = PYTHONS[layout].split()[0]
    assert f"ran {python} /opt/torchx-nb/env/tnbprobe.py served 1.0" in _job_output(
        kernel_venv, handle
    )


def test_a_lock_forked_on_a_patch_release_takes_the_image_s_own(
    kernel_venv: KernelVenv,
    layouts: dict[str, str],
    base_images: dict[str, str],
    docker_env: DockerDaemon,
    tmp_path: Path,
) -> None:
    """A uv.lock forked at the image's own patch release (``python_full_version < '3.11.7'``
    for an image whose config says ``PYTHON_VERSION=3.11.7``) plans the image's side of the
    fork (3.11.0 was assumed: the other side); on Debian's python3, whose image does not say
    its patch release, the dry run is one line naming the marker."""
    import platform

    full = platform.python_version()
    lock_ws = tmp_path / "ws"
    lock_ws.mkdir()
    fork = '{{ name = "tnbserved", version = "{v}", source = {{ registry = "https://127.0.0.1/simple" }}, marker = "python_full_version {op} \'{full}\'" }}'
    (lock_ws / "uv.lock").write_text(
        'version = 1\nrequires-python = ">=3.8"\n\n[[package]]\nname = "tnbapp"\n'
        'version = "0.1"\nsource = { virtual = "." }\ndependencies = [\n'
        f"    {fork.format(v='0.9', op='<', full=full)},\n"
        f"    {fork.format(v='1.0', op='>=', full=full)},\n]\n\n"
        '[[package]]\nname = "tnbserved"\nversion = "0.9"\n'
        'source = { registry = "https://127.0.0.1/simple" }\n\n'
        '[[package]]\nname = "tnbserved"\nversion = "1.0"\n'
        'source = { registry = "https://127.0.0.1/simple" }\n'
    )
    packages = ("--json", "--packages", str(lock_ws / "uv.lock"))
    proc = _dryrun(kernel_venv, lock_ws, layouts["usrlocal"], CELL, *packages)
    assert proc.returncode == 0, proc.stderr
    assert plan_rows(proc.stdout)["tnbserved"] == "tnbserved 1.0 0 KB missing", proc.stdout
    proc = _dryrun(kernel_venv, lock_ws, base_images["python"], CELL, *packages)
    assert proc.returncode != 0
    assert last_line(proc) == (
        f'torchx-nb: error: --packages {lock_ws / "uv.lock"}: the marker "python_full_version <'
        f" '{full}'\" depends on the image's Python patch version, which the image does not"
        " say (Python 3.11; its config has no PYTHON_VERSION): set ENV PYTHON_VERSION=3.11.N"
        " in the image, or write the marker with python_version"
    )
