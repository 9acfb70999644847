"""Wheels for distributions no index serves, made from what the kernel has: the wheel file it
was installed from when that is still there, a build of its source folder for a local or
editable install (``uv build``, with the kernel's index settings for the build backend), or
the installed files packed back into a wheel (pure-Python only: a compiled one cannot be
rebuilt for another platform, and is refused in one line)."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

from torchx_nb.environment.index import IndexSettings, uv_message
from torchx_nb.environment.kernel import KernelDist, installed_files
from torchx_nb.specs.api import TorchxNbError

_DROP = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json"}


def uv_bin() -> str:
    try:
        import uv
    except ImportError:
        found = shutil.which("uv")
        if found:
            return found
        raise TorchxNbError(
            "the environment layer needs uv: pip install uv (or pass --packages none)"
        ) from None
    return str(uv.find_uv_bin())


_DATE = (1980, 1, 1, 0, 0, 0)
_WHEEL = b"Wheel-Version: 1.0\nGenerator: torchx_nb\nRoot-Is-Purelib: true\n"
_TAG = b"\nTag: py3-none-any\n"


def _chunks(content: bytes | Path) -> Iterator[bytes]:
    if isinstance(content, bytes):
        yield content
        return
    with open(content, "rb") as f:
        while chunk := f.read(1 << 20):
            yield chunk


def _add(zf: zipfile.ZipFile, rel: str, content: bytes | Path) -> str:
    """Add one file to the wheel (streamed: a file may be gigabytes) and return its RECORD
    line."""
    sha = hashlib.sha256()
    size = 0
    info = zipfile.ZipInfo(rel, _DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    with zf.open(info, "w", force_zip64=True) as dst:
        for chunk in _chunks(content):
            sha.update(chunk)
            size += len(chunk)
            dst.write(chunk)
    digest = base64.urlsafe_b64encode(sha.digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{size}"


def _wheel_name(dist: KernelDist, tag: str = "py3-none-any") -> str:
    name = re.sub(r"[-_.]+", "_", dist.name)
    version = dist.version.replace("-", "_")
    return f"{name}-{version}-{tag}.whl"


def repack_installed(dist: KernelDist, out: Path, tag: str | None = None) -> Path:
    """The kernel's installed files as a wheel in ``out`` (reproducible: sorted entries, fixed
    dates, RECORD rewritten): a pure-Python distribution tagged ``py3-none-any``, a compiled
    one under ``tag``, one of its own wheel tags the image accepts (its WHEEL file kept)."""
    if not dist.pure and tag is None:
        raise TorchxNbError(
            f"{dist.name} {dist.version} is compiled and no index serves it for the image's"
            " platform: publish a wheel for it, install it in the base image, or pass"
            " --packages none"
        )
    _, files = installed_files(dist.name)
    dist_info = next(
        (rel.split("/")[0] for rel, _ in files if rel.split("/")[0].endswith(".dist-info")), None
    )
    if dist_info is None:
        dist_info = f"{re.sub(r'[-_.]+', '_', dist.name)}-{dist.version}.dist-info"
    target = out / _wheel_name(dist, tag or "py3-none-any")
    entries: dict[str, bytes | Path] = {}
    for rel, path in files:
        parts = rel.split("/")
        if parts[0] == dist_info and parts[-1] in _DROP:
            continue
        if rel.endswith(".pth") and parts[0].startswith("__editable__"):
            continue
        entries[rel] = path
    wheel_file = f"{dist_info}/WHEEL"
    found = entries.get(wheel_file)
    declared = found.read_bytes() if isinstance(found, Path) else _WHEEL
    if tag is None:
        entries[wheel_file] = re.sub(rb"(?m)^Tag: .*$\n?", b"", declared).rstrip(b"\n") + _TAG
    else:
        entries[wheel_file] = declared
    record: list[str] = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in sorted(entries):
            record.append(_add(zf, rel, entries[rel]))
        record.append(f"{dist_info}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", _DATE), "\n".join(record) + "\n")
    return target


def build_source(dist: KernelDist, out: Path, index: IndexSettings) -> Path:
    """A wheel built from the folder ``dist`` was installed from (``uv build``)."""
    assert dist.source_path is not None
    before = set(out.glob("*.whl"))
    proc = subprocess.run(
        [
            uv_bin(),
            "build",
            "--no-config",
            "--wheel",
            "--out-dir",
            str(out),
            *index.uv_args(),
            dist.source_path,
        ],
        capture_output=True,
        text=True,
        check=False,
        env=index.uv_env(),
    )
    made = sorted(set(out.glob("*.whl")) - before)
    if proc.returncode != 0 or not made:
        last = uv_message((proc.stderr.strip().splitlines() or ["no wheel"])[-1], 200)
        raise TorchxNbError(
            f"cannot build a wheel of {dist.name} from {dist.source_path} ({last}):"
            " make its build backend reachable from the kernel's index, or pass --packages none"
        )
    return made[-1]


def _installed_from(dist: KernelDist, path: Path) -> bool:
    """Whether the wheel file ``path`` is still the one ``dist`` was installed from (its
    sha256, as direct_url.json recorded it at install)."""
    import importlib.metadata as md
    import json

    from torchx_nb.environment.identity import file_digest

    try:
        info = json.loads(md.distribution(dist.name).read_text("direct_url.json") or "{}")
        archive = info.get("archive_info", {})
        recorded = archive.get("hashes", {}).get("sha256") or archive.get("hash", "")
    except (md.PackageNotFoundError, ValueError, AttributeError):
        return False
    recorded = str(recorded).removeprefix("sha256=")
    try:
        return bool(recorded) and file_digest(path) == recorded
    except OSError:
        return False


def local_wheel(dist: KernelDist, out: Path, index: IndexSettings, tag: str | None = None) -> Path:
    """A wheel of ``dist`` as the kernel has it, into ``out``: the wheel file it was
    installed from while that file is unchanged, a build of an editable install's folder
    (the kernel imports that folder as it is now), else its installed files (a local
    folder's install ships what was installed, never the folder as it is now); ``tag``: for
    a compiled one, which of its wheel tags the image accepts."""
    path = Path(dist.source_path) if dist.source_path else None
    wheel = dist.source == "archive" and path and path.suffix == ".whl" and path.is_file()
    if wheel and path and _installed_from(dist, path):
        return Path(shutil.copy2(path, out / path.name))
    if dist.source == "project" and path and path.is_file():  # a FILE's wheel or sdist
        if path.suffix == ".whl":
            return Path(shutil.copy2(path, out / path.name))
        return build_source(dist, out, index)
    if dist.source in ("editable", "project") and path and path.is_dir():
        return build_source(dist, out, index)
    if dist.source == "editable":
        raise TorchxNbError(
            f"{dist.name} is an editable install whose source folder {dist.source_path} is"
            " gone: reinstall it, or pass --packages none"
        )
    return repack_installed(dist, out, tag)
