"""A GCP Batch job read back: its roles, its tasks as replicas, its times and counts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from torchx_nb.schedulers.gcp_batch.constants import TASK_STATES
from torchx_nb.schedulers.gcp_batch.request import parse_trial_id
from torchx_nb.specs.api import (
    AppState,
    ReplicaStatus,
    Resource,
    Role,
)
from torchx_nb.specs.preemption import Preemption


def _role(job: Any) -> Role:
    """The app's one role as the job holds it (a replica per task)."""
    group = job.task_groups[0] if job.task_groups else None
    spec = group.task_spec if group else None
    env = dict(spec.environment.variables) if spec else {}
    container = next((r.container for r in spec.runnables if r.container), None) if spec else None
    commands = list(container.commands) if container else [""]
    return Role(
        name=env.get("TORCHX_ROLE_NAME", "node"),
        image=container.image_uri if container else "",
        entrypoint=commands[0] if commands else "",
        args=commands[1:],
        num_replicas=int(group.task_count) if group else 0,
        env=env,
        resource=Resource(
            cpu=int(spec.compute_resource.cpu_milli // 1000) if spec else 1,
            gpu=0,
            memMB=int(spec.compute_resource.memory_mib) if spec else 0,
        ),
        max_retries=_max_retries(spec, env),
    )


def _max_retries(spec: Any, env: dict[str, str]) -> int:
    """The program's retries: maxRetryCount counts preemptions too when spot rules are set
    (``gcp_batch/spot.py``): RETRY_TASK on 50001 alone means none, a ledger says its own."""
    if spec is None:
        return 0
    if env.get("TORCHX_NB_MAX_RETRIES", "").isdigit():
        return int(env["TORCHX_NB_MAX_RETRIES"])
    if any(p.action.name == "RETRY_TASK" for p in spec.lifecycle_policies):
        return 0
    return int(spec.max_retry_count)


def _console_url(app_id: str) -> str:
    project, location, name, _ = parse_trial_id(app_id)
    return (
        f"https://console.cloud.google.com/batch/jobsDetail/regions/{location}/jobs/{name}"
        f"/details?project={project}"
    )


def _by_index(tasks: Iterable[Any] | None) -> dict[int, Any]:
    return {int(t.name.rsplit("/", 1)[-1]): t for t in tasks or ()}


# exit codes GCP Batch itself gives a task (GCP's "Automate task retries" page)
MAX_RUN_EXIT = 50005  # the task ran past its maxRunDuration
PREEMPTED_EXIT = 50001  # its Spot VM was preempted


def explain_exit(rep: ReplicaStatus, job: Any) -> None:
    """Say in words a failure GCP Batch itself caused (its 5000x exit codes): a time limit
    names the limit and how to raise it."""
    if rep.exit_code == MAX_RUN_EXIT:
        from torchx_nb.specs.durations import fmt_duration

        # proto-plus gives the Duration as a timedelta, whose .seconds is within one day
        limit = job.task_groups[0].task_spec.max_run_duration if job else None
        seconds = int(limit.total_seconds()) if limit else 0
        said = f" of {fmt_duration(seconds)}" if seconds else ""
        rep.ending = f"was stopped at its time limit{said} (maxRunDuration)"
        rep.next_step = "raise the limit with -cfg max_run_duration (e.g. 2h, 90m)"
    elif rep.exit_code == PREEMPTED_EXIT:
        rep.ending = "was stopped: its Spot VM was preempted"
        rep.next_step = "retry it (-cfg max_retries), or run on standard VMs"


def task_preemptions(tasks: Iterable[Any] | None) -> list[Preemption]:
    """Each Spot preemption of the job's tasks (a task execution that ended with exit 50001),
    oldest first, with when that task ran again. The events keep a preemption even after the
    retry succeeded: the job's final state decides how it ended, these tell the story."""
    out: list[Preemption] = []
    for task in _by_index(tasks).values():
        events = list(task.status.status_events)
        for i, ev in enumerate(events):
            code = ev.task_execution.exit_code if ev.task_execution else 0
            at = _ts(ev.event_time)
            if code != PREEMPTED_EXIT or at is None:
                continue
            resumed = next(
                (_ts(e.event_time) for e in events[i + 1 :] if e.task_state.name == "RUNNING"),
                None,
            )
            out.append(Preemption(at=at, why="Spot VM preempted", resumed_at=resumed))
    return sorted(out, key=lambda p: p.at)


def _task_replica(task: Any, idx: int, role: str) -> ReplicaStatus:
    """Replica ``idx`` from a task: its state, last exit code, restarts and failure."""
    tstate = TASK_STATES.get(task.status.state.name, AppState.UNKNOWN)
    events = list(task.status.status_events)
    exit_code = None
    for ev in reversed(events):
        if ev.task_execution and ev.task_execution.exit_code:
            exit_code = int(ev.task_execution.exit_code)
            break
    rep = ReplicaStatus(idx, tstate, role, f"task-{idx}", exit_code=exit_code)
    rep.num_restarts = max(sum(1 for ev in events if ev.task_state.name == "RUNNING") - 1, 0)
    if tstate == AppState.FAILED:
        last = events[-1].description if events else ""
        rep.structured_error_msg = (
            f"FAILED (exit code {exit_code})" if exit_code is not None else "FAILED"
        ) + (f": {last}" if last else "")
    return rep


def _job_event_time(job: Any, *states: str) -> float | None:
    """When the job first moved to one of ``states`` (from its status events)."""
    for ev in job.status.status_events:
        if ev.description.rstrip(".").split(" for job")[0].rsplit(" to ", 1)[-1] in states:
            return _ts(ev.event_time)
    return None


def _cancelled_at(job: Any) -> float | None:
    if job.status.state.name not in ("CANCELLATION_IN_PROGRESS", "CANCELLED"):
        return None
    return _job_event_time(job, "CANCELLATION_IN_PROGRESS", "CANCELLED") or _ts(job.update_time)


def _counts(job: Any) -> dict[str, int]:
    for status in job.status.task_groups.values():
        return {str(k): int(v) for k, v in status.counts.items()}
    return {}


def _replica_default(state: AppState) -> AppState:
    return AppState.PENDING if state == AppState.SUBMITTED else state


def _ts(value: Any) -> float | None:
    if not value:
        return None
    try:
        return float(value.timestamp())
    except (AttributeError, ValueError, OSError):
        return None


def _started(job: Any) -> float | None:
    return _job_event_time(job, "RUNNING")


def _rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
