"""Real Jupyter kernels for tests, run by nbclient over IPC sockets in a short private folder.

Over TCP, jupyter_client picks free ports by binding and closing them, and the kernel binds
them later: with a dozen kernels starting at once in parallel workers, another process took
one in between once ("Address already in use", the kernel died before kernel_info). IPC
socket files cannot be taken that way — and the job's own notebook runner uses them too."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config


def execute_in_kernel(
    nb: nbformat.NotebookNode,
    cwd: Path,
    *,
    kernel_name: str = "python3",
    timeout: int = 180,
    allow_errors: bool = False,
) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` in a real ``kernel_name`` kernel started in ``cwd``; with
    ``allow_errors`` a cell that raises keeps its error output and the next cells run."""
    # a short path: a socket's path is at most 107 bytes, pytest's tmp_path can be long
    sockets = tempfile.mkdtemp(prefix="tnb-k")
    try:
        NotebookClient(
            nb,
            config=Config({"KernelManager": {"transport": "ipc", "ip": f"{sockets}/k"}}),
            timeout=timeout,
            kernel_name=kernel_name,
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(cwd)}},
        ).execute()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    return nb
