"""Compiled distributions from the kernel ship only when their wheel tags fit the image: a
kernel holding one wheel tagged for a newer glibc than the image's (refused in one line,
before anything is built) and one tagged manylinux_2_17 whose wheel file is gone (its
installed files packed back under that tag; the job on local_docker imports it)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.environment.cells import job_log, last_line, run_cell, venv_under_test
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.kernel_venv import pip_isolated
from torchx_nb.environment.wheels import uv_bin


def _compiled_wheel(out: Path, name: str, tag: str) -> Path:
    """A wheel with a (fake) extension module beside an importable package."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"VERSION = '1.0'\n",
        f"{name}/_speed.cpython-311-x86_64-linux-gnu.so": b"\x7fELF",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n"
        ).encode(),
    }
    record = []
    for rel, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    path = out / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(scope="module")
def compiled_kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernel (a virtualenv) holding tnbglibcnew (manylinux_2_39, newer than the bookworm
    base's glibc 2.36) and tnbglibcok (manylinux_2_17), installed from wheel files; the
    latter's file is removed afterwards."""

    root = tmp_path_factory.mktemp("compiled-kernel")
    python = venv_under_test(root / "venv")
    new = _compiled_wheel(root, "tnbglibcnew", "cp311-cp311-manylinux_2_39_x86_64")
    ok = _compiled_wheel(root, "tnbglibcok", "cp311-cp311-manylinux_2_17_x86_64")
    subprocess.run(
        [
            uv_bin(),
            "pip",
            "install",
            "--no-config",
            "--quiet",
            "--python",
            str(python),
            "--python-platform",
            "x86_64-manylinux_2_39",
            "--no-index",
            "--no-deps",
            str(new),
            str(ok),
        ],
        check=True,
        capture_output=True,
    )
    ok.unlink()
    return python


def _cli(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = pip_isolated(PIP_NO_INDEX="1")
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [str(python), "-m", "torchx_nb.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )


def test_a_wheel_tagged_for_a_newer_glibc_than_the_image_s_is_refused_in_one_line(
    compiled_kernel: Path,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    image = python_in_registry  # the python base where every test finds it (no second name)
    ws = tmp_path / "ws"
    ws.mkdir()
    cli = partial(_cli, compiled_kernel)
    for extra in (["--dryrun"], []):
        cfg = f"network=host,builder=registry,image_repo={registry.host}/glibcnew"
        proc = run_cell(cli, ws, image, cfg, "import tnbglibcnew\n", *extra)
        assert proc.returncode != 0
        assert last_line(proc) == (
            "torchx-nb: error: tnbglibcnew 1.0 is compiled, and this kernel's copy"
            " (cp311-cp311-manylinux_2_39_x86_64) does not fit image"
            f" {image} (Python 3.11, x86_64-manylinux_2_36 or older): install a wheel built"
            " for it, install it in the base image, or pass --packages none"
        ), proc.stderr
    import requests

    tags = requests.get(f"http://{registry.host}/v2/glibcnew/tags/list", timeout=10)
    assert tags.status_code == 404 or not tags.json().get("tags"), tags.text


def test_a_wheel_whose_tags_fit_ships_from_the_kernel_s_installed_files(
    compiled_kernel: Path,
    docker_env: Any,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    image = python_in_registry  # the python base where every test finds it (no second name)
    ws = tmp_path / "ws"
    ws.mkdir()
    cell = "import tnbglibcok\nprint('ok', tnbglibcok.VERSION, tnbglibcok.__file__)\n"
    cfg = f"network=host,builder=registry,image_repo={registry.host}/glibcok"
    cli = partial(_cli, compiled_kernel)
    log = job_log(cli, run_cell(cli, ws, image, cfg, cell, "--wait"))
    assert "ok 1.0 /opt/torchx-nb/env/tnbglibcok/__init__.py" in log, log
