"""aws_batch on spot capacity: the job definition's ``retryStrategy`` that retries a reclaimed
host without spending the program's retries, and the dry run's word on a queue with no spot
compute environment (on AWS Batch, spot is the queue's, not the job's)."""

from __future__ import annotations

from typing import Any

from torchx_nb.apps.cell_runner.checkpoint import RETRIES_SPENT_EXIT
from torchx_nb.specs.preemption import Preemption

MAX_ATTEMPTS = 10  # Batch's attempts, in total, program retries and reclaims together
RECLAIMED = "Host EC2*"  # the status reason of an attempt whose EC2 host was terminated
SPOT_TYPES = ("SPOT", "FARGATE_SPOT")


def retry_strategy(max_retries: int, max_preemptions: int, ledger: bool) -> dict[str, Any]:
    """Batch's ``retryStrategy`` (at most 5 ``evaluateOnExit`` rules, first match wins, an
    attempt no rule matches is retried). A reclaimed host is retried; exit 0 ends the job; exit
    171 (the job's ledger: the program failed more often than max_retries) ends it. A program
    failure is retried only when ``max_retries`` > 0 and the job keeps a ledger (a checkpoint
    store: output_path) to count its failures apart from the reclaims; with no ledger, the
    attempts are max_retries + 1 as before and a reclaim spends one of them."""
    rules: list[dict[str, str]] = [
        {"onStatusReason": RECLAIMED, "action": "RETRY"},
        {"onExitCode": str(RETRIES_SPENT_EXIT), "action": "EXIT"},
        {"onExitCode": "0", "action": "EXIT"},
    ]
    if max_retries == 0:
        rules.append({"onStatusReason": "*", "action": "EXIT"})  # anything else: no retry
        attempts = 1 + max_preemptions
    elif ledger:
        attempts = max_retries + 1 + max_preemptions
    else:
        attempts = max_retries + 1
    return {"attempts": max(1, min(MAX_ATTEMPTS, attempts)), "evaluateOnExit": rules}


def spot_note(queue: str, environments: list[dict[str, Any]]) -> str | None:
    """One line when none of ``queue``'s compute environments is SPOT or FARGATE_SPOT."""
    types = [
        str((ce.get("computeResources") or {}).get("type") or ce.get("type") or "?")
        for ce in environments
    ]
    if any(t in SPOT_TYPES for t in types):
        return None
    said = ", ".join(dict.fromkeys(types)) or "none"
    return (
        f"spot: queue {queue!r} has no SPOT compute environment (types: {said}); on AWS Batch"
        " spot is the queue's: give -cfg queue=Q of a queue with a SPOT or FARGATE_SPOT one"
    )


def reclaims(job: dict[str, Any]) -> list[Preemption]:
    """Each attempt of a DescribeJobs ``job`` whose EC2 host was terminated (its status reason
    matches the RETRY rule), oldest first, with when the next attempt started."""
    attempts = job.get("attempts") or []
    out = []
    for i, attempt in enumerate(attempts):
        if not str(attempt.get("statusReason") or "").startswith(RECLAIMED.rstrip("*")):
            continue
        stopped = attempt.get("stoppedAt") or attempt.get("startedAt")
        if not stopped:
            continue
        nxt = attempts[i + 1].get("startedAt") if i + 1 < len(attempts) else None
        out.append(
            Preemption(
                at=stopped / 1000,
                why="spot capacity reclaimed: its EC2 host was terminated",
                resumed_at=nxt / 1000 if nxt else None,
            )
        )
    return out
