"""``GcpJobs``: what the GCP Batch scheduler and its parts (logs, arrays) share — the clients,
reading one job back and its tasks as replicas — so each part calls real methods, not stubs."""

from __future__ import annotations

from typing import Any

from torchx_nb.schedulers.api import Scheduler
from torchx_nb.schedulers.gcp_batch.client import GcpClients
from torchx_nb.schedulers.gcp_batch.constants import TASK_STATES
from torchx_nb.schedulers.gcp_batch.describe import (
    _by_index,
    _counts,
    _replica_default,
    _task_replica,
    explain_exit,
)
from torchx_nb.schedulers.gcp_batch.options import GcpBatchOpts
from torchx_nb.specs.api import AppState, ReplicaStatus


class GcpJobs(Scheduler[GcpBatchOpts]):
    """The base of ``GcpBatchScheduler`` and of its parts: GCP Batch's clients and the reads
    they all make."""

    gcp: GcpClients

    def _get(self, project: str, location: str, name: str) -> Any:
        """The job, or None when GCP Batch does not know it."""
        from google.api_core import exceptions

        try:
            return self.gcp.batch.get_job(
                name=f"projects/{project}/locations/{location}/jobs/{name}",
                retry=None,
                timeout=self.gcp.timeout,
            )
        except exceptions.NotFound:
            return None

    def _replicas(
        self, job: Any, tasks: list[Any] | None, role: str, count: int, state: AppState
    ) -> list[ReplicaStatus]:
        """The job's replicas (its tasks), each with its state and exit explained."""
        if tasks is None:
            counts = _counts(job)
            only = next((k for k, v in counts.items() if v), None)
            rstate = TASK_STATES.get(only, state) if only else _replica_default(state)
            return [ReplicaStatus(i, rstate, role, f"task-{i}") for i in range(count)]
        out = [ReplicaStatus(i, _replica_default(state), role, f"task-{i}") for i in range(count)]
        for idx, task in _by_index(tasks).items():
            if idx < count:
                out[idx] = _task_replica(task, idx, role)
                explain_exit(out[idx], job)
        return out
