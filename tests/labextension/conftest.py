"""What every panel test needs: JupyterLab, the built extension and Chromium (missing parts fail
under CI), and no job of ours left running afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.infra.fixtures import missing
from tests.infra.lab import lab_missing
from torchx_nb.runner import get_runner


@pytest.fixture
def panel_parts() -> Iterator[None]:
    reason = lab_missing(panel=True)
    if reason:
        missing(reason)
    yield
    runner = get_runner()
    for rec in runner.jobstore.list():
        if not rec.is_terminal:
            runner.cancel(rec.handle)
