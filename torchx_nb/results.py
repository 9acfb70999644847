"""A job's result and output files, read back from where the job kept its output folder
(``$TORCHX_OUTPUT_DIR``): a local folder (local_cwd, local_docker, Slurm's job folder), or the
S3 or GCS prefix the job uploaded it to. The location comes from the job's own record in the
job store, never from the scheduler: a result is loaded only for a job submitted from here.

Unpickling runs code (cloudpickle): ``load_result`` is for the kernel or CLI that submitted
the job. The REST API only ever reads the short repr the job wrote beside the result."""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from torchx_nb.lazy import LazyClient
from torchx_nb.specs.api import AppStatus, TorchxNbError, is_terminal
from torchx_nb.specs.exceptions import NoResult, RemoteTraceback
from torchx_nb.specs.exceptions import RemoteError as RemoteError

OWN = ".torchx-nb/"
RESULT = ".torchx-nb/result.pkl"
RESULT_REPR = ".torchx-nb/result.txt"
PYTHON = ".torchx-nb/python.txt"
EXIT = ".torchx-nb/exit.txt"
NOTEBOOK = ".torchx-nb/notebook.txt"  # the notebook runner ran: its name, no value to give
CHUNK = 1 << 20
SHORT_CHARS = 1000  # the most of a short repr or an error line any surface reads


@dataclass(frozen=True)
class OutputFile:
    """A file the job wrote: its path relative to the output folder, and its size."""

    path: str
    size: int


class OutputStore(Protocol):
    url: str

    def list(self) -> list[OutputFile]:
        """Every file of the job's output folder (our own ``.torchx-nb/`` included)."""

    def open(self, path: str) -> IO[bytes]:
        """A stream of one file's bytes (read in chunks: never held whole)."""


def _safe(path: str) -> str:
    """A relative path that stays inside the folder (a hostile key cannot reach out)."""
    norm = posixpath.normpath(path.replace("\\", "/"))
    if norm.startswith(("/", "../")) or norm in ("..", ".") or "\0" in norm:
        raise TorchxNbError(f"output {path!r} is not a path inside the job's output folder")
    return norm


class LocalStore:
    """A folder on this machine (or the shared filesystem)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.root = Path(url.removeprefix("file://"))

    def list(self) -> list[OutputFile]:
        if not self.root.is_dir():
            return []
        return sorted(
            (
                OutputFile(p.relative_to(self.root).as_posix(), p.stat().st_size)
                for p in self.root.rglob("*")
                if p.is_file() and not p.is_symlink()
            ),
            key=lambda f: f.path,
        )

    def open(self, path: str) -> IO[bytes]:
        from torchx_nb.workspace.safe_open import open_regular

        target = (self.root / _safe(path)).resolve()
        if not target.is_relative_to(self.root.resolve()):
            raise TorchxNbError(f"output {path!r} is outside the job's output folder")
        with open_regular(target) as (f, _):
            return os.fdopen(os.dup(f.fileno()), "rb")


def _aws_env() -> tuple[str | None, ...]:
    """What picks an S3 endpoint and identity from the environment (the client cache's key)."""
    names = ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID")
    return tuple(os.environ.get(n) for n in names)


@functools.lru_cache(maxsize=4)
def _s3_client(env: tuple[str | None, ...]) -> Any:
    """One boto3 S3 client per environment: creating one costs tens of milliseconds, and a
    client is thread-safe and refreshes its own credentials."""
    from torchx_nb.schedulers.aws_common import boto_client

    return boto_client("s3", None)


def _gcs_client() -> Any:
    from torchx_nb.schedulers.gcp_batch import storage_client

    return storage_client()


class S3Store:
    """``s3://BUCKET/PREFIX/`` through boto3 (``AWS_ENDPOINT_URL`` and profiles honoured)."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        self.bucket, _, prefix = url.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._client = client

    client = LazyClient(lambda self: _s3_client(_aws_env()))

    def list(self) -> list[OutputFile]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        return sorted(
            (
                OutputFile(obj["Key"][len(self.prefix) :], int(obj["Size"]))
                for page in pages
                for obj in page.get("Contents", [])
                if not obj["Key"].endswith("/")
            ),
            key=lambda f: f.path,
        )

    def open(self, path: str) -> IO[bytes]:
        body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + _safe(path))["Body"]
        return body


class GcsStore:
    """``gs://BUCKET/PREFIX/`` through google-cloud-storage (``STORAGE_EMULATOR_HOST``
    honoured)."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        self.bucket, _, prefix = url.removeprefix("gs://").partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._client = client

    client = LazyClient(lambda self: _gcs_client())

    def list(self) -> list[OutputFile]:
        blobs = self.client.list_blobs(self.bucket, prefix=self.prefix)
        return sorted(
            (
                OutputFile(b.name[len(self.prefix) :], int(b.size or 0))
                for b in blobs
                if not b.name.endswith("/")
            ),
            key=lambda f: f.path,
        )

    def open(self, path: str) -> IO[bytes]:
        blob = self.client.bucket(self.bucket).blob(self.prefix + _safe(path))
        return blob.open("rb", chunk_size=CHUNK)


def store_for(url: str) -> OutputStore:
    """The store behind an output location recorded in the job store."""
    if url.startswith("file://"):
        return LocalStore(url)
    if url.startswith("s3://"):
        return S3Store(url)
    if url.startswith("gs://"):
        return GcsStore(url)
    raise TorchxNbError(f"unknown output location {url!r}")


def _read(store: OutputStore, path: str, limit: int | None = None) -> bytes:
    """The file's bytes; with ``limit``, at most that many (a job may have written 50 MB
    where a short line was expected)."""
    with contextlib.closing(store.open(path)) as f:
        return f.read() if limit is None else f.read(limit)


def _short(store: OutputStore, path: str) -> str:
    """A short text the job wrote (a repr, an error line), cut at SHORT_CHARS."""
    data = _read(store, path, 4 * SHORT_CHARS + 1)
    text = data.decode(errors="replace")
    if len(text) > SHORT_CHARS:
        return text[:SHORT_CHARS] + "…"
    return text


def outputs(store: OutputStore) -> list[OutputFile]:
    """The files the job wrote (our own result files left out)."""
    return [f for f in store.list() if not f.path.startswith(OWN)]


def result_repr(store: OutputStore) -> str | None:
    """The short repr the job wrote beside its result, or its exception's one line; None when
    there is neither (no unpickling: safe for the REST API)."""
    names = {f.path for f in store.list() if f.path.startswith(OWN)}
    if RESULT_REPR in names:
        return _short(store, RESULT_REPR)
    errors = sorted(n for n in names if n.startswith(f"{OWN}error-") and n.endswith(".txt"))
    if errors:
        return "raised " + _short(store, errors[0])
    return None


def exception_lines(store: OutputStore) -> dict[int, str]:
    """Each failing rank's exception as the job wrote it (``TYPE: message``, bounded), by rank:
    for a failure card; nothing is unpickled."""
    out: dict[int, str] = {}
    for f in store.list():
        name = f.path.removeprefix(OWN)
        if f.path.startswith(f"{OWN}error-") and name.endswith(".txt"):
            rank = name.removeprefix("error-").removesuffix(".txt")
            if rank.isdigit():
                out[int(rank)] = _short(store, f.path)
    return out


def load_result(store: OutputStore, status: AppStatus | None, handle: str) -> Any:
    """The cell's value; the exception it raised (with the remote traceback as its cause:
    every rank's), or a ``RemoteError`` with its type and message when this kernel cannot
    rebuild it; or ``NoResult`` saying how the job ended."""
    import cloudpickle

    ended = status is not None and is_terminal(status.state)
    if ended and isinstance(store, LocalStore) and not store.root.is_dir():
        raise NoResult(folder_gone(store, handle))
    names = {f.path for f in store.list() if f.path.startswith(OWN)}
    if PYTHON in names:
        _check_python(_short(store, PYTHON).strip(), handle)
    errors = sorted(
        (n for n in names if n.startswith(f"{OWN}error-") and n.endswith(".pkl")),
        key=lambda n: int(n.removeprefix(f"{OWN}error-").removesuffix(".pkl") or 0),
    )
    if errors:
        records = [(n, _unpickle(cloudpickle, _read(store, n), handle)) for n in errors]
        text = "".join(
            (
                f"[rank {n.removeprefix(f'{OWN}error-').removesuffix('.pkl')}] "
                if len(records) > 1
                else ""
            )
            + str(r.get("traceback", ""))
            for n, r in records
        )
        raise _exception(cloudpickle, records[0][1]) from RemoteTraceback(text)
    if RESULT in names:
        return _unpickle(cloudpickle, _read(store, RESULT), handle)["value"]
    raise NoResult(no_result_reason(status, handle, _ended_how(store, names)))


def _exception(pickler: Any, record: dict[str, Any]) -> BaseException:
    """The exception the cell raised, rebuilt here when this kernel can; else a
    ``RemoteError`` with its type and message (the traceback goes with it either way)."""
    exc = record.get("exception")  # written by an earlier cell runner
    pickled = record.get("pickled")
    if isinstance(pickled, bytes):
        try:
            exc = pickler.loads(pickled)
        except Exception:
            exc = None
    if isinstance(exc, BaseException):
        return exc
    kind = str(record.get("type", "Exception"))[:200]
    message = str(record.get("message", ""))[:SHORT_CHARS]
    return RemoteError(f"the cell raised {kind}: {message}")


def _ended_how(store: OutputStore, names: set[str]) -> str | None:
    """What the cell runner's files say of a job that left no result: the cell called
    ``sys.exit``, or it ended its process before its last line (``os._exit``, a crash);
    None when the cell runner never started there."""
    if NOTEBOOK in names:
        name = _short(store, NOTEBOOK).strip()[:200]
        return (
            f"it ran the notebook {name}, which gives no value: job.notebook() fetches the"
            " executed notebook"
        )
    if EXIT in names:
        return f"the cell called sys.exit({_short(store, EXIT).strip()[:100]}) before its last line"
    if PYTHON in names:
        return (
            "the cell's process ended before its last line finished (os._exit in the cell, a"
            " kill or a crash)"
        )
    return None


def folder_gone(store: LocalStore, handle: str) -> str:
    return (
        f"{handle}'s output folder {store.root} no longer exists: it was deleted or moved"
        " after the job ended"
    )


def _unpickle(pickler: Any, data: bytes, handle: str) -> Any:
    """``pickler.loads(data)``; what cannot be rebuilt here (a truncated file, a module this
    kernel lacks) is one line naming the job."""
    try:
        record = pickler.loads(data)
    except ModuleNotFoundError as e:
        raise TorchxNbError(
            f"the result of {handle} needs the module {e.name!r}, which this kernel cannot"
            " import: install it here"
        ) from None
    except Exception as e:
        raise TorchxNbError(
            f"the result of {handle} cannot be unpickled ({type(e).__name__}: {e})"
        ) from None
    if not isinstance(record, dict):
        raise TorchxNbError(f"the result of {handle} is not one torchx_nb's cell runner wrote")
    return record


def _check_python(theirs: str, handle: str) -> None:
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if theirs != ours:
        raise TorchxNbError(
            f"{handle} ran Python {theirs[:20]!r} and this kernel runs {ours}: its result cannot"
            f" be unpickled here; run it in an image with Python {ours}"
        )


def no_result_reason(status: AppStatus | None, handle: str, how: str | None = None) -> str:
    """One line: how the job ended, since it left no result. ``how``: what the cell runner's
    own files say (``_ended_how``)."""
    if status is None:
        return f"{handle} left no result and its scheduler no longer knows it"
    if not is_terminal(status.state):
        return f"{handle} is {status.state.name}: it has no result yet"
    codes = [
        f"{rs.role}/{r.id} exit code {r.exit_code}"
        for rs in status.roles
        for r in rs.replicas
        if r.exit_code not in (None, 0)
    ]
    ended = f"{handle} ended {status.state.name}" + (f" ({', '.join(codes)})" if codes else "")
    if how is not None:
        return f"{ended} without a result: {how}"
    if status.state.name != "SUCCEEDED":
        return (
            f"{ended} without a result: it was killed, ran out of memory or was cancelled"
            " before its cell finished"
        )
    return (
        f"{ended} without a result: nothing of torchx_nb's cell runner is in its output folder"
        " (a component rather than a cell, or the folder was emptied)"
    )


def iter_chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def _sent(src: IO[bytes], out: IO[bytes]) -> Iterator[int] | None:
    """A local file copied by the kernel (``os.sendfile``, as ``shutil.copyfile`` does: no
    copy through Python), CHUNK bytes at a time so progress still reports; None where the
    platform cannot, and the caller copies in Python."""
    if not hasattr(os, "sendfile"):
        return None

    def chunks() -> Iterator[int]:
        offset = 0
        while sent := os.sendfile(out.fileno(), src.fileno(), offset, CHUNK):
            offset += sent
            yield sent

    return chunks()


def fetch_notebook(store: OutputStore, folder: Path, name: str | None = None) -> Path:
    """The executed notebook of a notebook job (``name`` at the top of its outputs, else the
    one notebook there) copied into ``folder`` as ``STEM.executed.ipynb`` (``-2``, ``-3``… when
    taken: nothing is overwritten). Returns its path."""
    top = [f.path for f in outputs(store) if "/" not in f.path and f.path.endswith(".ipynb")]
    chosen = name if name in top else (top[0] if len(top) == 1 else None)
    if chosen is None:
        raise NoResult(
            "this job has no executed notebook in its outputs (not a notebook job, or it has"
            " not reached its first save: a running job saves after its first cell)"
            if not top
            else f"this job left several notebooks ({', '.join(sorted(top))}): download them"
        )
    folder.mkdir(parents=True, exist_ok=True)
    stem = chosen.removesuffix(".ipynb")
    for n in range(1, 1000):
        target = folder / (f"{stem}.executed.ipynb" if n == 1 else f"{stem}.executed-{n}.ipynb")
        try:
            # exclusive: two fetches at once never share a name
            with open(target, "xb") as out, contextlib.closing(store.open(chosen)) as src:
                for chunk in iter_chunks(src):
                    out.write(chunk)
        except FileExistsError:
            continue
        return target
    raise TorchxNbError(f"{folder} holds 999 executed copies of {chosen}: remove some")


def download(store: OutputStore, dest: Path, progress: Any = None) -> Path:
    """Copy the job's files into ``dest`` (created), keeping their relative paths, each
    streamed in chunks; ``progress(done, total, what)`` as the workspace's pushes report."""
    files = outputs(store)
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = dest / _safe(f.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        done = 0
        # a name of this download's own: two kernels may download into one folder at once
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
        with contextlib.closing(store.open(f.path)) as src, open(tmp, "wb") as out:
            chunks = _sent(src, out) if isinstance(store, LocalStore) else None
            for n in chunks or (out.write(chunk) for chunk in iter_chunks(src)):
                done += n
                if progress is not None:
                    progress(done, f.size, f.path)
        tmp.replace(target)  # atomic: a reader sees one whole file, the last one written
        if progress is not None and f.size == 0:
            progress(0, 0, f.path)
    return dest


__all__ = [
    "NoResult",
    "OutputFile",
    "RemoteError",
    "RemoteTraceback",
    "download",
    "exception_lines",
    "fetch_notebook",
    "load_result",
    "outputs",
    "result_repr",
    "store_for",
]
