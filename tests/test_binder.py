"""binder/ as repo2docker uses it: a clean copy of the repository, a fresh virtual environment,
``pip install -r binder/requirements.txt``, then ``binder/postBuild`` from the repository root.
In that environment (and no other: its own HOME, so no user kernel spec can stand in) the
extensions are enabled and notebooks/quickstart.ipynb runs headless."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_copy, isolated_env
from tests.infra.fixtures import missing

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1200)
def test_binder_environment_builds_and_runs_the_quickstart(tmp_path: Path) -> None:
    if shutil.which("npm") is None or shutil.which("git") is None:
        missing("binder/postBuild needs git and Node.js with npm")
    repo = clean_copy(tmp_path / "repo")
    assert not (repo / "torchx_nb" / "labextension").exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    home = tmp_path / "home"
    home.mkdir()
    env = isolated_env(
        home,
        PATH=f"{venv / 'bin'}:{os.environ['PATH']}",
        VIRTUAL_ENV=str(venv),
        TORCHX_NB_DATA_DIR=str(tmp_path / "data"),
        TORCHX_NB_WIDGETS="text",
    )

    def sh(*cmd: str, cwd: Path = repo) -> str:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
        return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)

    sh("python", "-m", "pip", "install", "-q", "-r", "binder/requirements.txt")
    sh("bash", "binder/postBuild")

    # installed into the venv, not imported from the checkout
    where = sh("python", "-c", "import torchx_nb; print(torchx_nb.__file__)", cwd=home)
    assert where.split()[0].startswith(str(venv)), where
    assert "torchx_nb.server" in sh("jupyter", "server", "extension", "list")
    labext = sh("jupyter", "labextension", "list")
    assert "torchx-nb v0.1.0 enabled" in labext and "(python, torchx_nb)" in labext, labext
    kernels = sh("jupyter", "kernelspec", "list")
    assert str(venv) in kernels, kernels

    out = sh("python", "scripts/run_notebook.py", "notebooks/quickstart.ipynb")
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "Error" in line]
    # the quickstart's one deliberate mistake (a misspelt scheduler) and nothing else
    assert errors == [
        "UsageError: %torchx run: unknown scheduler 'local_cdw'; did you mean 'local_cwd'? "
        "(available: aws_batch, aws_sagemaker, gcp_batch, kubernetes, local_cwd, local_docker, "
        "slurm)"
    ], errors
    assert "local_cwd://torchx/slow-" in out and "sum of y: 6" in out, out
    assert out.count("SUCCEEDED") >= 4, out
