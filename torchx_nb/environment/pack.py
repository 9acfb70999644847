"""The environment layer's bytes: the distributions' files under ``/opt/torchx-nb/env``, then
the two-line hook in the image's own site directory that puts that folder ahead of the
image's site-packages (as a site directory, so ``.pth`` files in it are processed; after the
standard library, so nothing shadows it). Written in a fixed order (the index's
distributions, then those made from the kernel's copies, then the hook), so the same pins
give the same digest whether the first part was packed ahead, while the image was still
being read, or not."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from torchx_nb.workspace.layers import Layer, LayerWriter, _entries_for, _norm_mode, cache_dir

ENV_DIR = "/opt/torchx-nb/env"
HOOK_PTH = "torchx-nb-env.pth"
HOOK_MODULE = "_torchx_nb_env"
HOOK_SOURCE = f'''"""torchx_nb's environment layer: {ENV_DIR} as a site directory, ahead of the
image's own site-packages (after the standard library)."""
import site
import sys

_DIR = {ENV_DIR!r}
if _DIR not in sys.path:
    _n = len(sys.path)
    site.addsitedir(_DIR)
    _new = sys.path[_n:]
    del sys.path[_n:]
    _at = next(
        (i for i, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))),
        len(sys.path),
    )
    sys.path[_at:_at] = _new
'''
_SKIP_TOP = {"bin", "__pycache__", ".lock"}
_SKIP_NAMES = {"direct_url.json", "uv_cache.json"}  # local paths, install times
# gzip's fastest level, by ISA-L when python-isal is installed (it is a dependency): an
# environment is tens to thousands of MB of already dense files (wheels' contents, shared
# objects), where zlib's level 6 costs twenty times the time for a few percent; the level and
# the library are part of what makes the digest reproducible
LEVEL = 1

Entries = list[tuple[str, bytes | Path | None, int, str | None]]


def _files(target: Path) -> dict[str, tuple[bytes | Path | None, int, str | None]]:
    """What an install folder holds for the layer: no scripts, caches, local paths or
    install times (RECORD rewritten without them)."""
    out: dict[str, tuple[bytes | Path | None, int, str | None]] = {}
    for path in sorted(target.rglob("*")):
        rel = path.relative_to(target)
        if rel.parts[0] in _SKIP_TOP or "__pycache__" in rel.parts or rel.name in _SKIP_NAMES:
            continue
        if path.is_symlink():
            out[rel.as_posix()] = (None, 0o777, os.readlink(path))
        elif rel.name == "RECORD" and rel.parent.name.endswith(".dist-info"):
            kept = [
                line
                for line in path.read_text().splitlines()
                if line.split(",", 1)[0].rsplit("/", 1)[-1] not in _SKIP_NAMES
            ]
            out[rel.as_posix()] = ("\n".join(kept).encode() + b"\n", 0o644, None)
        elif path.is_file():
            out[rel.as_posix()] = (path, _norm_mode(path.stat().st_mode), None)
    return out


STALE_SECONDS = 24 * 3600


def sweep_stale(now: float | None = None) -> None:
    """Remove what a build killed midway left behind (a partial layer in the layer cache, a
    head start's or the build's own install folder, a requirements file's resolution
    folder), once it is a day old: nothing that old is still being written."""
    import time

    limit = (now if now is not None else time.time()) - STALE_SECONDS
    leftovers = [
        *cache_dir().glob("*.partial"),
        *Path(tempfile.gettempdir()).glob("torchx-nb-env-*"),  # head starts' too
        *Path(tempfile.gettempdir()).glob("torchx-nb-reqs-*"),
    ]
    for path in leftovers:
        try:
            if path.lstat().st_mtime >= limit:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            continue


class EnvPack:
    """The environment layer being written (into the layer cache's folder, as a partial
    file): install folders added in order, then ``finish`` with the image's site directory.
    ``report(done, total)`` hears the bytes packed so far, from whichever thread packs."""

    def __init__(self, report: Callable[[int, int], None] | None = None) -> None:
        sweep_stale()
        fd, partial = tempfile.mkstemp(dir=cache_dir(), suffix=".partial")
        os.close(fd)
        self.total = 0
        self.report = report
        self._dirs: set[str] = set()
        self._writer = LayerWriter(Path(partial), LEVEL, self._tell, fast=True)

    def _tell(self, done: int) -> None:
        if self.report is not None:
            self.report(min(done, self.total), max(self.total, 1))

    def _add(self, entries: Entries, stop: Callable[[], bool] | None = None) -> bool:
        fresh = [e for e in entries if not (e[1] is None and e[3] is None and e[0] in self._dirs)]
        self._dirs.update(e[0] for e in fresh if e[1] is None and e[3] is None)
        return self._writer.add(fresh, stop)

    def add_folder(self, folder: Path, stop: Callable[[], bool] | None = None) -> bool:
        """Add an install folder's distributions; False when ``stop()`` stopped it."""
        files = _files(folder)
        self.total += sum(p.stat().st_size for p, _, _ in files.values() if isinstance(p, Path))
        self._tell(self._writer.written)
        done = self._add(_entries_for(files, ENV_DIR), stop)
        self._tell(self._writer.written)
        return done

    def finish(self, site_dir: str) -> Layer:
        """The hook in ``site_dir``, and the layer."""
        hooks: dict[str, tuple[bytes | Path | None, int, str | None]] = {
            HOOK_PTH: (f"import {HOOK_MODULE}\n".encode(), 0o644, None),
            f"{HOOK_MODULE}.py": (HOOK_SOURCE.encode(), 0o644, None),
        }
        self._add(_entries_for(hooks, site_dir.strip("/")))
        return self._writer.close()

    def follow(self) -> Iterator[bytes]:
        """The layer's compressed bytes as they are written (see ``LayerWriter.follow``)."""
        return self._writer.follow()

    def abort(self) -> None:
        self._writer.abort()
