"""A rank's checkpoint generations in a store: ``rank-<r>/gen-NNNNNN/`` holds the files
that changed since the generation before and, written last, ``MANIFEST.json`` (every file's
sha256, size, modification time and the generation holding it; ``written``: the newest
modification time, when the program last wrote its checkpoint); ``rank-<r>/LATEST`` names the last committed
one, for people. A restore takes the newest generation whose manifest exists and whose files
all arrive with their sha256, so a half-uploaded generation (an attempt killed mid-save, or
still racing the next attempt) is never seen. The last ``KEEP`` generations are kept, with
every file they still use."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from typing import Any

from .stores import Store

KEEP = 2
MANIFEST = "MANIFEST.json"
LATEST = "LATEST"
CHUNK = 1 << 20


def file_digest(path: str) -> tuple[str, int]:
    """The sha256 (hex) and size of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def local_files(folder: str) -> dict[str, str]:
    """Every regular file under ``folder`` (symlinks not followed): relative path -> path."""
    found: dict[str, str] = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(names):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found[os.path.relpath(path, folder).replace(os.sep, "/")] = path
    return found


def _gen_name(gen: int) -> str:
    return f"gen-{gen:06d}"


def _gen_of(part: str) -> int | None:
    digits = part.removeprefix("gen-")
    return int(digits) if part.startswith("gen-") and digits.isdigit() else None


class Generations:
    """One rank's generations in a store: list, restore, save (changed files only), prune."""

    def __init__(self, store: Store, rank: int = 0) -> None:
        self.store = store
        self.prefix = f"rank-{rank}/"
        self.last = 0  # the highest generation this process has written

    def scan(self) -> tuple[list[int], int]:
        """The committed generations (highest first) and the highest generation number any
        object uses (half-uploaded ones included: a new save goes above them)."""
        committed, highest = [], 0
        for key in self.store.keys(self.prefix):
            part, _, rest = key[len(self.prefix) :].partition("/")
            gen = _gen_of(part)
            if gen is None:
                continue
            highest = max(highest, gen)
            if rest == MANIFEST:
                committed.append(gen)
        return sorted(committed, reverse=True), highest

    def manifest(self, gen: int) -> dict[str, Any] | None:
        data = self.store.get_bytes(f"{self.prefix}{_gen_name(gen)}/{MANIFEST}")
        if data is None:
            return None
        try:
            manifest = json.loads(data)
        except ValueError:
            return None
        return manifest if isinstance(manifest, dict) and "files" in manifest else None

    def _object(self, rel: str, entry: dict[str, Any]) -> str:
        return f"{self.prefix}{_gen_name(int(entry['from']))}/{rel}"

    def restore(self, dest: str) -> dict[str, Any] | None:
        """Make ``dest`` hold exactly the newest generation whose files all arrive with their
        sha256 (an older one when a file is missing or differs); its manifest, or None when
        there is none (then ``dest`` is left as it is)."""
        committed, _ = self.scan()
        for gen in committed:
            manifest = self.manifest(gen)
            if manifest is None:
                continue
            parent = os.path.dirname(os.path.abspath(dest)) or "."
            os.makedirs(parent, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".torchx-nb-restore-", dir=parent)
            try:
                if self._fetch(manifest, staging):
                    _swap_in(staging, dest)
                    self.last = max(self.last, gen)
                    return manifest
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return None

    def _fetch(self, manifest: dict[str, Any], staging: str) -> bool:
        for rel, entry in manifest["files"].items():
            target = os.path.join(staging, *_safe_parts(rel))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                self.store.get_file(self._object(rel, entry), target)
            except Exception:  # gone (pruned by a racing writer) or unreadable
                return False
            if file_digest(target) != (entry["sha256"], entry["size"]):
                return False
            if isinstance(entry.get("mtime"), (int, float)):  # as the program left it
                os.utime(target, (entry["mtime"], entry["mtime"]))
        return True

    def save(self, src: str, extra: dict[str, Any] | None = None) -> int:
        """Upload what changed in ``src`` since the newest committed generation as a new
        generation, then commit it (its manifest last, then ``LATEST``); prune. Returns it."""
        committed, highest = self.scan()
        previous: dict[str, Any] = {}
        for gen in committed:
            found = self.manifest(gen)
            if found is not None:
                previous = found["files"]
                break
        gen = max(highest, self.last) + 1
        self.last = gen
        files: dict[str, Any] = {}
        for rel, path in local_files(src).items():
            mtime = os.stat(path).st_mtime
            sha, size = file_digest(path)
            old = previous.get(rel)
            if old is not None and (old.get("sha256"), old.get("size")) == (sha, size):
                files[rel] = {"sha256": sha, "size": size, "from": int(old["from"])}
            else:
                self.store.put_file(f"{self.prefix}{_gen_name(gen)}/{rel}", path)
                files[rel] = {"sha256": sha, "size": size, "from": gen}
            files[rel]["mtime"] = mtime
        saved = time.time()
        written = max((f["mtime"] for f in files.values()), default=saved)
        manifest = {"generation": gen, "saved": saved, "written": min(written, saved)}
        manifest.update(files=files, **(extra or {}))
        key = f"{self.prefix}{_gen_name(gen)}/{MANIFEST}"
        self.store.put_bytes(key, json.dumps(manifest, indent=1).encode())
        self.store.put_bytes(f"{self.prefix}{LATEST}", str(gen).encode())
        self.prune(gen)
        return gen

    def prune(self, upto: int) -> None:
        """Keep the newest ``KEEP`` committed generations up to ``upto`` (and every file
        they reference); older manifests go first, then their unreferenced files. Nothing
        above ``upto`` is touched (a racing writer's)."""
        committed, _ = self.scan()
        kept = [g for g in committed if g <= upto][:KEEP]
        if len(kept) < KEEP:
            return
        needed = set()
        for kept_gen in kept:
            manifest = self.manifest(kept_gen)
            if manifest is None:
                return  # not readable now: prune another time
            needed |= {self._object(rel, e) for rel, e in manifest["files"].items()}
        floor = min(kept)
        old = [f"{self.prefix}{_gen_name(g)}/{MANIFEST}" for g in committed if g < floor]
        self.store.delete(old)
        stale = []
        for key in self.store.keys(self.prefix):
            of = _gen_of(key[len(self.prefix) :].partition("/")[0])
            if of is not None and of < floor and key not in needed:
                stale.append(key)
        self.store.delete(stale)


def _safe_parts(rel: str) -> list[str]:
    """A manifest's relative path as path parts that stay inside the folder."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"checkpoint file {rel!r} is not a path inside the folder")
    return parts


def _swap_in(staging: str, dest: str) -> None:
    """``dest`` becomes what ``staging`` holds: its old contents go first (files written
    after the restored generation are not the checkpoint)."""
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(dest):
        path = os.path.join(dest, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    for name in os.listdir(staging):
        os.replace(os.path.join(staging, name), os.path.join(dest, name))
