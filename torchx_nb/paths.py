"""Where torchx_nb keeps its files: the job store and local_cwd's app folders."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "TORCHX_NB_DATA_DIR"


def data_dir() -> Path:
    """``$TORCHX_NB_DATA_DIR``, else ``torchx_nb/`` under the user's Jupyter data dir."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "torchx_nb"
