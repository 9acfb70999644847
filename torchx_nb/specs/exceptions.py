"""The errors this package raises on purpose, under TorchX's names (importable from
``torchx_nb.specs.api`` as in TorchX); each names what to do in one line."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any


class TorchxNbError(Exception):
    """Base of every error this package raises on purpose; the CLI and magics print it as one line."""


class MalformedAppHandleException(TorchxNbError):
    """An app handle is not of the form ``{scheduler}://{session}/{app_id}``."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"malformed app handle {app_handle!r}: expected SCHEDULER://SESSION/APP_ID,"
            " e.g. local_cwd://torchx/echo-abc123"
        )


class InvalidRunConfigException(TorchxNbError, ValueError):
    """A scheduler option is missing, of the wrong type or otherwise invalid. A ValueError
    too: where TorchX raised ValueError for a bad option (gcp_batch's GPU count, a role
    without resources), ``except ValueError`` still catches it."""

    def __init__(self, invalid_reason: str, cfg_key: str, cfg: Mapping[str, Any] | None = None):
        super().__init__(invalid_reason)
        self.cfg_key = cfg_key
        self.cfg = dict(cfg or {})


class UnknownAppException(TorchxNbError):
    """The scheduler has no record of the app."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"unknown app {app_handle!r}: the scheduler has no record of it"
            " (check the handle with `torchx-nb list`)"
        )


class UnknownSchedulerException(TorchxNbError):
    """No scheduler is registered under that name."""

    def __init__(self, scheduler: str, known: list[str] | None = None) -> None:
        hint = ""
        if known:
            close = difflib.get_close_matches(scheduler, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            hint += f" (available: {', '.join(sorted(known))})"
        super().__init__(f"unknown scheduler {scheduler!r}{hint}")


class JobStoreError(TorchxNbError):
    """The job store cannot be read or written; the message names the file and the fix."""


class NoResult(TorchxNbError):
    """The job ended without a result (killed, out of memory, cancelled, no output store)."""


class RemoteTraceback(Exception):
    """The job's traceback, set as the cause of the exception ``result()`` raises, so IPython
    (and Python) show it above the kernel's own, as ``concurrent.futures`` does."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class BadParameter(ValueError):
    """A parameter that cannot run: shown as ``-p NAME: why`` (the CLI's and Python's words);
    the REST API names its field, ``parameters.NAME: why``."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"-p {name}: {why}")
        self.name, self.why = name, why
