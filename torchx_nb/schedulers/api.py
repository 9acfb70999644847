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
from typing import Any, Generic, TypeVar

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
    this machine, where asking for a status is cheap, so watchers ask more often."""

    is_local: bool = False

    def __init__(self, backend: str, session_name: str) -> None:
        self.backend = backend
        self.session_name = session_name

    def close(self) -> None:
        """Release resources; idempotent and never raises."""

    def submit(self, app: AppDef, cfg: T, workspace: str | None = None) -> str:
        """Dryrun and schedule in one call (mostly for tests; prefer the Runner)."""
        resolved = self.run_opts().resolve(dict(cfg))  # type: ignore[call-overload]
        if workspace:
            build = getattr(self, "build_workspace_and_update_role", None)
            if build is None:
                raise TorchxNbError(f"scheduler {self.backend!r} does not take a workspace")
            build(app.roles[0], workspace, resolved)
        return self.schedule(self.submit_dryrun(app, resolved))  # type: ignore[arg-type]

    @abc.abstractmethod
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Send the request built by ``submit_dryrun``; returns the app id."""

    def submit_dryrun(self, app: AppDef, cfg: T) -> AppDryRunInfo[Any]:
        """The native request for ``app``, built without any network call."""
        resolved: Any = self.run_opts().resolve(dict(cfg))  # type: ignore[call-overload]
        info = self._submit_dryrun(app, resolved)
        for role in app.roles:
            info = role.pre_proc(self.backend, info)
        info._app = app
        info._cfg = resolved
        return info

    @abc.abstractmethod
    def _submit_dryrun(self, app: AppDef, cfg: T) -> AppDryRunInfo[Any]: ...

    def run_opts(self) -> runopts:
        opts = self._run_opts()
        ws_opts = getattr(self, "workspace_opts", None)
        if ws_opts is not None:
            opts.update(ws_opts())
        return opts

    def _run_opts(self) -> runopts:
        return runopts()

    @abc.abstractmethod
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app's state and roles, or None when the scheduler does not know it."""

    @abc.abstractmethod
    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        """Apps this scheduler ran (only ours, not every job on the cluster)."""

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
        """Hook run before the workspace is built."""

    def _validate(self, app: AppDef, scheduler: str, cfg: T | None = None) -> None:
        """Check the app can run here; by default every role needs a resource. A subclass may
        override it with TorchX's signature ``_validate(app, scheduler)``: the Runner calls it
        through ``validate_app``, which passes ``cfg`` only to overrides that take it."""
        for role in app.roles:
            if role.resource == NULL_RESOURCE:
                raise ValueError(
                    f"no resource for role {role.name!r}: set it with -h NAME or --cpu/--memMB"
                )


def _takes_positional(fn: Any, count: int) -> bool:
    """Whether bound method ``fn`` accepts ``count`` positional arguments."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    kinds = [p.kind for p in params]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(k in positional for k in kinds) >= count


def validate_app(sched: Scheduler[Any], app: AppDef, scheduler: str, cfg: Any) -> None:
    """Run ``sched._validate``, whether it has our signature (app, scheduler, cfg) or TorchX's
    (app, scheduler)."""
    if _takes_positional(sched._validate, 3):
        sched._validate(app, scheduler, cfg)
    else:
        sched._validate(app, scheduler)


def list_apps(sched: Scheduler[Any], cfg: Mapping[str, CfgVal] | None) -> list[ListAppResponse]:
    """``sched.list``, whether it takes the cfg (ours) or nothing (TorchX's ``list()``)."""
    if _takes_positional(sched.list, 1):
        return sched.list(cfg)
    return sched.list()


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
