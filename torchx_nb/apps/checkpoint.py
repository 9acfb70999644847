"""The checkpoint protocol's names as the kernel side reads them (backends building a job's
env and retry rules): the runner package that ships with every job holds the code,
``torchx_nb.apps.cell_runner.checkpoint``; these stay importable from here."""

from __future__ import annotations

from torchx_nb.apps.cell_runner.checkpoint import (
    ATTEMPT_ENV_ENV,
    DIR_ENV,
    GRACE_ENV,
    MAX_PREEMPTIONS_ENV,
    MAX_RETRIES_ENV,
    RETRIES_SPENT_EXIT,
    URL_ENV,
)

__all__ = [
    "ATTEMPT_ENV_ENV",
    "DIR_ENV",
    "GRACE_ENV",
    "MAX_PREEMPTIONS_ENV",
    "MAX_RETRIES_ENV",
    "RETRIES_SPENT_EXIT",
    "URL_ENV",
]
