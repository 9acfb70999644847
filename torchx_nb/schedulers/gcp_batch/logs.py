"""Replica logs from Cloud Logging (``batch_task_logs``), followed while the job runs."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from torchx_nb.schedulers.api import LogQuery
from torchx_nb.schedulers.gcp_batch.base import GcpJobs
from torchx_nb.schedulers.gcp_batch.constants import (
    JOB_STATES,
    LOG_NAME,
    LOG_POLL_SECONDS,
    TASK_GROUP,
)
from torchx_nb.schedulers.gcp_batch.describe import (
    _rfc3339,
    _ts,
)
from torchx_nb.schedulers.gcp_batch.request import (
    parse_trial_id,
)
from torchx_nb.schedulers.logs import tail_wait
from torchx_nb.specs.api import (
    AppState,
    is_terminal,
)
from torchx_nb.specs.log_line import LogLine, Stream


class GcpLogs(GcpJobs):
    """Replica logs from Cloud Logging (``batch_task_logs``), followed while the job runs."""

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Replica ``k``'s lines from Cloud Logging (``batch_task_logs``, its task's entries):
        stdout is logged at INFO severity and stderr at ERROR, so ``streams`` picks by
        severity."""
        project, location, name, index = parse_trial_id(q.app_id)
        job = self.gcp.call(f"cannot describe {q.app_id}", self._get, project, location, name)
        if job is None:
            raise ValueError(f"unknown app {q.app_id!r}")
        group = job.task_groups[0]
        env = dict(group.task_spec.environment.variables)
        if q.role != env.get("TORCHX_ROLE_NAME", q.role):
            raise ValueError(f"{q.app_id} has no role {q.role!r}")
        count = 1 if index is not None else int(group.task_count)
        if not 0 <= q.k < count:
            raise ValueError(f"{q.app_id} has no replica {q.k} (it has {count})")
        k = q.k if index is None else index  # a sweep trial: its task's log
        filt = [
            f'logName="projects/{project}/logs/{LOG_NAME}"',
            f'labels.job_uid="{job.uid}"',
            f'labels.task_id="{job.uid}-{TASK_GROUP}-{k}"',
        ]
        if q.streams == Stream.STDOUT:
            filt.append("severity<ERROR")
        elif q.streams == Stream.STDERR:
            filt.append("severity>=ERROR")
        if q.until:
            filt.append(f'timestamp<="{_rfc3339(q.until)}"')
        # google-cloud-logging reads only the last 24 hours unless the filter names a time
        start = q.since or datetime.fromtimestamp(_ts(job.create_time) or 0, timezone.utc)
        return self._log_lines(project, location, name, filt, start, q.tail, index)

    def _log_lines(
        self,
        project: str,
        location: str,
        name: str,
        filt: list[str],
        since: datetime,
        should_tail: bool,
        task: int | None = None,
    ) -> Iterator[str]:
        """Entries from ``since`` on; with ``should_tail`` until the job (or a sweep trial's
        ``task``: its siblings may run on) has ended."""
        cursor = _rfc3339(since)
        seen: set[str] = set()
        ended_at: float | None = None
        while True:
            where = [*filt, f'timestamp>="{cursor}"']
            entries = self.gcp.call(
                "cannot read the job's logs from Cloud Logging",
                self.gcp.logging.list_entries,
                api="logging",
                resource_names=[f"projects/{project}"],
                filter_=" AND ".join(where),
                order_by="timestamp asc",
                page_size=1000,
            )
            for entry in entries:
                if entry.insert_id in seen:
                    continue
                stamp = _rfc3339(entry.timestamp)
                if stamp != cursor:
                    seen.clear()
                cursor = stamp
                seen.add(entry.insert_id)
                text = entry.payload if isinstance(entry.payload, str) else str(entry.payload)
                yield LogLine(text if text.endswith("\n") else text + "\n", _ts(entry.timestamp))
            if not should_tail:
                return
            if ended_at is not None and time.monotonic() - ended_at >= LOG_POLL_SECONDS:
                return
            if ended_at is None and self._has_ended(project, location, name, task):
                # Cloud Logging may receive the last lines after the job ended: one more look
                ended_at = time.monotonic()
            if tail_wait(LOG_POLL_SECONDS):
                return

    def _has_ended(self, project: str, location: str, name: str, task: int | None) -> bool:
        job = self.gcp.call("cannot describe the job", self._get, project, location, name)
        if job is None or is_terminal(JOB_STATES.get(job.status.state.name, AppState.UNKNOWN)):
            return True
        if task is None:
            return False
        found = self.gcp.call(
            "cannot describe the task",
            self.gcp.batch.get_task,
            name=f"{job.name}/taskGroups/{TASK_GROUP}/tasks/{task}",
        )
        return found.status.state.name in ("SUCCEEDED", "FAILED")
