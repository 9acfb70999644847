"""torchx_nb: a notebook cell, with its folder, becomes a TorchX-style job; the notebook watches it.

Importing this package is cheap: it loads no cloud SDK, no pandas and no widgets. ``%load_ext
torchx_nb`` registers the ``%%torchx`` magics."""

from __future__ import annotations

import os
from typing import Any

from torchx_nb.version import __version__

IMAGE: str = os.environ.get("TORCHX_NB_IMAGE", "python:3.11-slim")


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%%torchx`` / ``%torchx`` magics (``%load_ext torchx_nb``)."""
    from torchx_nb.notebook.magics import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from torchx_nb.notebook.magics import unload_ipython_extension as _unload

    _unload(ipython)


def __getattr__(name: str) -> Any:
    """``torchx_nb.run_notebook`` (it loads pandas and the runner) and
    ``torchx_nb.checkpoint``, imported on first use."""
    if name == "checkpoint":  # the module is job_checkpoint: a submodule would shadow it
        from torchx_nb.job_checkpoint import checkpoint

        return checkpoint
    if name == "run_notebook":
        from torchx_nb.notebook.notebook_jobs import run_notebook

        return run_notebook
    raise AttributeError(f"module 'torchx_nb' has no attribute {name!r}")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the built JupyterLab extension lies (for ``jupyter labextension develop``)."""
    return [{"src": "labextension", "dest": "torchx-nb"}]


__all__ = [
    "IMAGE",
    "__version__",
    "checkpoint",
    "load_ipython_extension",
    "run_notebook",
    "unload_ipython_extension",
]
