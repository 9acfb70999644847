"""notebooks/aws_sagemaker.ipynb in a real kernel against moto_server (where training jobs
complete at once and run nothing: moto has no SageMaker runtime)."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.moto import MotoServer
from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "aws_sagemaker.ipynb"

pytestmark = pytest.mark.slow


def test_aws_sagemaker_notebook(
    aws_env: MotoServer,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_ROLE", "arn:aws:iam::123456789012:role/SageMakerRole")
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", python_in_registry)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_REPO", f"{registry.host}/nb/sagemaker")
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    dry = text_of(cell_with(nb, "--dryrun"))
    assert '"EnableManagedSpotTraining": true' in dry and '"MaxWaitTimeInSeconds": 7200' in dry
    assert "aws_sagemaker://torchx/cell-" in text_of(cell_with(nb, "-o job"))
    assert text_of(cell_with(nb, "job.status().state")).strip() == "SUCCEEDED"
    assert "SUCCEEDED" in text_of(cell_with(nb, "%torchx list -s aws_sagemaker"))
