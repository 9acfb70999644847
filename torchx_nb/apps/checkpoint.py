"""Checkpoints that travel: a job's local checkpoint folder, restored at the start of every
attempt from the job's durable storage and saved back to it, by generation.

A store URL (``$TORCHX_NB_CHECKPOINT_URL``) holds, under its root::

    attempts.json                      the ledger: one entry per attempt (rank 0 writes it)
    rank-<r>/gen-000007/<files>        the files of a generation that changed since the last
    rank-<r>/gen-000007/MANIFEST.json  written last: every file's sha256, size and generation
    rank-<r>/LATEST                    the last committed generation (a pointer for people)

A save uploads the changed files into a new generation and commits it by writing its
manifest last, so a restore, which takes the highest generation whose manifest exists and
whose files all match their sha256, never sees a half-uploaded one (the previous attempt's
last upload may still be racing it). The last ``KEEP`` generations are kept.

Stores: ``file://`` (the local app folder, the Slurm job folder), ``s3://`` (boto3),
``gs://`` (google-cloud-storage), ``sagemaker:`` (SageMaker's ``CheckpointConfig`` syncs the
folder itself: nothing to do but keep the ledger there).

Standalone on purpose, as the cell runner it ships beside: only the standard library is
imported here; boto3 and google-cloud-storage are imported when a store first needs them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

DIR_ENV = "TORCHX_NB_CHECKPOINT_DIR"  # the program's local folder (its rank's, once resolved)
URL_ENV = "TORCHX_NB_CHECKPOINT_URL"  # the store's root
ATTEMPT_ENV_ENV = "TORCHX_NB_ATTEMPT_ENV"  # the name of the backend's own attempt variable
MAX_RETRIES_ENV = "TORCHX_NB_MAX_RETRIES"
MAX_PREEMPTIONS_ENV = "TORCHX_NB_MAX_PREEMPTIONS"
GRACE_ENV = "TORCHX_NB_GRACE"  # seconds between SIGTERM and the kill
# what the cell runner tells the program (and its child processes) once it has begun
BASE_ENV = "TORCHX_NB_CHECKPOINT_BASE"  # the folder the rank folders are made in
ATTEMPT_ENV = "TORCHX_NB_ATTEMPT"
PREEMPTIONS_ENV = "TORCHX_NB_PREEMPTIONS"
RESTORED_ENV = "TORCHX_NB_RESTORED_FROM"  # the restored generation's save time (epoch s)
RETRIES_SPENT_EXIT = 171  # the program already failed more often than its max_retries
NOT_FAILURES = (170, 171)  # a trial's cancel, a spent attempt: not the program's failure
KEEP = 2
MANIFEST = "MANIFEST.json"
LATEST = "LATEST"
LEDGER = "attempts.json"
CHUNK = 1 << 20


def _split(url: str) -> tuple[str, str, str]:
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key.strip("/")


class Store:
    """A flat key space under one root: what the generations and the ledger are made of."""

    url = ""

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (relative to the root)."""
        raise NotImplementedError

    def put_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        raise NotImplementedError

    syncs_itself = False  # SageMaker: the platform restores and saves the folder


class LocalStore(Store):
    """A folder on this machine or a shared filesystem; every write lands by ``os.replace``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.url = f"file://{root}"

    def _path(self, key: str) -> str:
        norm = os.path.normpath(key)
        if norm.startswith(("..", "/")):
            raise ValueError(f"checkpoint key {key!r} is outside the store")
        return os.path.join(self.root, norm)

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        found = []
        for folder, _, names in os.walk(base):
            for name in names:
                if not name.startswith(".torchx-nb-part-"):
                    rel = os.path.relpath(os.path.join(folder, name), self.root)
                    found.append(rel.replace(os.sep, "/"))
        return sorted(found)

    def _landing(self, key: str) -> tuple[str, str]:
        target = self._path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = os.path.join(os.path.dirname(target), f".torchx-nb-part-{os.getpid()}")
        return target, part

    def put_file(self, key: str, path: str) -> None:
        target, part = self._landing(key)
        shutil.copyfile(path, part)
        os.replace(part, target)

    def put_bytes(self, key: str, data: bytes) -> None:
        target, part = self._landing(key)
        with open(part, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, target)

    def get_file(self, key: str, path: str) -> None:
        shutil.copyfile(self._path(key), path)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path(key))


class SageMakerStore(LocalStore):
    """SageMaker's ``CheckpointConfig``: the platform uploads ``LocalPath`` as it changes and
    restores it before every attempt; only the ledger is kept there, as a file."""

    syncs_itself = True

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.url = "sagemaker:"


class S3Store(Store):
    """``s3://BUCKET/PREFIX`` through boto3 (``AWS_ENDPOINT_URL`` and profiles honoured)."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        _, self.bucket, self.prefix = _split(url)
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("s3")
        return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}".lstrip("/")

    def keys(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        found = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full
        )
        for page in pages:
            for item in page.get("Contents", []):
                found.append(item["Key"][len(self._key("")) :])
        return sorted(found)

    def put_file(self, key: str, path: str) -> None:
        self.client.upload_file(path, self.bucket, self._key(key))

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_file(self, key: str, path: str) -> None:
        self.client.download_file(self.bucket, self._key(key), path)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            return None
        return bytes(answer["Body"].read())

    def delete(self, keys: list[str]) -> None:
        for at in range(0, len(keys), 1000):  # DeleteObjects takes 1000 keys at most
            chunk = [{"Key": self._key(k)} for k in keys[at : at + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})


class GcsStore(Store):
    """``gs://BUCKET/PREFIX`` through google-cloud-storage (``STORAGE_EMULATOR_HOST`` too)."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        _, self.bucket_name, self.prefix = _split(url)
        self._client = client

    @property
    def bucket(self) -> Any:
        if self._client is None:
            from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]

            try:
                self._client = storage.Client()
            except Exception:
                if not os.environ.get("STORAGE_EMULATOR_HOST"):
                    raise
                self._client = storage.Client.create_anonymous_client()
        return self._client.bucket(self.bucket_name)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}".lstrip("/")

    def keys(self, prefix: str) -> list[str]:
        base = len(self._key(""))
        blobs = self.bucket.client.list_blobs(self.bucket_name, prefix=self._key(prefix))
        return sorted(b.name[base:] for b in blobs)

    def put_file(self, key: str, path: str) -> None:
        self.bucket.blob(self._key(key)).upload_from_filename(path)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.bucket.blob(self._key(key)).upload_from_string(data)

    def get_file(self, key: str, path: str) -> None:
        self.bucket.blob(self._key(key)).download_to_filename(path)

    def get_bytes(self, key: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return bytes(self.bucket.blob(self._key(key)).download_as_bytes())
        except NotFound:
            return None

    def delete(self, keys: list[str]) -> None:
        from google.api_core.exceptions import NotFound

        bucket = self.bucket
        for key in keys:
            with contextlib.suppress(NotFound):
                bucket.blob(self._key(key)).delete()


def store_for(url: str, local_base: str) -> Store:
    """The store a checkpoint URL names; ``local_base``: the local folder (SageMaker's)."""
    if url.startswith("file://"):
        return LocalStore(url.removeprefix("file://"))
    if url.startswith("s3://") and _split(url)[1]:
        return S3Store(url)
    if url.startswith("gs://") and _split(url)[1]:
        return GcsStore(url)
    if url == "sagemaker:":
        return SageMakerStore(local_base)
    raise ValueError(
        f"checkpoint URL {url!r} is none of file://PATH, s3://BUCKET/PREFIX,"
        " gs://BUCKET/PREFIX or sagemaker:"
    )


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
            sha, size = file_digest(path)
            old = previous.get(rel)
            if old is not None and (old.get("sha256"), old.get("size")) == (sha, size):
                files[rel] = {"sha256": sha, "size": size, "from": int(old["from"])}
                continue
            self.store.put_file(f"{self.prefix}{_gen_name(gen)}/{rel}", path)
            files[rel] = {"sha256": sha, "size": size, "from": gen}
        manifest = {"generation": gen, "saved": time.time(), "files": files, **(extra or {})}
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


def read_ledger(store: Store) -> list[dict[str, Any]]:
    """The attempts so far, oldest first (none when there is no readable ledger)."""
    data = store.get_bytes(LEDGER)
    try:
        entries = json.loads(data) if data else []
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def failures(entries: list[dict[str, Any]]) -> int:
    """The program's own failures: attempts that ended with an exit status of theirs."""
    count = 0
    for e in entries:
        why = str(e.get("why", ""))
        code = why.removeprefix("exit ")
        if why.startswith("exit ") and code.lstrip("-").isdigit():
            count += int(code) != 0 and int(code) not in NOT_FAILURES
    return count


def preemptions(entries: list[dict[str, Any]]) -> int:
    """Attempts ended by SIGTERM, or that never said how they ended (killed at once)."""
    return sum(e.get("why") in ("sigterm", "lost") for e in entries)


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def rank_of() -> int:
    for name in ("RANK", "TORCHX_REPLICA_ID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


class Session:
    """This attempt's checkpoint: the rank's folder, the store, the attempt's number and the
    ledger entry rank 0 keeps for it. One per process; ``save`` is thread-safe."""

    def __init__(self, folder: str, store: Store, rank: int) -> None:
        self.folder = folder
        self.store = store
        self.rank = rank
        self.generations = Generations(store, rank)
        self.lock = threading.Lock()
        self.attempt = 1
        self.preemptions = 0
        self.failures = 0
        self.restored_from: float | None = None
        self.generation: int | None = None
        self.entries: list[dict[str, Any]] = []
        self.native = ""

    @classmethod
    def from_env(cls) -> Session | None:
        """The session the job's environment asks for (None without a checkpoint URL)."""
        url = os.environ.get(URL_ENV, "")
        if not url:
            return None
        base = os.environ.get(BASE_ENV) or os.environ.get(DIR_ENV) or ""
        if not base:
            base = os.path.join(tempfile.gettempdir(), "torchx-nb-checkpoint")
        rank = rank_of()
        return cls(os.path.join(base, f"rank-{rank}"), store_for(url, base), rank)

    def _native_attempt(self) -> str:
        """The backend's own name for this attempt (its job id and attempt variable)."""
        var = os.environ.get(ATTEMPT_ENV_ENV, "")
        job = next(
            (
                os.environ[v]
                for v in ("AWS_BATCH_JOB_ID", "SLURM_JOB_ID", "BATCH_JOB_UID")
                if os.environ.get(v)
            ),
            "",
        )
        return f"{job}/{os.environ.get(var, '')}" if var and os.environ.get(var) else ""

    def begin(self) -> None:
        """Read the ledger (rank 0: add this attempt), restore the folder, and tell the
        program (``$TORCHX_NB_CHECKPOINT_DIR`` is now the rank's folder)."""
        self.entries = read_ledger(self.store)
        self.native = self._native_attempt()
        mine = [e for e in self.entries if self.native and e.get("native") == self.native]
        if mine:
            self.attempt = int(mine[-1].get("n", len(self.entries)))
        elif self.rank == 0 or not self.entries or self.entries[-1].get("why") != "running":
            self.attempt = len(self.entries) + 1
        else:  # rank 0 has already added this attempt
            self.attempt = int(self.entries[-1].get("n", len(self.entries)))
        before = [e for e in self.entries if int(e.get("n", 0)) < self.attempt]
        if self.rank == 0:
            for e in before:
                if e.get("why") == "running":  # it never said how it ended: killed at once
                    e["why"] = "lost"
        self.preemptions = preemptions(before)
        self.failures = failures(before)
        os.makedirs(self.folder, exist_ok=True)
        if not self.store.syncs_itself:
            manifest = self.generations.restore(self.folder)
            if manifest is not None:
                self.generation = int(manifest["generation"])
                self.restored_from = float(manifest.get("saved", 0.0)) or None
        if self.rank == 0 and not mine:
            self.entries = [*before, self._entry("running")]
            self._write_ledger()
        self.export()

    def _entry(self, why: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"n": self.attempt, "started": time.time(), "ended": None}
        entry.update(why=why, ckpt_generation=self.generation)
        if self.native:
            entry["native"] = self.native
        return entry

    def export(self) -> None:
        """What ``torchx_nb.checkpoint()`` reads in this process and its children."""
        os.environ[BASE_ENV] = os.path.dirname(self.folder)
        os.environ[DIR_ENV] = self.folder
        os.environ[ATTEMPT_ENV] = str(self.attempt)
        os.environ[PREEMPTIONS_ENV] = str(self.preemptions)
        if self.restored_from is not None:
            os.environ[RESTORED_ENV] = repr(self.restored_from)

    def retries_spent(self) -> str | None:
        """One line when the program already failed more often than its max_retries."""
        limit = _int_env(MAX_RETRIES_ENV)
        if limit is None or self.failures <= limit:
            return None
        return (
            f"the program failed {self.failures} times (max_retries {limit}): not run again"
            f" (attempt {self.attempt}, {self.preemptions} preemptions)"
        )

    def save(self, timeout: float | None = None) -> int | None:
        """Save the folder as a new generation (nothing to do on SageMaker); None when
        another save holds the folder past ``timeout``."""
        if self.store.syncs_itself:
            return None
        if not self.lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return None
        try:
            extra = {"attempt": self.attempt, "rank": self.rank}
            self.generation = self.generations.save(self.folder, extra)
            return self.generation
        finally:
            self.lock.release()

    def end(self, why: str) -> None:
        """Rank 0 records how this attempt ended (``ok``, ``exit N``, ``sigterm``)."""
        if self.rank != 0:
            return
        entries = read_ledger(self.store) or self.entries
        ours = [e for e in entries if e.get("n") == self.attempt]
        if not ours:
            entries.append(self._entry(why))
            ours = entries[-1:]
        ours[-1].update(why=why, ended=time.time(), ckpt_generation=self.generation)
        self.entries = entries
        self._write_ledger()

    def _write_ledger(self) -> None:
        self.store.put_bytes(LEDGER, json.dumps(self.entries, indent=1).encode())

    def save_within(self, seconds: float) -> str:
        """Save in a thread given ``seconds`` at most (a SIGTERM's grace); what happened, in
        words for the log."""
        said: list[str] = []

        def work() -> None:
            try:
                gen = self.save(timeout=seconds)
                if self.store.syncs_itself:
                    said.append("the checkpoint folder is SageMaker's to upload")
                elif gen is None:
                    said.append("checkpoint not saved: another save held it")
                else:
                    said.append(f"checkpoint saved (generation {gen})")
            except Exception as e:
                said.append(f"checkpoint not saved: {e}")

        worker = threading.Thread(target=work, name="torchx-nb-checkpoint", daemon=True)
        worker.start()
        worker.join(max(seconds, 0.0))
        return said[0] if said else f"checkpoint not saved within {seconds:g} s"


def grace() -> float:
    """Seconds a SIGTERM's save may take: the backend's grace less 2 s (30 s by default)."""
    try:
        value = float(os.environ.get(GRACE_ENV, "") or 30.0)
    except ValueError:
        value = 30.0
    return max(value - 2.0, 0.5)


def warn(text: str) -> None:
    sys.stderr.write(f"torchx_nb: {text}\n")
    sys.stderr.flush()
