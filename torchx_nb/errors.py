"""Turning any exception into the one line the CLI and the magics print instead of a traceback."""

from __future__ import annotations

import re

DEBUG_ENV = "TORCHX_NB_DEBUG"

_EXPECTED = (
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    PermissionError,
    NotImplementedError,
)


# module → the extra that installs it
_EXTRAS = {
    "boto3": "aws_batch",
    "botocore": "aws_batch",
    "docker": "docker",
    "google": "gcp_batch",
    "kubernetes": "kubernetes",
    "IPython": "notebook",
    "ipywidgets": "notebook",
    "ipykernel": "notebook",
    "pandas": "notebook",
    "traitlets": "notebook",
}


def missing_extra(e: BaseException) -> str | None:
    """For a missing optional dependency, the line that says which extra installs it."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    top = e.name.split(".", 1)[0]
    extra = _EXTRAS.get(top)
    if extra is None:
        return None
    return f"{top} is not installed; install it with: pip install 'torchx_nb[{extra}]'"


def one_line(e: BaseException) -> str:
    """A single line saying what went wrong, secrets masked; unexpected errors name the debug
    switch."""
    from torchx_nb.redact import redact_text
    from torchx_nb.specs.api import TorchxNbError

    extra = missing_extra(e)
    if extra is not None:
        return extra
    if isinstance(e, re.error):
        return redact_text(f"bad regular expression {e.pattern!r}: {e.msg}")

    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    text = redact_text(" ".join(text.split()))
    if isinstance(e, TorchxNbError):
        return text
    if isinstance(e, _EXPECTED):
        return text or type(e).__name__
    return f"{type(e).__name__}: {text} (set {DEBUG_ENV}=1 to see the traceback)"


def current_folder() -> str:
    """The current folder, or one line saying it is gone (deleted or moved while we ran)."""
    import os

    from torchx_nb.specs.api import TorchxNbError

    try:
        return os.getcwd()
    except FileNotFoundError:
        raise TorchxNbError(
            "the current folder no longer exists (it was deleted or moved): cd to an existing"
            " folder and run again"
        ) from None


def positive_float(text: str) -> float:
    """An argparse type for durations: a number of seconds above 0."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type for counts: a whole number of at least 1."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def regex_arg(text: str) -> str:
    """An argparse type for ``--regex``: ``text`` if it compiles, else a one-line usage error."""
    import argparse

    from torchx_nb.user_regex import BadRegex, compile_regex

    try:
        compile_regex(text)
    except BadRegex as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text
