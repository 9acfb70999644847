"""The scheduler interface every backend implements, mirroring ``torchx.schedulers.api``."""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from torchx_nb.specs.api import (
    NONE,
    NULL_RESOURCE,
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    Role,
    RoleStatus,
    TorchxNbError,
    runopts,
)

if TYPE_CHECKING:
    from torchx_nb.specs.structured_opts import StructuredOpts


class Stream(str, Enum):
    STDOUT = "stdout"
    STDERR = "stderr"
    COMBINED = "combined"


@dataclass
class DescribeAppResponse:
    """What a scheduler knows about one app."""

    app_id: str = "<NOT_SET>"
    state: AppState = AppState.UNSUBMITTED
    num_restarts: int = -1
    msg: str = NONE
    structured_error_msg: str = NONE
    ui_url: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    roles_statuses: list[RoleStatus] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None


@dataclass
class ListAppResponse:
    """One row of ``Scheduler.list()``; ``app_handle`` is filled in by the Runner."""

    app_id: str
    state: AppState
    app_handle: str = "<NOT_SET>"
    name: str = ""

    def __hash__(self) -> int:
        return hash((self.app_id, self.app_handle, self.state))


T = TypeVar("T")


class Scheduler(abc.ABC, Generic[T]):
    """A backend: turns an AppDef into its native request (dryrun), submits it (schedule), and
    answers describe/list/cancel/log_iter for the apps it ran. ``is_local`` schedulers run on
    this machine, where asking for a status is cheap, so watchers ask more often.

    What a backend can do beyond this is declared by the ability classes it derives from (the
    Runner checks them with ``isinstance``): ``TypedOptions`` (its options are one typed
    structure), ``WorkspaceMixin`` (patches an image with the workspace),
    ``DirWorkspaceMixin`` (runs from a folder of the workspace), ``DescribesMany``,
    ``LogFiles``, ``StoresOutputs`` and ``SubmitsArrays``. A scheduler without
    ``TypedOptions`` is called with TorchX 0.7.0's signatures: ``_validate(app, scheduler)``
    and ``list()``, its cfg a plain mapping."""

    is_local: bool = False

    def __init__(self, backend: str, session_name: str) -> None:
        self.backend = backend
        self.session_name = session_name

    def close(self) -> None:
        """Release resources; idempotent and never raises."""

    def submit(self, app: AppDef, cfg: T, workspace: str | None = None) -> str:
        """Dryrun and schedule in one call (mostly for tests; prefer the Runner, which also
        runs a cell from the workspace as a script)."""
        from torchx_nb.workspace import WorkspaceMixin

        opts = self.resolve_opts(cfg)  # type: ignore[arg-type]
        folder: LocalWorkspace | None = None
        if workspace and isinstance(self, WorkspaceMixin):
            # TorchX's entry point, which a scheduler written for TorchX overrides
            self.build_workspace_and_update_role(app.roles[0], workspace, opts)
        elif workspace and isinstance(self, DirWorkspaceMixin):
            folder = LocalWorkspace(workspace)
        elif workspace:
            raise TorchxNbError(f"scheduler {self.backend!r} does not take a workspace")
        return self.schedule(self.submit_dryrun(app, opts, folder))

    @abc.abstractmethod
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Send the request built by ``submit_dryrun``; returns the app id."""

    def resolve_opts(self, cfg: Mapping[str, CfgVal] | None) -> Any:
        """``cfg`` checked against ``run_opts()`` (defaults filled in, strings cast, required
        options present): the typed structure for ``TypedOptions`` schedulers, else a dict."""
        from torchx_nb.specs.structured_opts import StructuredOpts

        if isinstance(self, TypedOptions) and isinstance(cfg, self.opts_type):
            return cfg
        if isinstance(cfg, StructuredOpts):
            cfg = {**dict(cfg.items()), **cfg.extra}
        resolved = self.run_opts().resolve(dict(cfg or {}))
        if isinstance(self, TypedOptions):
            return self.opts_type.from_cfg(resolved)
        return resolved

    def submit_dryrun(
        self, app: AppDef, cfg: T, workspace: LocalWorkspace | None = None
    ) -> AppDryRunInfo[Any]:
        """The native request for ``app``, built without any network call. ``workspace`` is
        the folder a ``DirWorkspaceMixin`` scheduler runs the job from."""
        opts = self.resolve_opts(cfg)  # type: ignore[arg-type]
        if workspace is not None:
            if not isinstance(self, DirWorkspaceMixin):
                raise TorchxNbError(f"scheduler {self.backend!r} does not run from a folder")
            info = self._submit_dryrun_in(app, opts, workspace)
        else:
            info = self._submit_dryrun(app, opts)
        for role in app.roles:
            info = role.pre_proc(self.backend, info)
        info._app = app
        info._cfg = opts
        return info

    @abc.abstractmethod
    def _submit_dryrun(self, app: AppDef, cfg: T) -> AppDryRunInfo[Any]: ...

    def run_opts(self) -> runopts:
        """The options this scheduler takes (a ``WorkspaceMixin`` adds its own, unless they
        are part of its typed options already)."""
        from torchx_nb.workspace import WorkspaceMixin

        opts = self._run_opts()
        if isinstance(self, WorkspaceMixin) and not isinstance(self, TypedOptions):
            opts.update(self.workspace_opts())
        return opts

    def _run_opts(self) -> runopts:
        return runopts()

    @abc.abstractmethod
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app's state and roles, or None when the scheduler does not know it."""

    @abc.abstractmethod
    def list(self, cfg: Any = None) -> list[ListAppResponse]:
        """Apps this scheduler ran (only ours, not every job on the cluster). A
        ``TypedOptions`` scheduler gets its options (e.g. to list one queue); others are
        called as TorchX 0.7.0 calls them, ``list()``."""

    def exists(self, app_id: str) -> bool:
        return self.describe(app_id) is not None

    @abc.abstractmethod
    def _cancel_existing(self, app_id: str) -> None: ...

    def cancel(self, app_id: str) -> None:
        """Ask the scheduler to stop the app; returns without waiting."""
        if self.exists(app_id):
            self._cancel_existing(app_id)

    def delete(self, app_id: str) -> None:
        """Remove the app (default: cancel it)."""
        if self.exists(app_id):
            self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        self._cancel_existing(app_id)

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Lines (each ending in a newline) of replica ``k`` of ``role_name``; with
        ``should_tail`` it follows the log until the app ends."""
        raise NotImplementedError(f"{self.backend} does not support fetching logs")

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: T) -> None:
        """Hook run before the workspace is built (the options are resolved already)."""

    def _validate(self, app: AppDef, scheduler: str, cfg: T | None = None) -> None:
        """Check the app can run here; by default every role needs a resource. The Runner
        passes ``cfg`` to ``TypedOptions`` schedulers only (TorchX 0.7.0's signature is
        ``_validate(app, scheduler)``)."""
        for role in app.roles:
            if role.resource == NULL_RESOURCE:
                raise ValueError(
                    f"no resource for role {role.name!r}: set it with -h NAME or --cpu/--memMB"
                )


OptsT = TypeVar("OptsT", bound="StructuredOpts")


class TypedOptions(Generic[OptsT]):
    """Ability: the scheduler's options are one typed structure, a ``StructuredOpts``
    dataclass (``opts_type``): its runopts table (and so the CLI help, ``.torchxconfig`` and
    the docs' option tables) comes from it, the Runner builds it once from the options given, and
    the dry run, ``_validate`` and ``list`` read its attributes."""

    opts_type: ClassVar[type[StructuredOpts]]

    def _run_opts(self) -> runopts:
        return self.opts_type.as_runopts()

    def typed(self, cfg: Any, partial: bool = False) -> Any:
        """``cfg`` as this scheduler's options: the typed structure as it is; a mapping (as
        TorchX code passes one) checked and typed; with ``partial``, only what is given."""
        if isinstance(cfg, self.opts_type):
            return cfg
        if partial:
            return self.opts_type.from_cfg(dict(cfg or {}), partial=True)
        return self.opts_type.from_cfg(self._run_opts().resolve(dict(cfg or {})))


class DescribesMany(abc.ABC):
    """Ability: the status of many jobs in one call (AWS Batch describes 100 per call, GCP
    Batch and Kubernetes list a location or namespace, Slurm asks squeue once)."""

    @abc.abstractmethod
    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """``describe`` of each app id (None for those it does not know)."""


OUTPUT_DIR_ENV = "TORCHX_OUTPUT_DIR"
OUTPUT_URL_ENV = "TORCHX_NB_OUTPUT_URL"


def upload_target(output_path: str | None, name: str, schemes: tuple[str, ...]) -> str | None:
    """The URL a remote job uploads its output folder to: ``output_path/NAME/`` (None without
    an ``output_path``); a scheme the backend cannot use is one line naming the ones it can."""
    if not output_path:
        return None
    scheme = output_path.partition("://")[0]
    if "://" not in output_path or scheme not in schemes or not output_path.split("://")[1]:
        from torchx_nb.specs.api import InvalidRunConfigException

        raise InvalidRunConfigException(
            f"output_path {output_path!r} is not an object-store URL: use "
            + " or ".join(f"{s}://BUCKET/PREFIX" for s in schemes),
            "output_path",
        )
    return f"{output_path.rstrip('/')}/{name}/"


def output_env(folder: str, url: str | None) -> dict[str, str]:
    """The job's env for its output folder (and, for a remote job, where to upload it)."""
    return {OUTPUT_DIR_ENV: folder, **({OUTPUT_URL_ENV: url} if url else {})}


REMOTE_OUTPUT_DIR = "/tmp/torchx-outputs"


class StoresOutputs(abc.ABC):
    """Ability: each job gets an output folder (``$TORCHX_OUTPUT_DIR``) that is kept where the
    kernel can read it afterwards: a local folder, the Slurm job folder, or an object store the
    job uploads it to (``$TORCHX_NB_OUTPUT_URL``). A cell's result and exception are written
    there, beside the files the job writes."""

    @abc.abstractmethod
    def output_url(self, app_id: str, request: Any) -> str | None:
        """Where the outputs of ``app_id`` (submitted with ``request``) are kept: ``file://``,
        ``s3://`` or ``gs://``; None when the job has none (e.g. no ``output_path``)."""


class RunsEndHook:
    """Ability: the backend has a process of its own at each job's end (local_cwd's
    supervisor), which runs ``end_hook`` (argv, the job's handle appended) once the end is
    recorded: the job-end notice's watcher of last resort. The runner sets it, only when a
    notice is configured."""

    end_hook: list[str] | None = None


class SubmitsArrays(abc.ABC):
    """Ability: the trials of a sweep go as one native array job (Slurm's ``--array``, an AWS
    Batch array job, a Kubernetes Indexed Job, a GCP Batch job's task count): one submit call
    for all of them, and one describe call per poll round. Each task finds its index in the
    variable ``array_index_env`` names; each trial keeps an id of its own (``trial_ids``) that
    describe, logs and cancel take."""

    #: the environment variable holding a task's index in the array
    array_index_env: str = ""
    #: whether the backend bounds how many tasks run at once (``max_parallel``)
    throttles_arrays: bool = False

    def can_array(self, app: AppDef, cfg: Mapping[str, Any]) -> bool:
        """Whether ``app`` can run as array tasks with options ``cfg`` (by default: one role
        of one replica)."""
        return len(app.roles) == 1 and app.roles[0].num_replicas == 1

    @abc.abstractmethod
    def array_request(
        self, info: AppDryRunInfo[Any], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[Any]:
        """The dry run ``info`` made into an array of ``size`` tasks (at most ``max_parallel``
        at once, where the backend bounds it)."""

    @abc.abstractmethod
    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """The id of each task of the array submitted as ``app_id``, in index order."""

    def array_of(self, trial_id: str) -> str:
        """The id of the array job ``trial_id`` is a task of (by default: all before its
        last ``:``)."""
        return trial_id.rpartition(":")[0]

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """Stop, in one call, the tasks of ``array_id`` that have not ended (``trial_ids``:
        those asked for), and return True; False (the default) where the backend has no such
        call, and each trial is cancelled on its own."""
        return False

    def cancel_arrays(self, trial_ids: list[str]) -> None:
        """Cancel every trial of the arrays ``trial_ids`` belong to that has not ended (a
        sweep's Cancel all): one ``stop_array`` per array where the backend has it, else each
        trial on its own, one that cannot be cancelled (it has just ended) not keeping the
        others."""
        arrays: dict[str, list[str]] = {}
        for trial_id in trial_ids:
            arrays.setdefault(self.array_of(trial_id), []).append(trial_id)
        for array_id, trials in arrays.items():
            if self.stop_array(array_id, trials):
                continue
            for trial_id in trials:
                with contextlib.suppress(Exception):
                    self._cancel_existing(trial_id)  # type: ignore[attr-defined]


def cancel_mark(backend: str, app_id: str) -> Path:
    """A private file saying we cancelled ``app_id`` on ``backend``: what the backend's API
    cannot tell afterwards (a deleted Kubernetes job is gone; a GCP Batch task has no cancel of
    its own) stays known to every later describe on this machine."""
    from torchx_nb.paths import data_dir

    return data_dir() / backend / "cancelled" / app_id.replace(":", "_").replace("/", "_")


def mark_cancelled(backend: str, app_id: str) -> None:
    from torchx_nb.paths import private_dir

    mark = cancel_mark(backend, app_id)
    private_dir(mark.parent)
    mark.touch()


def trial_output(base: str | None, index: int) -> str | None:
    """Where array task ``index`` keeps its outputs: a folder of the array's (the cell runner
    writes and uploads there)."""
    return None if base is None else f"{base.rstrip('/')}/{index}/"


@dataclass(frozen=True)
class LocalWorkspace:
    """The folder a ``DirWorkspaceMixin`` job runs from, and files generated for the job (the
    cell as a script) to write beside it when the scheduler copies the folder."""

    path: str
    files: Mapping[str, bytes] = field(default_factory=dict)


class DirWorkspaceMixin(abc.ABC):
    """Ability: the job runs from a folder, no image (local_cwd in the workspace itself; Slurm
    in it, or in a copy under ``job_dir`` on the shared filesystem): TorchX's name for Slurm's
    job_dir workspace."""

    def copies_workspace(self, cfg: Any) -> bool:
        """Whether the folder is copied for the job (then a cell runs as a script file written
        beside the copy)."""
        return False

    def preview_workspace(self, workspace: str, cfg: Any) -> str | None:
        """What would be copied, for dry runs (None: nothing is, the job runs in place)."""
        return None

    def files_folder(self, workspace: str, cfg: Any) -> Path:
        """Where the files generated for a job that runs in place go (the cell runner, the
        cell, pushed variables): where the job can read them, and private. By default a
        folder of this machine's data dir."""
        from torchx_nb.paths import data_dir

        return data_dir() / "cells"

    def _submit_dryrun(self, app: AppDef, cfg: Any) -> AppDryRunInfo[Any]:
        return self._submit_dryrun_in(app, cfg, None)

    @abc.abstractmethod
    def _submit_dryrun_in(
        self, app: AppDef, cfg: Any, workspace: LocalWorkspace | None
    ) -> AppDryRunInfo[Any]:
        """The request for ``app`` run from ``workspace`` (None: the current folder)."""


class LogFiles(abc.ABC):
    """Ability: a replica's log is one file on this machine, so its tail can be read from the
    end instead of from the start (the REST API's ``tail=N``)."""

    @abc.abstractmethod
    def log_file(
        self, app_id: str, role_name: str, k: int = 0, streams: Stream | None = None
    ) -> Path | None:
        """The file holding that log, or None when there is no single file for it."""


def tail_lines(path: Path, n: int, pattern: Any = None, block: int = 1 << 16) -> list[str]:
    """The last ``n`` lines of ``path`` (those ``pattern`` finds, when given), newlines kept,
    read backwards a block at a time: the cost follows what is returned, not the file's size
    (a filter that matches nothing still reads it all)."""
    found: list[str] = []
    with open(path, "rb") as f:
        pos = f.seek(0, 2)
        rest = b""
        last_block = True
        while pos > 0 and len(found) < n:
            size = min(block, pos)
            pos -= size
            f.seek(pos)
            data = f.read(size) + rest
            parts = data.split(b"\n")
            rest = parts[0] if pos > 0 else b""
            complete = parts[1:] if pos > 0 else parts
            if last_block and complete and complete[-1] == b"":
                complete = complete[:-1]  # the file's final newline ends a line, starts none
            last_block = False
            for raw in reversed(complete):
                line = raw.decode("utf-8", errors="replace")
                if pattern is None or pattern.search(line):
                    found.append(line + "\n")
                    if len(found) >= n:
                        break
            if len(rest) > (1 << 20):
                rest = rest[-(1 << 20) :]  # a line over 1 MB keeps its end, as a terminal shows
    found.reverse()
    return found


def filter_regex(regex: str, data: Iterable[str]) -> Iterator[str]:
    """The lines of ``data`` in which ``regex`` is found (RE2: linear time, whatever the
    pattern)."""
    from torchx_nb.user_regex import compile_regex

    pattern = compile_regex(regex)
    return (line for line in data if pattern.search(line))


def split_lines(text: str) -> list[str]:
    """Split keeping the trailing newline on each line."""
    return text.splitlines(keepends=True)


class LineSplitter:
    """Cuts a stream of text (or UTF-8 bytes, decoded incrementally so a character split across
    chunks survives) into whole lines, newline kept, in time linear in the input.

    A pending line longer than ``max_pending`` characters that holds a carriage return keeps only
    what follows the last one, as a terminal shows it: progress bars that redraw with ``\\r``
    for hours cost bounded memory."""

    def __init__(self, max_pending: int = 1 << 20) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._size = 0
        self.max_pending = max_pending

    def feed(self, chunk: str | bytes) -> Iterator[str]:
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        start = 0
        while True:
            end = text.find("\n", start)
            if end < 0:
                break
            self._pending.append(text[start : end + 1])
            yield "".join(self._pending)
            self._pending.clear()
            self._size = 0
            start = end + 1
        if start < len(text):
            rest = text[start:]
            self._pending.append(rest)
            self._size += len(rest)
            if self._size > self.max_pending and "\r" in rest:
                line = "".join(self._pending)
                line = line[line.rindex("\r") + 1 :]
                self._pending = [line]
                self._size = len(line)

    def flush(self) -> Iterator[str]:
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._pending.append(tail)
        if self._pending:
            yield "".join(self._pending)
        self._pending.clear()
        self._size = 0


def split_lines_iterator(chunks: Iterable[str | bytes]) -> Iterator[str]:
    """Re-chunk a stream of text (or UTF-8 byte) pieces into whole lines (newline kept)."""
    lines = LineSplitter()
    for chunk in chunks:
        yield from lines.feed(chunk)
    yield from lines.flush()


_TAIL = threading.local()


class TailStop:
    """Lets another thread end a log tail that is waiting for new lines.

    A reader thread iterates ``log_iter(..., should_tail=True)`` inside ``with stop:``; the
    schedulers' tails wait with ``tail_wait`` (and register blocking streams with
    ``on_tail_stop``), so ``stop.stop()`` from any thread makes the tail return at once instead
    of when the job ends. Outside such a block ``tail_wait`` is ``time.sleep``."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._closers: list[Any] = []
        self._lock = threading.Lock()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        self.event.set()
        with self._lock:
            closers, self._closers = self._closers, []
        for close in closers:
            with contextlib.suppress(Exception):
                close()

    def add_closer(self, close: Any) -> None:
        with self._lock:
            if not self.event.is_set():
                self._closers.append(close)
                return
        with contextlib.suppress(Exception):
            close()

    def __enter__(self) -> TailStop:
        _TAIL.current = self
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _TAIL.current = None


def tail_wait(seconds: float) -> bool:
    """Sleep ``seconds`` between looks at a growing log; True when the tail was stopped."""
    stop: TailStop | None = getattr(_TAIL, "current", None)
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.event.wait(seconds)


def on_tail_stop(close: Any) -> None:
    """Call ``close()`` (e.g. a blocking stream's) when the current thread's tail is stopped."""
    stop: TailStop | None = getattr(_TAIL, "current", None)
    if stop is not None:
        stop.add_closer(close)
