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
    from tests.infra.dockerd import _claim_data_root

    monkeypatch.setenv("TORCHX_NB_DOCKER_DATA", str(tmp_path / "cache" / "docker-data"))
    first_root, first_pid, first_fd = _claim_data_root(tmp_path / "run1")
    try:
        second_root, second_pid, second_fd = _claim_data_root(tmp_path / "run2")
        assert first_fd is not None and second_fd is None
        assert first_root == tmp_path / "cache" / "docker-data"
        assert second_root == tmp_path / "run2" / "docker-data"
        assert second_pid != first_pid
    finally:
        assert first_fd is not None
        os.close(first_fd)
    third_root, _, third_fd = _claim_data_root(tmp_path / "run3")
    assert third_root == first_root and third_fd is not None
    os.close(third_fd)
