"""Reproducible image layers: the same files give the same digest on any machine.

Entries are sorted, owned by root, dated 0 (or ``SOURCE_DATE_EPOCH``), modes normalised to 0644 /
0755, and gzip carries no name or time. A workspace layer is cached by the fingerprint of its
files (path, size, mtime, mode), so an unchanged workspace is neither re-read nor re-compressed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from torchx_nb.workspace.collect import WorkspaceFiles
from torchx_nb.workspace.safe_open import open_regular

OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_TELL_EVERY = 4 << 20
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


@dataclass(frozen=True)
class Layer:
    """A compressed layer blob on disk and its two digests."""

    path: Path
    digest: str
    diff_id: str
    size: int
    media_type: str = OCI_LAYER

    def with_media_type(self, media_type: str) -> Layer:
        return Layer(self.path, self.digest, self.diff_id, self.size, media_type)


class _HashingWriter(io.RawIOBase):
    """Counts and hashes what passes through on its way to ``inner``."""

    def __init__(self, inner: IO[bytes], on_bytes: Callable[[int], None] | None = None) -> None:
        self.inner = inner
        self.sha = hashlib.sha256()
        self.size = 0
        self.on_bytes = on_bytes
        self._told = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.sha.update(b)
        self.size += len(b)
        self.inner.write(b)
        if self.on_bytes is not None and self.size - self._told >= _TELL_EVERY:
            self._told = self.size
            self.on_bytes(self.size)
        return len(b)


def _fast_deflate() -> Any:
    """ISA-L's deflate (python-isal: six times zlib's speed at its fastest level, for about
    the same size), or zlib's when it is not installed."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib
    return isal_zlib


class _BlockGzip(io.RawIOBase):
    """gzip compressed in independent blocks on a few threads, as pigz does (zlib and ISA-L
    let go of the GIL while they compress): each block ends on a byte boundary (a sync
    flush), so the blocks joined in order make one deflate stream, and the same bytes and
    level always give the same output. The header carries no name and no time. ``fast``:
    ISA-L's level 1 instead of zlib's ``level``."""

    BLOCK = 1 << 20

    def __init__(self, out: IO[bytes], level: int, fast: bool = False) -> None:
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        self.out = out
        self.codec = _fast_deflate() if fast else zlib
        if fast:
            level = 1
        self.level = level
        self.workers = min(4, os.cpu_count() or 1)
        self.pool: ThreadPoolExecutor | None = None
        self.pending: deque[Future[bytes]] = deque()
        self.buf = bytearray()
        self.crc = 0
        self.size = 0
        xfl = b"\x04" if level == 1 else b"\x02" if level == 9 else b"\x00"
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + xfl + b"\xff")

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.buf += b
        while len(self.buf) >= self.BLOCK:
            self._submit(bytes(self.buf[: self.BLOCK]))
            del self.buf[: self.BLOCK]
        return len(b)

    def _submit(self, block: bytes) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.crc = zlib.crc32(block, self.crc)
        self.size += len(block)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="torchx-nb-gzip")
        self.pending.append(self.pool.submit(_deflate_block, self.codec, block, self.level))
        while len(self.pending) > 2 * self.workers:
            self.out.write(self.pending.popleft().result())

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.buf:
                self._submit(bytes(self.buf))
                self.buf.clear()
            while self.pending:
                self.out.write(self.pending.popleft().result())
            self.out.write(zlib.compressobj(self.level, zlib.DEFLATED, -15).flush())
            self.out.write(struct.pack("<II", self.crc, self.size & 0xFFFFFFFF))
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)
            super().close()


def _deflate_block(codec: Any, block: bytes, level: int) -> bytes:
    c = codec.compressobj(level, codec.DEFLATED, -15)
    return c.compress(block) + c.flush(codec.Z_SYNC_FLUSH)


def _mtime() -> int:
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.size = size
    ti.linkname = link
    ti.mtime = _mtime()
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _parents(paths: Iterable[str]) -> list[str]:
    dirs: set[str] = set()
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs)


class LayerAborted(Exception):
    """The layer being followed was given up."""


class _Notifying(io.RawIOBase):
    """A file written straight through (no buffer), telling ``cond``'s waiters how much it
    holds."""

    def __init__(self, path: Path, cond: threading.Condition) -> None:
        self.f = open(path, "wb", buffering=0)  # noqa: SIM115 - closed by close()
        self.cond = cond
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        view = memoryview(b)
        while view:
            view = view[self.f.write(view) or 0 :]
        with self.cond:
            self.size += len(b)
            self.cond.notify_all()
        return len(b)

    def close(self) -> None:
        self.f.close()
        super().close()


class LayerWriter:
    """A gzip'd tar layer written in parts: entries added in one or more calls (one may come
    from another thread, before the rest of the layer is known), then ``close()`` gives the
    layer. The same entries in the same order at the same level give the same bytes. Its
    compressed bytes can be followed as they are written (``follow``), to upload the layer
    while it is being made."""

    def __init__(
        self,
        dest: Path,
        level: int = 6,
        on_bytes: Callable[[int], None] | None = None,
        fast: bool = False,
    ) -> None:
        self.dest = dest
        self._cond = threading.Condition()
        self._state = "open"
        self._aborting = False
        self._raw = _Notifying(dest, self._cond)
        self._compressed = _HashingWriter(self._raw)  # type: ignore[arg-type]
        self._gz = _BlockGzip(self._compressed, level, fast)  # type: ignore[arg-type]
        self._plain = _HashingWriter(self._gz, on_bytes)  # type: ignore[arg-type]
        self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
            fileobj=self._plain, mode="w|", format=tarfile.PAX_FORMAT
        )

    @property
    def written(self) -> int:
        """The tar's bytes so far."""
        return self._plain.size

    def add(
        self,
        entries: Iterable[tuple[str, bytes | Path | None, int, str | None]],
        stop: Callable[[], bool] | None = None,
    ) -> bool:
        """Add ``(path, content, mode, link)`` entries (content a Path to stream, bytes, or
        None for a directory); False when ``stop()`` said to stop before the last one."""
        tar = self._tar
        for name, content, mode, link in entries:
            if stop is not None and stop():
                return False
            if content is None and link is None:
                tar.addfile(_info(name + "/", tarfile.DIRTYPE, 0o755))
            elif link is not None:
                tar.addfile(_info(name, tarfile.SYMTYPE, 0o777, link=link))
            elif isinstance(content, Path):
                with open_regular(content) as (f, size):
                    tar.addfile(_info(name, tarfile.REGTYPE, mode, size), f)
            else:
                data = content or b""
                tar.addfile(_info(name, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
        return True

    def close(self) -> Layer:
        self._tar.close()
        self._gz.close()
        self._raw.close()
        self._end("closed")
        return Layer(
            self.dest,
            "sha256:" + self._compressed.sha.hexdigest(),
            "sha256:" + self._plain.sha.hexdigest(),
            self._compressed.size,
        )

    def abort(self) -> None:
        """Give it up: the file is removed. Once only: a second call (a cancel racing the
        writer's own way out) does nothing."""
        with self._cond:
            if self._state != "open" or self._aborting:
                return
            self._aborting = True
        with contextlib.suppress(OSError, ValueError):  # the last bytes are not wanted
            self._gz.close()
        self._raw.close()
        self._end("aborted")
        self.dest.unlink(missing_ok=True)

    def _end(self, state: str) -> None:
        with self._cond:
            self._state = state
            self._cond.notify_all()

    def follow(self, chunk: int = 5 << 20) -> Iterator[bytes]:
        """The compressed bytes, as they are written: pieces of ``chunk`` bytes (the last
        one shorter; 5 MiB is the smallest part ECR takes but the last), until the layer is
        closed; ``LayerAborted`` when it is given up."""
        fd = os.open(self.dest, os.O_RDONLY)
        offset = 0
        try:
            while True:
                with self._cond:
                    while self._state == "open" and self._raw.size - offset < chunk:
                        self._cond.wait()
                    if self._state == "aborted":
                        raise LayerAborted(str(self.dest))
                    size, final = self._raw.size, self._state == "closed"
                while size - offset >= chunk or (final and offset < size):
                    data = os.pread(fd, min(chunk, size - offset), offset)
                    offset += len(data)
                    yield data
                if final:
                    return
        finally:
            os.close(fd)


def _write_layer(
    entries: list[tuple[str, bytes | Path | None, int, str | None]],
    dest: Path,
    level: int = 6,
    on_bytes: Callable[[int], None] | None = None,
    fast: bool = False,
) -> Layer:
    """Write ``(path, content, mode, link)`` entries as a gzip'd tar at ``dest`` (gzip
    ``level``, or ISA-L's fastest when ``fast``: the same level gives the same bytes);
    ``on_bytes`` hears the tar's size so far, every few MB."""
    writer = LayerWriter(dest, level, on_bytes, fast)
    try:
        writer.add(entries)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def _norm_mode(mode: int) -> int:
    return 0o755 if mode & 0o111 else 0o644


def _entries_for(
    paths: dict[str, tuple[bytes | Path | None, int, str | None]], prefix: str
) -> list[tuple[str, bytes | Path | None, int, str | None]]:
    prefix = prefix.strip("/")
    full = {f"{prefix}/{p}" if prefix else p: v for p, v in paths.items()}
    out: list[tuple[str, bytes | Path | None, int, str | None]] = [
        (d, None, 0o755, None) for d in _parents(full) if d not in full
    ]
    out += [(name, *full[name]) for name in sorted(full)]
    out.sort(key=lambda e: e[0])
    return out


def cache_dir() -> Path:
    from torchx_nb.paths import data_dir, private_dir

    return private_dir(data_dir() / "layers")


def build_layer(
    files: WorkspaceFiles, dest_prefix: str = "workspace", cache: Path | None = None
) -> Layer:
    """The workspace as one layer under ``dest_prefix``; reused from the cache when the files'
    fingerprint is unchanged."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{files.fingerprint()}\0{dest_prefix}\0{_mtime()}".encode()).hexdigest()
    cached = cache / f"ws-{key}.tar.gz"
    meta = cache / f"ws-{key}.json"
    found = read_cached(cached, meta)
    if found is not None:
        return found
    paths: dict[str, tuple[bytes | Path | None, int, str | None]] = {
        f.path: (None if f.link else files.root / f.path, _norm_mode(f.mode), f.link)
        for f in files.files
    }
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".partial")
    os.close(fd)
    layer = _write_layer(_entries_for(paths, dest_prefix), Path(tmp))
    return keep_cached(layer, cached, meta)


def read_cached(cached: Path, meta: Path) -> Layer | None:
    """A cached layer, when both its file and its description are there and whole (a
    damaged description, or a file of another size, is ignored: the layer is made again)."""
    import json

    try:
        m = json.loads(meta.read_text())
        layer = Layer(cached, str(m["digest"]), str(m["diff_id"]), int(m["size"]))
        if cached.stat().st_size == layer.size:
            return layer
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return None


def keep_cached(layer: Layer, cached: Path, meta: Path) -> Layer:
    """Move a just-written layer to ``cached`` and write its description, each atomically."""
    import json

    from torchx_nb.paths import write_private

    os.replace(layer.path, cached)
    doc = {"digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size}
    write_private(meta, json.dumps(doc))
    return Layer(cached, layer.digest, layer.diff_id, layer.size)


def build_context(files: WorkspaceFiles, extra: Mapping[str, bytes]) -> Layer:
    """A gzip'd build context of the workspace files plus ``extra`` (the cell), at the root, in
    a temporary file the caller removes."""
    paths: dict[str, tuple[bytes | Path | None, int, str | None]] = {
        f.path: (None if f.link else files.root / f.path, _norm_mode(f.mode), f.link)
        for f in files.files
    }
    paths.update({p: (data, 0o644, None) for p, data in extra.items()})
    fd, tmp = tempfile.mkstemp(suffix=".context.tar.gz")
    os.close(fd)
    return _write_layer(_entries_for(paths, ""), Path(tmp))


def build_file_layer(
    contents: Mapping[str, bytes], dest_prefix: str = "workspace", directory: Path | None = None
) -> Layer:
    """A small layer of in-memory files (e.g. the cell script)."""
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, tuple[bytes | Path | None, int, str | None]] = {
        p: (data, 0o644, None) for p, data in contents.items()
    }
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tar.gz")
    os.close(fd)
    return _write_layer(_entries_for(paths, dest_prefix), Path(tmp))
