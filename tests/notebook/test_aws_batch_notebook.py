"""notebooks/aws_batch.ipynb in a real kernel, against moto_server running real containers."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.moto import MotoServer, make_queue
from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "aws_batch.ipynb"

pytestmark = pytest.mark.slow


def test_aws_batch_notebook(
    aws_env: MotoServer,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws_env.use_docker(True)
    queue = make_queue(aws_env, "notebook-queue")
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_QUEUE", queue)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", python_in_registry)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_REPO", f"{registry.host}/nb/batch")
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    assert "queue" in text_of(cell_with(nb, "%torchx runopts aws_batch"))
    ran = text_of(cell_with(nb, 'params.json")))'))
    assert "node of cell params {'lr': 0.1}" in ran and "SUCCEEDED" in ran
    status = text_of(cell_with(nb, "job.status().ui_url"))
    assert status.startswith("SUCCEEDED https://us-west-2.console.aws.amazon.com/batch/home")
    listing = text_of(cell_with(nb, "%torchx list -s aws_batch"))
    assert "aws_batch://torchx/notebook-queue:cell-" in listing and "SUCCEEDED" in listing
