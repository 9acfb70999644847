"""A cell sweep as one job with a task count: each trial a task, its cancel a mark the task's\ncell runner looks for."""

from __future__ import annotations

from typing import Any

from torchx_nb.apps.cell_runner.cancel import CANCEL_MARK, CANCELLED_EXIT
from torchx_nb.apps.cell_runner.common import OWN as CELL_OWN
from torchx_nb.schedulers.abilities import (
    SubmitsArrays,
)
from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.gcp_batch.base import GcpJobs
from torchx_nb.schedulers.gcp_batch.client import GcpError
from torchx_nb.schedulers.gcp_batch.constants import (
    CANCEL_POLL_ENV,
    CANCEL_POLL_SECONDS,
)
from torchx_nb.schedulers.gcp_batch.describe import (
    _cancelled_at,
    _console_url,
    _role,
    _task_replica,
    _ts,
    task_preemptions,
)
from torchx_nb.schedulers.gcp_batch.options import GcpBatchOpts
from torchx_nb.schedulers.gcp_batch.request import (
    GCPBatchJob,
    _fmt,
    parse_trial_id,
)
from torchx_nb.schedulers.gcp_batch.spot import PREEMPTED_EXIT
from torchx_nb.schedulers.outputs import (
    OUTPUT_URL_ENV,
    cancel_mark,
    mark_cancelled,
    trial_output,
)
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    ReplicaStatus,
    RoleStatus,
    is_terminal,
)


class GcpArrays(SubmitsArrays, GcpJobs):
    """A cell sweep as one job with a task count: each trial a task, its cancel a mark the task's\ncell runner looks for."""

    def can_array(self, app: AppDef, cfg: GcpBatchOpts) -> bool:
        """One role of one replica, with a ``gs://`` ``output_path``: a trial's cancel is a
        mark in that bucket (GCP Batch has no call that stops one task)."""
        return super().can_array(app, cfg) and str(cfg.output_path or "").startswith("gs://")

    def array_request(
        self, info: AppDryRunInfo[GCPBatchJob], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[GCPBatchJob]:
        """One task group of ``size`` tasks, ``parallelism`` = ``max_parallel``: each task a
        run of its own (replica 0, no hosts file), its cell runner told to look for its
        cancel mark."""
        from google.cloud import batch_v1

        req = info.request
        job = batch_v1.Job.deserialize(batch_v1.Job.serialize(req.job_def))
        group = job.task_groups[0]
        env = dict(group.task_spec.environment.variables)
        for own in group.task_environments[:1]:
            env.update(own.variables)
        env[CANCEL_POLL_ENV] = str(CANCEL_POLL_SECONDS)
        group.task_spec.environment = batch_v1.Environment(variables=env)
        group.task_environments = []
        group.task_count = size
        group.parallelism = min(size, max_parallel or size)
        group.require_hosts_file = False
        return AppDryRunInfo(
            GCPBatchJob(req.name, req.project, req.location, job, req.outputs), _fmt
        )

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """``PROJECT:LOCATION:JOB:INDEX``: task ``INDEX`` of the job."""
        return [f"{app_id}:{i}" for i in range(size)]

    def _trial_response(
        self, app_id: str, job: Any, tasks: dict[int, Any], index: int
    ) -> DescribeAppResponse:
        """Task ``index`` of a sweep's job, read as a run of its own (replica 0). A trial
        that failed with the cell runner's ``CANCELLED_EXIT``, or that we marked cancelled, or
        that had not ended when its whole job was cancelled, is CANCELLED; a marked trial that
        has not started yet is too (its cell runner exits as soon as it starts). A trial whose
        task was preempted past ``maxRetryCount`` (exit 50001) ended preempted: torchx_nb
        creates it again as a job of its own — unless its sweep's job was cancelled since,
        when it is cancelled with it. ``tasks``: the job's tasks by index, read once for
        all its trials."""
        role = _role(job)
        role.num_replicas = 1
        task = tasks.get(index)
        rep = (
            _task_replica(task, 0, role.name)
            if task is not None
            else ReplicaStatus(0, AppState.PENDING, role.name, "task-0")
        )
        events = list(task.status.status_events) if task is not None else []
        state, msg = rep.state, rep.structured_error_msg
        marked = cancel_mark("gcp_batch", app_id).exists()
        cancelled_at = _cancelled_at(job)
        ended_at = _ts(events[-1].event_time) if events and is_terminal(state) else None
        # preempted past maxRetryCount: torchx_nb would create it again, unless its job was
        # cancelled since (the console, gcloud, Cancel all elsewhere): then it stops there too
        preempted = state == AppState.FAILED and rep.exit_code == PREEMPTED_EXIT
        if state == AppState.FAILED and (rep.exit_code == CANCELLED_EXIT or marked):
            state, msg = AppState.CANCELLED, "cancelled"
        elif cancelled_at is not None and state != AppState.SUCCEEDED:
            if preempted:
                state, msg = AppState.CANCELLED, "preempted, then cancelled with its sweep's job"
            elif not is_terminal(state) or ended_at is None or ended_at >= cancelled_at:
                state, msg = AppState.CANCELLED, "cancelled with its sweep's job"
        elif marked and state == AppState.PENDING:
            state, msg = AppState.CANCELLED, "cancelled before it started"
        elif marked and state == AppState.RUNNING:
            msg = f"cancel requested: the trial stops within {CANCEL_POLL_SECONDS} s"
        rep.state = state
        started = next(
            (_ts(ev.event_time) for ev in events if ev.task_state.name == "RUNNING"), None
        )
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=rep.num_restarts,
            msg=msg,
            ui_url=_console_url(app_id),
            roles=[role],
            roles_statuses=[RoleStatus(role.name, [rep])],
            metadata=dict(job.labels),
            started=started,
            ended=(ended_at or _ts(job.update_time)) if is_terminal(state) else None,
            preemptions=task_preemptions([task] if task is not None else []),
            # preempted past maxRetryCount: GCP runs no single task again (``submit_again``)
            ended_preempted=preempted and state == AppState.FAILED,
        )

    def _cancel_trial(
        self, app_id: str, project: str, location: str, name: str, index: int
    ) -> None:
        job = self.gcp.call(f"cannot describe {app_id}", self._get, project, location, name)
        if job is None:
            raise GcpError(f"cannot cancel {app_id}: GCP Batch has no job {name}")
        base = dict(job.task_groups[0].task_spec.environment.variables).get(OUTPUT_URL_ENV)
        if not base or not base.startswith("gs://"):
            raise GcpError(
                f"cannot cancel {app_id} alone: its job keeps no outputs in a bucket, where"
                f" a trial's cancel mark goes; cancel the whole sweep (or job"
                f" {project}:{location}:{name})"
            )
        mark = f"{trial_output(base, index)}{CELL_OWN}/{CANCEL_MARK}"
        bucket, _, key = mark.removeprefix("gs://").partition("/")
        self.gcp.call(
            f"cannot write the cancel mark {mark}",
            lambda: (
                self.gcp.storage.bucket(bucket)
                .blob(key)
                .upload_from_string(b"cancelled by torchx_nb\n")
            ),
            api="storage",
        )
        mark_cancelled("gcp_batch", app_id)

    def array_of(self, trial_id: str) -> str:
        """``PROJECT:LOCATION:JOB`` of a trial ``PROJECT:LOCATION:JOB:INDEX``; a trial created
        again as a job of its own (``JOB-tINDEX-a2``) is its own array of one."""
        return trial_id.rpartition(":")[0] if parse_trial_id(trial_id)[3] is not None else trial_id

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """``cancel_job`` once: the tasks that have ended keep their end, and the others are
        marked cancelled here."""
        for trial_id in trial_ids:
            mark_cancelled("gcp_batch", trial_id)
        self._cancel_existing(array_id)
        return True
