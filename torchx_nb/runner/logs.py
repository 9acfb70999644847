"""Logs: a replica's lines, its tail, a window of it, from one describe."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from torchx_nb.runner.core import RunnerContext
from torchx_nb.runner.requests import (
    _check_replica,
)
from torchx_nb.schedulers.api import Scheduler
from torchx_nb.specs.api import (
    AppHandle,
    UnknownAppException,
)
from torchx_nb.specs.log_line import Stream


class Logs:
    """A replica's log lines, over the runner's shared context."""

    def __init__(self, ctx: RunnerContext) -> None:
        self.ctx = ctx

    def log_lines(
        self,
        app_handle: AppHandle,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of ``role_name``; raises UnknownAppException for an app the
        scheduler does not know and NoSuchReplica for a role or replica the job does not have,
        from one describe."""
        sched, app_id, role_name = self._known_replica(app_handle, role_name, k)
        return sched.log_iter(app_id, role_name, k, regex, since, until, should_tail, streams)

    def log_tail(
        self,
        app_handle: AppHandle,
        role_name: str | None,
        k: int = 0,
        n: int = 100,
        regex: str | None = None,
        streams: Stream | None = None,
    ) -> list[str]:
        """The last ``n`` lines (that ``regex`` finds, in RE2 syntax) of a replica's log (of
        the first role when ``role_name`` is None): read from the end of the file where the
        backend's logs are files (``KeepsLogFiles``), else through ``log_iter`` keeping the last
        ``n``. One describe."""
        from collections import deque

        from torchx_nb.schedulers.abilities import KeepsLogFiles
        from torchx_nb.schedulers.logs import tail_lines
        from torchx_nb.user_regex import compile_regex

        sched, app_id, role = self._known_replica(app_handle, role_name, k)
        pattern = compile_regex(regex) if regex else None
        if isinstance(sched, KeepsLogFiles):
            path = sched.log_file(app_id, role, k, streams)
            if path is not None:
                return tail_lines(path, n, pattern) if path.exists() else []
        window: deque[str] = deque(maxlen=n)
        for line in sched.log_iter(app_id, role, k, streams=streams):
            if pattern is None or pattern.search(line):
                window.append(line)
        return list(window)

    def log_window(
        self,
        app_handle: AppHandle,
        role_name: str | None,
        k: int = 0,
        start: int = 0,
        end: int | None = None,
        regex: str | None = None,
        streams: Stream | None = None,
        keep: int = 5000,
    ) -> list[str]:
        """The last ``keep`` of lines ``start`` up to ``end`` (0-based, counted before the
        filter; None: to the log's end) of a replica's log that ``regex`` finds."""
        import itertools
        from collections import deque

        from torchx_nb.user_regex import compile_regex

        sched, app_id, role = self._known_replica(app_handle, role_name, k)
        pattern = compile_regex(regex) if regex else None
        lines = itertools.islice(sched.log_iter(app_id, role, k, streams=streams), start, end)
        return list(
            deque((line for line in lines if pattern is None or pattern.search(line)), keep)
        )

    def _known_replica(
        self, app_handle: AppHandle, role_name: str | None, k: int
    ) -> tuple[Scheduler[Any], str, str]:
        """The scheduler, app id and role (the first one when None) of a replica the job has,
        from one describe."""
        sched, _, app_id = self.ctx.scheduler_and_id(app_handle)
        desc = sched.describe(app_id)
        if desc is None:
            raise UnknownAppException(app_handle)
        if role_name is None:
            roles = [rs.role for rs in desc.roles_statuses] or [r.name for r in desc.roles]
            role_name = roles[0] if roles else app_id
        _check_replica(desc, role_name, k)
        return sched, app_id, role_name
