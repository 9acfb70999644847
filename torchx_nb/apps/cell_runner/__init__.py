"""The job-side runner: runs a notebook cell, or a whole notebook, as a job's main program and
keeps what it gives back (torchx_nb).

``python .torchx-nb/cell_main.py CELL.py [ARGS...]`` runs the cell's source in a fresh
namespace (with the variables the kernel pushed, ``$TORCHX_NB_PUSH``), as IPython would: the
value of the last statement when it is an expression (and the cell does not end with ``;``)
is the job's result. Rank 0 (``$RANK``, torchrun's) writes it with cloudpickle to
``$TORCHX_OUTPUT_DIR/.torchx-nb/`` with a short repr beside it (none for ``None``: nothing to
show); a rank whose cell raises writes its exception and traceback there and exits 1. With
``$TORCHX_NB_OUTPUT_URL`` (``s3://`` or ``gs://``) the output folder is uploaded there at the
end, with boto3 or google-cloud-storage from the image. ``--notebook NB.ipynb`` runs a whole
notebook under nbclient instead (``notebook``).

One module per concern: ``start`` (the run's folder, sweep values and environment),
``cell`` (running the cell), ``notebook``, ``cancel`` (an array task's cancel mark),
``records`` (the value, the exception, the exit), ``upload``, ``env_record`` (what the job's
Python ran) and ``main``, over ``common``.

Standalone on purpose: this folder ships into images that do not have torchx_nb (as
``.torchx-nb/torchx_nb_cell_runner/``, started by ``.torchx-nb/cell_main.py``), with the
kernel's own cloudpickle beside it (so both sides pickle alike); its modules import only the
standard library and each other (relatively), and an SDK (boto3, google-cloud-storage,
nbclient) only where it is used.
"""

from __future__ import annotations

from typing import Any

from .cancel import CANCEL_MARK, CANCELLED_EXIT, cancel_requested
from .common import OWN
from .main import main
from .upload import upload

#: names loaded on first use: running a cell (pickle, tracebacks, the run's start) is the
#: job's business, and the kernel's CLI imports this package for its constants only
_LAZY = {"missing_import": "cell", "required_imports": "cell", "run": "cell", "grid_point": "start"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    """The package's names with those loaded on first use (IPython's completion, ``help``)."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CANCELLED_EXIT",
    "CANCEL_MARK",
    "OWN",
    "cancel_requested",
    "grid_point",
    "main",
    "missing_import",
    "required_imports",
    "run",
    "upload",
]
