"""notebooks/gcp_batch.ipynb in a real kernel against the loopback GCP Batch + Logging: the dry
run of a two-node H100 job, a two-task cell pushed to the Artifact-Registry-like registry with a
google-auth token, its logs from Cloud Logging, and ``%torchx list``."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.infra.gcp import GcpFake
from tests.infra.token_proxy import TokenProxy
from tests.notebook.test_quickstart import cell_with, execute, text_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "gcp_batch.ipynb"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_gcp_batch_notebook(
    mode: str,
    gcp_env: GcpFake,
    gar_registry: TokenProxy,
    python_in_registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_PROJECT", gcp_env.project)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", python_in_registry)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_REPO", f"{gar_registry.host}/{gcp_env.project}/nb")
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    (tmp_path / ".env").write_text("SECRET_TOKEN=never-shipped\n")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    before = len(gcp_env.jobs)
    nb = execute(nbformat.read(tmp_path / NOTEBOOK.name, as_version=4), tmp_path)

    assert "machine_type" in text_of(cell_with(nb, "%torchx runopts gcp_batch"))
    dry = text_of(cell_with(nb, "--dryrun"))
    assert '"machineType": "a3-highgpu-8g"' in dry and '"taskCount": "2"' in dry
    assert '"provisioningModel": "SPOT"' in dry and '"installGpuDrivers": true' in dry
    assert len(gcp_env.jobs) == before + 1  # the dry run sent nothing
    after = text_of(cell_with(nb, "job.wait().state"))
    assert after.startswith(
        "SUCCEEDED https://console.cloud.google.com/batch/jobsDetail/regions/us-central1/jobs/cell-"
    ), after
    assert "task 0 of 1 params {'lr': 0.1}" in after
    listing = text_of(cell_with(nb, "%torchx list -s gcp_batch"))
    assert f"gcp_batch://torchx/{gcp_env.project}:" in listing
    assert "SUCCEEDED" in listing
    if mode == "widgets":
        status = cell_with(nb, "-o job").outputs[0]["data"]
        assert status["text/plain"].startswith("gcp_batch://torchx/")
