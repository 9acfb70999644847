"""The layer joins the site directory of the Python the job really runs, on images with the
layouts real ones have (built offline: tests/infra/python_images.py): a /usr/local CPython
as in ``python:3.x-slim``, a virtualenv on PATH over Debian's python3, a conda prefix first
on PATH. The dry run says which Python and why; the job, on local_docker with either
builder, imports the kernel's packages with that Python."""

from __future__ import annotations

from pathlib import Path

import pytest

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
