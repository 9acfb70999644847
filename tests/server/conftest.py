"""A real Jupyter server (started as JupyterLab, with the extension enabled by the config file
the package installs) per test module, and a job store this test's runner shares with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.lab import Lab, jupyter_lab, lab_missing


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = lab_missing()
    if reason:
        from tests.infra.fixtures import missing

        missing(reason)
    # jupyter_lab() installs the server extension's config file as `pip install` does
    root = tmp_path_factory.mktemp("rest") / "root"
    data = root.parent / "data"
    with jupyter_lab(root, env={"TORCHX_NB_DATA_DIR": str(data)}) as server:
        server.data_dir = data  # type: ignore[attr-defined]
        yield server


@pytest.fixture
def store(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's runner writes to the server's job store."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(lab.data_dir))  # type: ignore[attr-defined]
    return lab.data_dir  # type: ignore[attr-defined,no-any-return]
