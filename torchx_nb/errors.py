"""Turning any exception into the one line the CLI and the magics print instead of a traceback."""

from __future__ import annotations

DEBUG_ENV = "TORCHX_NB_DEBUG"

_EXPECTED = (
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    PermissionError,
    NotImplementedError,
)


def one_line(e: BaseException) -> str:
    """A single line saying what went wrong; unexpected errors name the debug switch."""
    from torchx_nb.specs.api import TorchxNbError

    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    text = " ".join(text.split())
    if isinstance(e, TorchxNbError):
        return text
    if isinstance(e, _EXPECTED):
        return text or type(e).__name__
    return f"{type(e).__name__}: {text} (set {DEBUG_ENV}=1 to see the traceback)"
