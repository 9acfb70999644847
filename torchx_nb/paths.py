"""Where torchx_nb keeps its files (the job store, local_cwd's app folders, caches), and the rule
that keeps them private: folders 0700 and files 0600, owned by the user. A folder someone else
owns, or one others may write to, is refused rather than used: another user could read the
jobs, or plant state (a ``state.json`` naming a process for ``list`` to kill)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from torchx_nb.specs.exceptions import UnsafePathError as UnsafePathError

DATA_DIR_ENV = "TORCHX_NB_DATA_DIR"
JOBSTORE_ENV = "TORCHX_NB_JOBSTORE"
# A folder holding this file is one of our log folders (local_cwd's log_dir, a Slurm job
# folder): it never ships in a workspace, wherever it lies.
LOG_MARKER = ".torchx-nb-logs"


def data_dir() -> Path:
    """``$TORCHX_NB_DATA_DIR``, else ``torchx_nb/`` under the user's Jupyter data dir."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "torchx_nb"


def jobstore_path() -> Path:
    """``$TORCHX_NB_JOBSTORE``, else ``jobs.sqlite`` in the data dir."""
    explicit = os.environ.get(JOBSTORE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return data_dir() / "jobs.sqlite"


def check_private(path: str | os.PathLike[str], st: os.stat_result | None = None) -> None:
    """Refuse ``path`` unless the user owns it and nobody else may write to it."""
    st = st or os.lstat(path)
    uid = os.getuid()
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            f"{path} is a symlink; torchx_nb keeps its state in real folders only: remove it,"
            f" or set {DATA_DIR_ENV} to a folder of your own"
        )
    if st.st_uid != uid:
        raise UnsafePathError(
            f"{path} belongs to another user (uid {st.st_uid}); torchx_nb will not keep its"
            f" state there: set {DATA_DIR_ENV} to a folder of your own"
        )
    if st.st_mode & 0o022:
        raise UnsafePathError(
            f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}), so its contents"
            f" cannot be trusted: check them, then chmod 700 {path} (or set {DATA_DIR_ENV} to a"
            " new folder)"
        )


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) readable by the user only (0700). An existing
    folder of the user's that others may read is tightened; one that another user owns or
    others may write to is refused (``UnsafePathError``)."""
    p = Path(path)
    p.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(p)
    check_private(p, st)
    if st.st_mode & 0o077:
        os.chmod(p, 0o700)
    return p


def state_dir(*parts: str) -> Path:
    """A private folder under the data dir (created 0700), every level checked as
    ``private_dir`` does: where jobs' state, logs and caches live."""
    path = private_dir(data_dir())
    for part in parts:
        path = private_dir(path / part)
    return path


def mark_log_folder(path: str | os.PathLike[str]) -> None:
    """Create ``path`` if needed and mark it as ours, so no workspace ships it."""
    folder = Path(path)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    marker = folder / LOG_MARKER
    if not marker.exists():
        marker.write_text("torchx_nb logs: this folder never ships with a job\n")


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
