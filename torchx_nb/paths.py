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


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) readable by the user only (0700), and tighten it
    if it already exists and is ours: job state holds env values, logs and requests."""
    p = Path(path)
    p.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = p.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        os.chmod(p, 0o700)
    return p
