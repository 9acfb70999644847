"""What makes a distribution "the same": its contents, never its name and version alone. A
wheel an index serves is its sha256 (from the index's pages); a distribution made from the
kernel's copy is its installed files (RECORD's digests; the source folder's file contents for
an editable install) plus the commit of a VCS install. The environment layer's cache key is
made of these, so a same-version rebuild or a new commit makes a new layer."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
from pathlib import Path

from torchx_nb.environment.index_pages import ServedFile
from torchx_nb.environment.kernel import KernelDist
from torchx_nb.workspace.image_contents import NOT_CONTENTS, normalize, record_identity, record_rows

_SKIP_DIRS = {".git", ".hg", "__pycache__", ".venv", ".tox", ".mypy_cache"}
# a build's artefacts in the source folder itself; below it, folders of these names are
# source (a package's ``build`` or ``dist`` subpackage is built into its wheel)
_SKIP_TOP = {"build", "dist"}
# file digests already computed, by (path, size, mtime, ctime, inode): the stamp only says
# when to compute again; the identity is the content. ctime and inode are in it because a
# kernel lives long: a same-size edit whose mtime was put back (cp -p, rsync -t, tar, an
# editor restoring it) must be read again, and nothing sets a file's ctime back
_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """The sha256 of a file's contents (computed once per version of the file)."""
    st = path.stat()
    stamp = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    found = _DIGESTS.get(stamp)
    if found is None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        found = _DIGESTS[stamp] = h.hexdigest()
    return found


def served_digest(f: ServedFile) -> str:
    """A served file's sha256 as its index says it, else read from a local folder's file;
    '' when neither says it."""
    if f.sha256 is None and f.path:
        try:
            return file_digest(Path(f.path))
        except OSError:
            return ""
    return f.sha256 or ""


def served_identity(files: list[ServedFile]) -> str:
    """The wheels an index serves for a pin, by their sha256 (a local folder's files read)."""
    return ";".join(sorted({f"{f.filename}={served_digest(f)}" for f in files}))


def _folder_identity(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        top = Path(dirpath) == root
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in _SKIP_DIRS
            and not (top and d in _SKIP_TOP)
            and not d.endswith((".egg-info", ".dist-info"))
        )
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if name.endswith(".pyc") or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            h.update(f"{rel}\0{file_digest(path)}\n".encode())
    return h.hexdigest()


def installed_identity(dist: KernelDist) -> str:
    """The kernel's installed copy of ``dist`` by its contents."""
    h = hashlib.sha256()
    try:
        found = md.distribution(dist.name)
    except md.PackageNotFoundError:
        return ""
    root = Path(str(found.locate_file("")))
    for f in sorted(found.files or (), key=str):
        rel = str(f)
        if "__pycache__" in f.parts or rel.endswith(".pyc") or f.name in NOT_CONTENTS:
            continue
        if f.hash is not None:
            h.update(f"{rel}\0{f.hash.mode}={f.hash.value}\n".encode())
            continue
        path = root / rel
        try:
            h.update(f"{rel}\0{file_digest(path)}\n".encode())
        except OSError:
            h.update(f"{rel}\0\n".encode())
    raw = found.read_text("direct_url.json")
    if raw:
        try:
            commit = json.loads(raw).get("vcs_info", {}).get("commit_id")
        except (ValueError, AttributeError):
            commit = None
        if commit:
            h.update(f"commit\0{commit}\n".encode())
    if dist.source == "editable" and dist.source_path and Path(dist.source_path).is_dir():
        h.update(f"source\0{_folder_identity(Path(dist.source_path))}\n".encode())
    return h.hexdigest()


def folder_identity(folder: Path) -> str:
    """A source folder by its files' contents (a ``--packages FILE``'s project or local
    folder, built into a wheel at submit)."""
    return _folder_identity(folder)


def installed_record_identity(dist: KernelDist) -> str:
    """The kernel's copy of ``dist`` by its RECORD alone, as an image's copy is known (see
    ``record_identity``)."""
    try:
        text = md.distribution(dist.name).read_text("RECORD") or ""
    except md.PackageNotFoundError:
        return ""
    return record_identity(text)


def differs_from_kernel(dist: KernelDist, folder: Path) -> bool:
    """Whether the copy of ``dist`` an index served (installed into ``folder``) is another
    build than the kernel's at the same version: a wheel uploaded again at that version, or
    a second index's own build. Compared by their RECORD digests when both carry the same
    wheel tags; a build for another platform (other tags) cannot be compared and does not
    count."""
    for info in folder.glob("*.dist-info"):
        found = md.PathDistribution(info)
        try:
            name, version = found.metadata["Name"], found.version
        except (KeyError, TypeError):
            continue
        if normalize(str(name)) != dist.key or version != dist.version:
            continue
        wheel = found.read_text("WHEEL") or ""
        tags = {ln.split(":", 1)[1].strip() for ln in wheel.splitlines() if ln.startswith("Tag:")}
        if tags != set(dist.tags):
            return False
        try:
            ours = md.distribution(dist.name).read_text("RECORD") or ""
        except md.PackageNotFoundError:
            return False
        return records_differ(ours, found.read_text("RECORD") or "")
    return False


def records_differ(kernel: str, served: str) -> bool:
    """Whether an index's copy (``served``: uv's RECORD of an install into a folder) holds
    other files than the kernel's (``kernel``: pip's RECORD in a site directory), where they
    can be compared: the folders the kernel's copy has in its site directory (its packages,
    modules and dist-info). Scripts and data files are left out: pip put them outside the
    site directory (``../../../bin/x``, no digest compared), uv beside it (``bin/x``, with a
    first line naming the interpreter)."""
    ours = dict(record_rows(kernel))
    tops = {path.split("/", 1)[0] for path in ours}
    theirs = {p: d for p, d in dict(record_rows(served)).items() if p.split("/", 1)[0] in tops}
    return bool(ours and theirs) and ours != theirs
