"""notebooks/kubernetes.ipynb in a real kernel against the loopback Kubernetes API server: the
dry run of an Indexed Job, a Volcano job and an Indexed Job from cells, their logs and
``%torchx list``."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import Registry
from tests.infra.kube import KubeFake
from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "kubernetes.ipynb"

pytestmark = pytest.mark.slow


def test_kubernetes_notebook(
    kube_env: KubeFake,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", python_in_registry)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_REPO", f"{registry.host}/nb/k8s")
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    assert "tolerations" in text_of(cell_with(nb, "%torchx runopts kubernetes"))
    dry = text_of(cell_with(nb, "--dryrun"))
    assert "completionMode: Indexed" in dry and "clusterIP: None" in dry
    after = text_of(cell_with(nb, "for h in (job, indexed)"))
    assert after.count("SUCCEEDED") == 2, after
    assert "Volcano task index 0 params {'lr': 0.1}" in after
    assert "completion index 0 rank 0 at cell-" in after
    listing = text_of(cell_with(nb, "%torchx list -s kubernetes"))
    assert "kubernetes://torchx/default:cell-" in listing and "SUCCEEDED" in listing
