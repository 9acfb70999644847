"""Opening a workspace file for packing without following a symlink swapped in after the
workspace was listed (a file, or any folder on its path)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[tuple[IO[bytes], int]]:
    """Open ``path`` for packing only if it is still a regular file: a file swapped for a
    symlink (or a fifo, a device) after the workspace was listed would otherwise ship the
    link's target, e.g. ``~/.ssh/id_rsa``."""
    from torchx_nb.specs.api import TorchxNbError

    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        if os.open in os.supports_dir_fd and path.is_absolute():
            # the workspace root is resolved: no component of a shipped path is a symlink
            dir_fd = os.open(path.anchor, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for part in path.parts[1:-1]:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=dir_fd)
                    os.close(dir_fd)
                    dir_fd = nxt
                fd = os.open(path.name, os.O_RDONLY | nofollow | os.O_NONBLOCK, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
        else:
            fd = os.open(path, os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise TorchxNbError(
            f"{path} changed while the workspace was packed ({e.strerror}); run again"
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TorchxNbError(
                f"{path} changed while the workspace was packed (no longer a regular file);"
                " run again"
            )
        yield f, st.st_size
