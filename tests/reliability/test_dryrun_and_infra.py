"""A dry run shows what the run will send and touches nothing; two test runs on one machine
keep their own dockerd data roots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchx_nb.components.cell import cell
from torchx_nb.runner import Runner


def test_image_dryrun_shows_the_cell_script_and_patched_image_without_pushing(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated / "data.csv").write_text("1,2\n")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # nothing to talk to
    app = cell(source="print('hi')\n", image="127.0.0.1:9/base/python:3.11")
    runner = Runner("torchx")
    info = runner.dryrun(
        app, "aws_batch", {"queue": "q", "image_repo": "127.0.0.1:9/jobs"}, workspace=str(isolated)
    )
    text = str(info)
    assert ".torchx-cell-" in text and "python -c" not in text
    assert "127.0.0.1:9/jobs@sha256:<digest after push of 127.0.0.1:9/base/python:3.11" in text
    assert info.workspace_preview is not None and "data.csv" in info.workspace_preview


def test_a_second_test_run_gets_its_own_dockerd_data_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each dockerd at once (a parallel run's workers, a second run) takes the next free cached
    slot, with its own pid file; past the last slot one gets a private data root; a slot let go
    is taken again."""
    from tests.infra.dockerd import DATA_ROOT_SLOTS, _claim_data_root

    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHX_NB_DOCKER_DATA", str(cache / "docker-data"))
    claims = [_claim_data_root(tmp_path / f"run{i}") for i in range(DATA_ROOT_SLOTS)]
    try:
        roots = [root for root, _, _ in claims]
        assert roots == [cache / "docker-data"] + [
            cache / f"docker-data-{i}" for i in range(1, DATA_ROOT_SLOTS)
        ]
        assert all(fd is not None for _, _, fd in claims)
        assert len({pid for _, pid, _ in claims}) == DATA_ROOT_SLOTS
        private_root, private_pid, private_fd = _claim_data_root(tmp_path / "extra")
        assert private_fd is None and private_root == tmp_path / "extra" / "docker-data"
        assert private_pid not in {pid for _, pid, _ in claims}
    finally:
        for _, _, fd in claims:
            assert fd is not None
            os.close(fd)
    again_root, _, again_fd = _claim_data_root(tmp_path / "again")
    assert again_root == cache / "docker-data" and again_fd is not None
    os.close(again_fd)
