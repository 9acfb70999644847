"""The Runner: one object through which the CLI, the magics and the server dryrun, run, watch,
list and cancel apps on any scheduler. Mirrors ``torchx.runner.Runner``, and records every
submission in the job store before ``run`` returns.

The seams it owns:

- **one submit path**: a ``RunRequest`` (what to run, where, with which options and
  workspace) goes through ``prepare`` (scheduler and options resolved once, workspace used as
  the scheduler's abilities allow, the dry run) and ``submit`` (sent, recorded); the CLI, the
  magics and the Python API all call them;
- **abilities, not probes**: what a scheduler can do is read from the ability classes it
  derives from (``isinstance``);
- **one status refresher**: ``refresh`` asks each scheduler once per batch of handles, and the
  job store is written only when a state really changed."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from torchx_nb.runner.attempts import Attempts
from torchx_nb.runner.logs import Logs
from torchx_nb.runner.requests import (
    DEFAULT_SCHEDULER,
    DEFAULT_SESSION,
    ENV_JOB_ID,
    ENV_PARENT_RUN_ID,
    ENV_SESSION_ID,
    AppValidationError,
    NoSuchReplica,
    PreparedRun,
    RunRequest,
)
from torchx_nb.runner.results import Results
from torchx_nb.runner.submitting import Submitting
from torchx_nb.runner.watching import Watching


class Runner(Submitting, Watching, Results, Logs, Attempts):
    """Submits apps to schedulers and answers for them by handle (``sched://session/app_id``):
    one class made of its use cases, each in its own module (``submitting``, ``watching``,
    ``results``, ``logs``, ``attempts``) over the shared ``core``."""

    def __enter__(self) -> Runner:
        return self


def get_runner(
    name: str | None = None,
    component_defaults: Mapping[str, Mapping[str, str]] | None = None,
    **scheduler_params: Any,
) -> Runner:
    """A Runner for the default session ``torchx`` (custom session names are deprecated, as in
    TorchX)."""
    if name:
        warnings.warn("custom session names are deprecated", FutureWarning, stacklevel=2)
    return Runner(name or DEFAULT_SESSION, None, component_defaults, scheduler_params)


__all__ = [
    "DEFAULT_SCHEDULER",
    "DEFAULT_SESSION",
    "ENV_JOB_ID",
    "ENV_PARENT_RUN_ID",
    "ENV_SESSION_ID",
    "AppValidationError",
    "NoSuchReplica",
    "PreparedRun",
    "RunRequest",
    "Runner",
    "get_runner",
]
