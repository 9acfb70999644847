"""A replica's log: the job's stdout and stderr files on the shared filesystem, followed while it runs."""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from torchx_nb.schedulers.abilities import (
    KeepsLogFiles,
)
from torchx_nb.schedulers.api import LogQuery
from torchx_nb.schedulers.logs import LineSplitter, tail_wait, timed_lines
from torchx_nb.schedulers.slurm.base import SlurmJobs
from torchx_nb.schedulers.slurm.commands import (
    TAIL_IDLE_S,
)
from torchx_nb.schedulers.slurm.request import (
    check_job_id,
)
from torchx_nb.specs.api import (
    is_terminal,
)
from torchx_nb.specs.log_line import LogLine, Stream


class SlurmLogs(KeepsLogFiles, SlurmJobs):
    """A replica's log: the job's stdout and stderr files on the shared filesystem, followed while it runs."""

    def _log_paths(
        self, app_id: str, role_name: str, k: int, streams: Stream | None
    ) -> Sequence[Path]:
        """``slurm-<id>-<role>-<k>.out`` and/or ``.err`` in the job's folder."""
        check_job_id(app_id)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", role_name) or ".." in role_name:
            raise ValueError(f"{role_name!r} is not a role of this job")
        workdir = Path(self._workdir(app_id))
        exts = {Stream.STDOUT: ["out"], Stream.STDERR: ["err"]}.get(
            streams or Stream.COMBINED, ["out", "err"]
        )
        return [workdir / f"slurm-{app_id}-{role_name}-{k}.{ext}" for ext in exts]

    def log_file(
        self, app_id: str, role_name: str, k: int = 0, streams: Stream | None = None
    ) -> Path | None:
        """One stream's file (the combined log is two files read together: None)."""
        paths = self._log_paths(app_id, role_name, k, streams)
        return paths[0] if len(paths) == 1 else None

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Lines of ``slurm-<id>-<role>-<k>.out`` / ``.err``, each a ``LogLine`` with the time
        it was written where the job's ``apps/log_times`` watcher kept one (``.times`` beside
        each file); both streams when none is named: as they are read while following, else
        merged by when each was seen written (to the watcher's 0.2 s: within one look, stdout's
        lines first). Slurm's files carry no times of their own, so
        since/until do not apply."""
        paths = self._log_paths(q.app_id, q.role, q.k, q.streams)
        if len(paths) > 1 and not q.tail and any(p.exists() for p in paths):
            return _in_time_order(
                [timed_lines(p, self._follow(q.app_id, [p], False)) for p in paths]
            )
        if len(paths) == 1:
            return timed_lines(paths[0], self._follow(q.app_id, paths, q.tail))
        return self._follow(q.app_id, paths, q.tail)

    def _follow(self, app_id: str, paths: Sequence[Path], should_tail: bool) -> Iterator[str]:
        offsets = [0] * len(paths)
        splitters = [LineSplitter() for _ in paths]
        next_check = 0.0
        done = not should_tail
        while True:
            got = False
            for i, path in enumerate(paths):
                try:
                    with open(path, "rb") as f:
                        f.seek(offsets[i])
                        chunk = f.read(1 << 20)
                except FileNotFoundError:
                    continue
                if chunk:
                    got = True
                    offsets[i] += len(chunk)
                    yield from splitters[i].feed(chunk)
            if got:
                continue
            if done:
                break
            if time.monotonic() >= next_check:
                desc = self.describe(app_id)
                done = desc is None or is_terminal(desc.state)
                next_check = time.monotonic() + 2.0
                if done:
                    continue
            if tail_wait(TAIL_IDLE_S):
                break
        if not any(p.exists() for p in paths) and not should_tail:
            # a running job's step makes its files when srun starts it, a moment after the
            # batch script began (the job is RUNNING from then): no lines yet, not an error
            desc = self.describe(app_id)
            if desc is not None and is_terminal(desc.state):
                raise FileNotFoundError(
                    f"no log file {paths[0].name} in {paths[0].parent}: is the job's folder on a"
                    " filesystem this machine sees?"
                )
        for s in splitters:
            yield from s.flush()


def _in_time_order(streams: list[Iterator[str]]) -> Iterator[str]:
    """The lines of several files merged by when they were written (a line with no time
    sorts with the line before it in its file; a tie keeps the files' order), read as they
    go."""

    def keyed(lines: Iterator[str]) -> Iterator[tuple[float, str]]:
        last = float("-inf")
        for line in lines:
            last = LogLine.time_of(line) or last
            yield last, line

    for _, line in heapq.merge(*(keyed(s) for s in streams), key=lambda pair: pair[0]):
        yield line
