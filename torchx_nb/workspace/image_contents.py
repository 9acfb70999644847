"""What a base image already has for Python, read from its layers without running it: the
Python version, the site directories, the installed distributions and the platform (CPU and
libc) that wheels must be built for. Read through the registry (no daemon) or from the
daemon's ``docker save`` stream, one layer at a time (memory stays bounded however large the
image), and cached per image digest, so a 10 GB base is read once."""

from __future__ import annotations

import contextlib
import io
import json
import re
import tarfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import IO, Any

from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_python import PYTHON_NAME, ImageFiles, find_interpreter

_PY_DIR = re.compile(r"^(?P<prefix>(?:[^/]+/)*?)lib/python(?P<ver>3\.\d+)/os\.py$")
_DIST = re.compile(
    r"^(?:[^/]+/)*?lib/python3(?:\.\d+)?/(?:site|dist)-packages/"
    r"(?P<dir>[^/]+\.(?:dist-info|egg-info))(?P<rest>/(?:METADATA|PKG-INFO|RECORD))?$"
)
_SITE = re.compile(r"^(?P<dir>(?:[^/]+/)*?lib/python3(?:\.\d+)?/(?:site|dist)-packages)/?$")
_OLD_GLIBC = re.compile(r"(?:^|/)libc-(2\.\d+)\.so$")
_META_LIMIT = 64 * 1024
_READERS = 4  # layers read at once through a registry
SCAN_VERSION = 6  # bump when what a scan records changes (invalidates the cache)


def normalize(name: str) -> str:
    """A distribution's name as indexes compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class ImageContents:
    """The Python side of an image (``python`` None when it has no Python 3)."""

    python: str | None
    prefix: str
    site_dirs: tuple[str, ...]
    distributions: dict[str, str] = field(default_factory=dict)
    arch: str = "x86_64"
    libc: str = "glibc"
    glibc: str | None = None
    python_path: str | None = None  # the command a job's ``python`` runs (/opt/venv/bin/python)
    python_why: str = ""  # how it was found; when ``python`` is None, what was tried
    records: dict[str, str] = field(default_factory=dict)  # name -> record_identity
    python_full: str | None = None  # X.Y.Z, when the image says it (its PYTHON_VERSION)

    @property
    def platform(self) -> str:
        """uv's ``--python-platform`` for this image: manylinux at the image's glibc (2.17
        when it cannot be told), or musllinux."""
        if self.libc == "musl":
            return f"{self.arch}-unknown-linux-musl"
        major, _, minor = (self.glibc or "2.17").partition(".")
        return f"{self.arch}-manylinux_{major}_{minor}"

    @property
    def site_dir(self) -> str | None:
        """The site directory whose ``.pth`` files the image's Python processes at start:
        the virtualenv's or the prefix's site-packages, else Debian's ``dist-packages``."""
        return self.site_dirs[0] if self.site_dirs else None

    def describe_python(self) -> str:
        """One line: which Python a job runs on this image, and why that one."""
        if self.python is None:
            return self.python_why or "no Python 3 in the image"
        return f"{self.python_path} ({self.python_why}); packages go to {self.site_dir}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageContents:
        data = dict(data)
        data["site_dirs"] = tuple(data.get("site_dirs", ()))
        return cls(**data)


class _LayerScan:
    """What one layer holds that matters here, in its own order (whiteouts included), so that
    layers can be read apart (in parallel, or as ``docker save`` streams them) and applied
    in the image's order afterwards."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    def member(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        name = info.name.lstrip("./")
        folder, _, base = name.rpartition("/")
        if base == ".wh..wh..opq":
            self.events.append(("drop", folder, None))
        elif base.startswith(".wh."):
            self.events.append(("drop", f"{folder}/{base[4:]}".lstrip("/"), None))
        elif info.issym() and (name.count("/") < 3 or PYTHON_NAME.match(base)):
            self.events.append(("link", name.rstrip("/"), info.linkname))
        elif (
            PYTHON_NAME.match(base)
            and folder.rpartition("/")[2] == "bin"
            and (info.isfile() or info.islnk())
        ):
            self.events.append(("exe", name, None))
        elif base == "pyvenv.cfg" and info.isfile():
            self.events.append(("venv", folder, _pyvenv(tar, info)))
        elif (base == "conda-meta" and info.isdir()) or name.endswith("conda-meta/history"):
            self.events.append(("conda", name.rstrip("/").rsplit("conda-meta", 1)[0], None))
        elif m := _PY_DIR.match(name):
            self.events.append(("python", m["prefix"], m["ver"]))
        elif m := _SITE.match(name):
            if info.isdir():
                self.events.append(("site", m["dir"], None))
        elif (m := _DIST.match(name)) and m["rest"] == "/RECORD":
            if info.isfile():
                text = _read_head(tar, info, 64 * 1024 * 1024).decode("utf-8", "replace")
                self.events.append(("record", name.rsplit("/", 1)[0], record_identity(text)))
        elif m := _DIST.match(name):
            if info.isfile() and (m["rest"] or m["dir"].endswith(".egg-info")):
                found = _name_version(tar, info)
                if found:
                    key = name.rsplit("/", 1)[0] if m["rest"] else name
                    self.events.append(("dist", key, found))
        elif "/ld-musl-" in f"/{name}":
            self.events.append(("musl", "", None))
        elif name == "var/lib/dpkg/status" and info.isfile():
            self.events.append(("glibc", "", _dpkg_glibc(tar, info)))
        elif m := _OLD_GLIBC.search(name):
            self.events.append(("glibc", "", m[1]))


def _scan_layer(stream: IO[bytes] | io.RawIOBase) -> _LayerScan:
    """One layer's stream (tar, gzip'd or not) read through once; gzip is undone by ISA-L on
    a thread of its own when python-isal is there (twice zlib's speed, and the tar's parsing
    goes on beside it). A damaged stream is a ``tarfile.ReadError``, whichever undid it."""
    layer = _LayerScan()
    buffered = io.BufferedReader(stream, 1 << 20)  # type: ignore[type-var]
    try:
        with contextlib.ExitStack() as stack:
            tar = None
            if buffered.peek(2)[:2] == b"\x1f\x8b":
                with contextlib.suppress(ImportError):
                    from isal import igzip_threaded

                    plain = stack.enter_context(igzip_threaded.open(buffered, "rb", threads=1))
                    tar = stack.enter_context(tarfile.open(fileobj=plain, mode="r|"))
            if tar is None:
                tar = stack.enter_context(tarfile.open(fileobj=buffered, mode="r|*"))
            for info in tar:
                layer.member(tar, info)
    except (OSError, EOFError, ValueError) as e:  # a damaged gzip stream, as ISA-L says it
        raise tarfile.ReadError(str(e)) from e
    return layer


class _Scan:
    """What the layers hold, applied in order (later layers and whiteouts win)."""

    def __init__(self) -> None:
        self.pythons: dict[str, str] = {}  # prefix -> version
        self.dists: dict[str, tuple[str, str]] = {}  # path -> (name, version)
        self.records: dict[str, str] = {}  # dist-info path -> record_identity
        self.sites: set[str] = set()
        self.musl = False
        self.glibc: str | None = None
        self.links: dict[str, str] = {}
        self.exes: set[str] = set()
        self.venvs: dict[str, dict[str, str]] = {}
        self.condas: set[str] = set()

    def _drop(self, path: str) -> None:
        def under(key: str) -> bool:
            return key == path or key.startswith(path + "/")

        for table in (self.dists, self.records, self.links, self.venvs):
            for key in [k for k in table if under(k)]:
                del table[key]
        self.exes -= {e for e in self.exes if under(e)}  # in place: apply holds the sets
        self.condas -= {c for c in self.condas if under(c.rstrip("/") + "/conda-meta")}
        for key in [p for p in self.pythons if f"{p}lib/python{self.pythons[p]}".startswith(path)]:
            del self.pythons[key]
        self.sites -= {s for s in self.sites if under(s)}

    def apply(self, layer: _LayerScan) -> None:
        # what an event of each kind records: the value of a path, or the path itself
        tables: dict[str, dict[str, Any]] = {
            "python": self.pythons,
            "dist": self.dists,
            "record": self.records,
            "link": self.links,
            "venv": self.venvs,
        }
        members = {"site": self.sites, "exe": self.exes}
        for kind, path, value in layer.events:
            if kind == "drop":
                self._drop(path)
            elif kind in tables:
                tables[kind][path] = value
            elif kind in members:
                members[kind].add(path)
            elif kind == "conda":
                self.condas.add(path.rstrip("/"))
            elif kind == "musl":
                self.musl = True
            elif kind == "glibc":
                self.glibc = value or self.glibc

    def result(self, arch: str, env: list[str] | None = None) -> ImageContents:
        libc = "musl" if self.musl else "glibc"
        files = ImageFiles(
            self.links, frozenset(self.exes), self.pythons, self.venvs, frozenset(self.condas)
        )
        found = find_interpreter(files, env)
        if isinstance(found, str):
            why = found if self.pythons or self.exes else ""
            return ImageContents(None, "", (), {}, arch, libc, self.glibc, None, why)
        candidates = found.site_candidates
        sites = tuple("/" + c for c in candidates if c in self.sites)
        if not sites:
            sites = ("/" + candidates[0],)
        dists: dict[str, str] = {}
        records: dict[str, str] = {}
        for path, (name, version) in sorted(self.dists.items()):
            if path.rsplit("/", 1)[0] in candidates:
                dists.setdefault(normalize(name), version)
                if self.records.get(path):
                    records.setdefault(normalize(name), self.records[path])
        return ImageContents(
            found.version,
            found.prefix,
            sites,
            dists,
            arch,
            libc,
            self.glibc,
            found.command,
            found.why,
            records,
            _declared_full(env, found.version),
        )


def _declared_full(env: list[str] | None, python: str) -> str | None:
    """The full version of ``python`` (``3.11``) its config declares (``PYTHON_VERSION``, as
    the official python images set it), when it is that Python's; else None."""
    for item in env or []:
        key, _, value = item.partition("=")
        if key == "PYTHON_VERSION" and re.fullmatch(re.escape(python) + r"\.\d+", value.strip()):
            return value.strip()
    return None


# files an installer writes (uv adds uv_cache.json for a local wheel), not the wheel's
NOT_CONTENTS = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json"}


def record_rows(text: str) -> list[tuple[str, str]]:
    """A ``RECORD``'s files inside the site directory with their digests, in its order:
    scripts outside it (their first line names the interpreter), rows without a digest, byte
    code and the installer's own files left out."""
    import csv

    rows = []
    for row in csv.reader(text.splitlines()):
        if len(row) < 2 or not row[1] or row[0].startswith(("../", "/")):
            continue
        path = row[0]
        if "__pycache__/" in path or path.endswith(".pyc"):
            continue
        if path.rsplit("/", 1)[-1] in NOT_CONTENTS:
            continue
        rows.append((path, row[1]))
    return rows


def record_identity(text: str) -> str:
    """A distribution's installed files by their digests, as its ``RECORD`` lists them
    (``record_rows``: the same files give the same value in an image and in a kernel). Empty
    when RECORD gives no digest."""
    import hashlib

    lines = [f"{path}\0{digest}\n" for path, digest in record_rows(text)]
    if not lines:
        return ""
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


def _pyvenv(tar: tarfile.TarFile, info: tarfile.TarInfo) -> dict[str, str]:
    """A virtualenv's ``pyvenv.cfg`` (``key = value`` lines)."""
    text = _read_head(tar, info, 16 * 1024).decode("utf-8", "replace")
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _read_head(tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int) -> bytes:
    f = tar.extractfile(info)
    return f.read(limit) if f else b""


def _name_version(tar: tarfile.TarFile, info: tarfile.TarInfo) -> tuple[str, str] | None:
    head = _read_head(tar, info, _META_LIMIT).decode("utf-8", "replace")
    headers = HeaderParser().parsestr(head.split("\n\n", 1)[0])
    name, version = headers.get("Name"), headers.get("Version")
    return (name.strip(), version.strip()) if name and version else None


def _dpkg_glibc(tar: tarfile.TarFile, info: tarfile.TarInfo) -> str | None:
    text = _read_head(tar, info, 32 * 1024 * 1024).decode("utf-8", "replace")
    for block in text.split("\n\n"):
        if re.search(r"^Package: libc6$", block, re.M):
            m = re.search(r"^Version: (\d+\.\d+)", block, re.M)
            if m:
                return m[1]
    return None


def scan_layers(
    layers: Iterable[IO[bytes]], arch: str = "x86_64", env: list[str] | None = None
) -> ImageContents:
    """The Python side of an image from its layer streams (tar, gzip'd or not), in order;
    ``env``: its config's ``Env`` (where ``PATH`` says which ``python`` runs)."""
    return _combine((_scan_layer(stream) for stream in layers), arch, env)


def _combine(layers: Iterable[_LayerScan], arch: str, env: list[str] | None) -> ImageContents:
    scan = _Scan()
    for layer in layers:
        scan.apply(layer)
    return scan.result(arch, env)


def _arch(config: dict[str, Any]) -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(
        str(config.get("architecture") or "amd64"), str(config.get("architecture"))
    )


def _cache_file(key: str) -> Path:
    from torchx_nb.paths import data_dir, private_dir

    safe = re.sub(r"[^A-Za-z0-9]", "_", key)[:100]
    return private_dir(data_dir() / "images") / f"{safe}.v{SCAN_VERSION}.json"


def cached(key: str, read: Any) -> ImageContents:
    """The image's contents from the cache under ``key`` (its digest), else ``read()``'s."""
    path = _cache_file(key)
    try:
        return ImageContents.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    contents: ImageContents = read()
    from torchx_nb.paths import write_private

    write_private(path, json.dumps(contents.to_json()))
    return contents


def from_registry(client: Any, ref: Any) -> ImageContents:
    """Read an image through its registry (``RegistryClient``, ``ImageRef``), no daemon: each
    layer streamed through once, a few at a time (their decompression runs in parallel)."""
    manifest, _, digest = client.get_manifest(ref)

    def read() -> ImageContents:
        from concurrent.futures import ThreadPoolExecutor

        config = json.loads(client.get_blob(ref.repository, manifest["config"]["digest"]))

        def scan(blob: dict[str, Any]) -> _LayerScan:
            resp = client.request(
                "GET",
                f"/v2/{ref.repository}/blobs/{blob['digest']}",
                scope=f"repository:{ref.repository}:pull",
                stream=True,
            )
            try:
                return _scan_layer(_IterStream(resp.iter_content(1 << 20)))
            except tarfile.ReadError as e:
                raise TorchxNbError(
                    f"cannot read layer {blob['digest'][:19]} of {ref}: it is not an intact"
                    f" tar ({e}); push the image again, or pass --packages none"
                ) from e
            finally:
                resp.close()

        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            env = (config.get("config") or {}).get("Env")
            return _combine(pool.map(scan, manifest["layers"]), _arch(config), env)

    return cached(digest, read)


def from_daemon(client: Any, image: Any) -> ImageContents:
    """Read an image from a Docker daemon's ``docker save`` stream (docker SDK ``Image``):
    each layer scanned as the stream passes it, then applied in the order ``manifest.json``
    (which comes last) gives; nothing is written to disk."""

    def read() -> ImageContents:
        raw = _IterStream(image.save(named=False))
        order: list[str] = []
        layers: dict[str, _LayerScan] = {}
        with tarfile.open(fileobj=raw, mode="r|") as outer:
            for info in outer:
                f = outer.extractfile(info) if info.isfile() else None
                if f is None:
                    continue
                if info.name == "manifest.json":
                    order = json.loads(f.read())[0]["Layers"]
                elif info.name.endswith((".tar", ".tar.gz")) or "/blobs/" in info.name:
                    # an OCI blob that is not a layer (the config, a manifest) is no tar
                    with contextlib.suppress(tarfile.ReadError):
                        layers[info.name] = _scan_layer(f)
        env = (image.attrs.get("Config") or {}).get("Env")
        found = (layers[name] for name in order if name in layers)
        return _combine(found, _arch(image.attrs), env)

    return cached(str(image.id), read)


class _IterStream(io.RawIOBase):
    """A readable stream over an iterator of byte chunks (read through a view: a small read
    of a large chunk copies only what it returns)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
