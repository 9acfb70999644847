"""Why an AWS Batch job ended, in words, where Batch says it: an attempt stopped at its
``attemptDurationSeconds`` (``-cfg timeout``); and each node's exit code, from its container
(a node job ``ID#N`` of a multi-node job, the job's own container or last attempt, or its
ListJobs summary). Pure functions over DescribeJobs and ListJobs answers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from torchx_nb.specs.api import AppState, ReplicaStatus

# Batch's job status → the state torchx_nb shows
STATES = {
    "SUBMITTED": AppState.PENDING,
    "PENDING": AppState.PENDING,
    "RUNNABLE": AppState.PENDING,
    "STARTING": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
}

# Batch's own wording ("Job attempt duration exceeded timeout"), and moto's
_TIMEOUT = re.compile(
    r"attempt duration exceeded timeout|exceeded the configured attemptDurationSeconds", re.I
)


def time_limit(job: dict[str, Any]) -> tuple[str, str] | None:
    """(what ended it, the next step) for a job Batch stopped at its timeout; None else."""
    if not _TIMEOUT.search(str(job.get("statusReason") or "")):
        return None
    from torchx_nb.specs.durations import fmt_duration

    seconds = (job.get("timeout") or {}).get("attemptDurationSeconds")
    said = f" of {fmt_duration(float(seconds))}" if seconds else ""
    return (
        f"was stopped at its time limit{said} (attemptDurationSeconds)",
        "raise the limit with -cfg timeout=SECONDS",
    )


# the reasons Batch itself gives a job that failed or stopped (AWS Batch's "job status
# reasons" and "troubleshooting" pages); any other reason on a FAILED job is one somebody
# gave to TerminateJob or CancelJob
_BATCH_OWN = re.compile(
    r"^\s*(Essential container in task exited|Job attempt duration exceeded timeout|"
    r"Dependent Job failed|Array Child Job failed|Host EC2|CannotPullContainerError|"
    r"CannotStartContainerError|CannotCreateContainerError|CannotInspectContainerError|"
    r"CannotStopContainerError|ResourceInitializationError|OutOfMemoryError|"
    r"Task failed to start|DockerTimeoutError|Timeout waiting for network interface|"
    r"MISCONFIGURATION|CAPACITY:|Job terminated by a spot|Your job|Your Spot Task|Spot|"
    r"Task stopped|Container|Essential container in pod|ECS |Fargate|EC2 |"
    r"RUNNABLE|.*exceeded the configured attemptDurationSeconds|"
    # an AWS error class heading the text ("InternalError: ...", "SomethingException")
    r"(?-i:[A-Z][A-Za-z]+(?:Error|Exception)\b))",
    re.I,
)


def cancel_ending(job: dict[str, Any], ours: str) -> str | None:
    """Who ended a FAILED Batch job that was cancelled, from its ``statusReason``: torchx_nb's
    own cancel (the reason starts with ``ours``, followed by who asked), or somebody's
    TerminateJob/CancelJob with their reason; None for a job Batch itself failed."""
    if job.get("status") != "FAILED":
        return None
    reason = str(job.get("statusReason") or "").strip()
    if reason.startswith(ours):
        from torchx_nb.schedulers.cancellers import cancelled_by, clean_who

        return cancelled_by(clean_who(reason[len(ours) :]).strip(" :"))
    if not reason or _BATCH_OWN.search(reason):
        return None
    # a container that exited with a code of its own (not the SIGTERM/SIGKILL a terminate
    # sends) ended by itself, whatever the reason says: a failure, never someone's cancel
    if container_exit(job) not in (None, 137, 143):
        return None
    started = " while it waited" if not job.get("startedAt") else ""
    return (
        f"was cancelled{started} outside torchx_nb (Batch's TerminateJob or CancelJob) with the"
        f" reason {reason[:300]!r}"
    )


def container_exit(job: dict[str, Any]) -> int | None:
    """The exit code of a job's (or a node job's) container: ``container.exitCode``, else
    that of its last attempt; None while Batch does not say."""
    code = (job.get("container") or {}).get("exitCode")
    if code is None:
        attempts = job.get("attempts") or []
        if attempts:
            code = (attempts[-1].get("container") or {}).get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def apply_exits(
    replicas: list[ReplicaStatus], exits: dict[int, tuple[int | None, float | None]]
) -> None:
    """Give each replica (``hostname`` ``node-N``) its node's exit code and end; in a failed
    job a node that exited 0 succeeded (it is not a failure to show a card for)."""
    for rep in replicas:
        node = rep.hostname.removeprefix("node-")
        code, ended = exits.get(int(node) if node.isdigit() else -1, (None, None))
        if code is None:
            continue
        rep.exit_code = code
        rep.ended = ended or rep.ended
        if rep.state == AppState.FAILED and code == 0:
            rep.state = AppState.SUCCEEDED


def stopped_at(job: dict[str, Any]) -> float | None:
    return job["stoppedAt"] / 1000 if job.get("stoppedAt") else None


Exits = dict[int, tuple[int | None, float | None]]


def node_exits(
    job: dict[str, Any],
    describe: Callable[[list[str]], list[dict[str, Any]]],
    summaries: Callable[[str, str], Iterable[dict[str, Any]]],
) -> Exits:
    """Each node's (exit code, end) of an ended job: a container job's own; a multi-node
    job's from its node jobs ``ID#N`` (one ``describe`` call), else, for a one-node job, from
    its ListJobs summary (``summaries(queue, name)``), which carries the container's code."""
    if not job.get("nodeProperties"):
        return {0: (container_exit(job), stopped_at(job))}
    jid = str(job["jobId"])
    count = int((job.get("nodeProperties") or {}).get("numNodes") or 1)
    nodes = {j.get("jobId"): j for j in describe([f"{jid}#{k}" for k in range(count)])}
    exits: Exits = {
        k: (container_exit(nodes[f"{jid}#{k}"]), stopped_at(nodes[f"{jid}#{k}"]))
        for k in range(count)
        if f"{jid}#{k}" in nodes
    }
    if not exits and count == 1:
        for summary in summaries(str(job["jobQueue"]), str(job["jobName"])):
            if summary.get("jobId") == jid:
                exits = {0: (container_exit(summary), stopped_at(job))}
    return exits


__all__ = [
    "apply_exits",
    "cancel_ending",
    "container_exit",
    "node_exits",
    "stopped_at",
    "time_limit",
]
