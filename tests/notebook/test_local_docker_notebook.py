"""notebooks/local_docker.ipynb executed in a real kernel against our dockerd."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import DockerDaemon
from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "local_docker.ipynb"

pytestmark = pytest.mark.slow


def test_local_docker_notebook(
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", base_images["python"])
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    preview = text_of(cell_with(nb, "%torchx workspace"))
    assert "data.csv" in preview and ".env  [secret]" in preview
    ran = text_of(cell_with(nb, "sum of y"))
    assert "running in /workspace as local_docker://torchx/cell-" in ran
    assert "sum of y: 6" in ran and ".env shipped: False" in ran and "SUCCEEDED" in ran
    assert "only this small layer is new" in text_of(cell_with(nb, "an edited cell"))
    listing = text_of(cell_with(nb, "%torchx list -s local_docker"))
    assert listing.count("SUCCEEDED") >= 2
