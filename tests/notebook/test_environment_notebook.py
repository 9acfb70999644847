"""notebooks/environment.ipynb executed in a real kernel (the kernel virtualenv's Python, its
pip configuration isolated) against our dockerd: the dry run shows the plan, the job imports
the kernel's version of a package the base image lacks, ``--packages none`` names it."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import DockerDaemon
from tests.infra.kernel_venv import KernelVenv
from tests.infra.kernels import execute_in_kernel
from tests.notebook.test_quickstart import cell_with, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "environment.ipynb"
KERNEL = "torchx-nb-env-test"

pytestmark = pytest.mark.slow


def test_environment_notebook(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(key)
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    env = {k: v for k, v in kernel_venv.env.items() if k.startswith("PIP_")}
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    str(kernel_venv.python),
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "kernel venv",
                "language": "python",
                "env": env,
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", base_images["python"])
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    work = tmp_path / "nb"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    nb = nbformat.read(work / NOTEBOOK.name, as_version=4)
    execute_in_kernel(nb, work, kernel_name=KERNEL, timeout=300)

    kernel_has = text_of(cell_with(nb, 'print("this kernel has tqdm"'))
    version = re.search(r"this kernel has tqdm (\S+)", kernel_has)
    assert version, kernel_has
    plan = text_of(cell_with(nb, "%%torchx run --dryrun"))
    assert re.search(
        rf"packages:  1 to add \([0-9.]+ [KM]B\): tqdm {re.escape(version[1])}", plan
    ), plan
    assert "tqdm" in plan and "missing" in plan
    ran = text_of(cell_with(nb, 'print("the job has tqdm"'))
    assert f"the job has tqdm {version[1]}" in ran and "SUCCEEDED" in ran, ran
    none = text_of(cell_with(nb, "--packages none"))
    assert "No module named 'tqdm' in this job (line 1: import tqdm)" in none, none
    assert "FAILED" in none
