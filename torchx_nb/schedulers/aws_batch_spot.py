"""aws_batch on spot capacity: the job definition's ``retryStrategy`` that retries a reclaimed
host without spending the program's retries, the dry run's word on a queue with no spot
compute environment (on AWS Batch, spot is the queue's, not the job's), and past Batch's cap
(``attempts`` ≤ 10 in total): a job whose last attempt was a reclaim ends FAILED there, and
torchx_nb submits it again as a new Batch job (``NAME-a2``, ``-a3``…) of the same handle, once
(a job of that name in the queue tagged as following this one is the one sent), with what is
left of the program's retries (``budget_tags``)."""

from __future__ import annotations

import re
from typing import Any

from torchx_nb.apps.cell_runner.checkpoint import RECLAIMED_ENV, RETRIES_SPENT_EXIT, add_reclaimed
from torchx_nb.schedulers.outputs import TRIAL_INDEX_ENV, budget_count, counts_failures, trial_env
from torchx_nb.specs.preemption import Preemption

MAX_ATTEMPTS = 10  # Batch's attempts, in total, program retries and reclaims together
# the status reasons of an attempt whose spot capacity was reclaimed, as Batch's RETRY rules
# match them (a glob ending in *), and what each means: an EC2 host terminated, a Fargate Spot
# task interrupted (ECS's stopped reason, which Batch gives as the attempt's)
RECLAIMED = {
    "Host EC2*": "its EC2 host was terminated",
    "Your Spot Task was interrupted*": "its Fargate Spot task was interrupted",
}
SPOT_TYPES = ("SPOT", "FARGATE_SPOT")
MAX_JOB_NAME = 128  # Batch's jobName: letters, digits, hyphens and underscores, ≤ 128
_ATTEMPT_SUFFIX = re.compile(r"^(?P<base>.+)-a(?P<n>\d+)$")
#: the tag keys that are torchx_nb's own (a user's tag may not start so: ``own_tag_line``)
OWN_TAGS = "torchx-nb/"
# a job without a ledger carries its retry budget in its tags, for the one that sends it again
RETRIES_TAG = "torchx-nb/retries-left"
PREEMPTIONS_TAG = "torchx-nb/max-preemptions"
#: a job sent again names the Batch job it follows (its jobId): how the watcher that finds a
#: job of the next name in the queue knows it is this job's next attempt, not another's
AGAIN_OF_TAG = "torchx-nb/again-of"
#: how many names taken by other jobs (``NAME-a2``, ``-a3``…) are passed over before refusing
MAX_TAKEN = 5


def retry_strategy(max_retries: int, max_preemptions: int, ledger: bool) -> dict[str, Any]:
    """Batch's ``retryStrategy`` (at most 5 ``evaluateOnExit`` rules, first match wins, an
    attempt no rule matches is retried). A reclaimed host is retried; exit 0 ends the job; exit
    171 (the job's ledger: the program failed more often than max_retries) ends it. A program
    failure is retried only when ``max_retries`` > 0 and the job keeps a ledger (a checkpoint
    store: output_path) to count its failures apart from the reclaims; with no ledger, the
    attempts are max_retries + 1 as before and a reclaim spends one of them."""
    rules: list[dict[str, str]] = [
        *({"onStatusReason": reason, "action": "RETRY"} for reason in RECLAIMED),
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


def budget_tags(max_retries: int, max_preemptions: int, ledger: bool) -> dict[str, str]:
    """The tags of a job with no ledger (no checkpoint store): the program retries it may
    still spend and its preemption limit, read when it is sent again past Batch's cap (with
    a ledger, the ledger counts the program's failures across every native job)."""
    if ledger:
        return {}
    return {RETRIES_TAG: str(max(0, max_retries)), PREEMPTIONS_TAG: str(max_preemptions)}


def own_tag_line(tags: dict[str, str]) -> str | None:
    """One line when the user's tags (the AppDef's metadata) use torchx_nb's own keys, which
    carry a job's retry budget and the job it follows: given by hand, they would be read as
    ours when the job is sent again."""
    own = sorted(k for k in tags if k.startswith(OWN_TAGS))
    if not own:
        return None
    return (
        f"metadata {', '.join(map(repr, own))}: tags starting with {OWN_TAGS!r} are torchx_nb's"
        " own on AWS Batch (a job's retry budget, the job it follows): rename them"
    )


def has_ledger(job: dict[str, Any]) -> bool:
    """The DescribeJobs ``job`` keeps a checkpoint ledger that counts its failures against
    max_retries (its definition's environment has the store and the job's max_retries, as
    ``output_path`` sets them): then the ledger counts them, not its tags. A store of the
    user's own (``TORCHX_NB_CHECKPOINT_URL`` in the role's env) keeps a ledger that knows no
    max_retries: its budget is in its tags."""
    ranges = (job.get("nodeProperties") or {}).get("nodeRangeProperties") or []
    containers = [job.get("container") or {}, *(r.get("container") or {} for r in ranges)]
    return any(
        counts_failures(str(e.get("name")) for e in c.get("environment") or []) for c in containers
    )


def failures(job: dict[str, Any]) -> int:
    """The attempts of the DescribeJobs ``job`` that were the program's failures: every one
    but a reclaim (exit 0 ends a job, so an attempt followed by another failed)."""
    return sum(not _reclaimed(a) for a in job.get("attempts") or [])


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
        what = _reclaimed(attempt)
        if not what:
            continue
        stopped = attempt.get("stoppedAt") or attempt.get("startedAt")
        if not stopped:
            continue
        nxt = attempts[i + 1].get("startedAt") if i + 1 < len(attempts) else None
        out.append(
            Preemption(
                at=stopped / 1000,
                why=f"spot capacity reclaimed: {what}",
                resumed_at=nxt / 1000 if nxt else None,
            )
        )
    return out


def _reclaimed(attempt: dict[str, Any]) -> str:
    """What reclaimed the attempt's capacity, as its status reason says; "" when nothing did."""
    reason = str(attempt.get("statusReason") or "")
    return next((what for glob, what in RECLAIMED.items() if reason.startswith(glob[:-1])), "")


def ended_reclaimed(job: dict[str, Any]) -> bool:
    """The job ended FAILED with its last attempt's host reclaimed: Batch's ``attempts`` are
    spent (or its rules said EXIT), so it will not run again by itself."""
    attempts = job.get("attempts") or []
    return job.get("status") == "FAILED" and bool(attempts) and bool(_reclaimed(attempts[-1]))


def next_name(name: str, again: bool = True) -> str:
    """The job name of the next native job: ``NAME-a2``, then ``NAME-a3``… (Batch job names
    need not be unique, but a handle's ``QUEUE:NAME`` finds its job by name), cut to Batch's
    128 characters. ``again``: ``name`` is a job torchx_nb sent again, so its ``-aN`` is ours
    (a name of the user's that ends so, ``mine-a5``, goes on as ``mine-a5-a2``)."""
    m = _ATTEMPT_SUFFIX.match(name) if again else None
    base, n = (m["base"], int(m["n"]) + 1) if m else (name, 2)
    suffix = f"-a{n}"
    return base[: MAX_JOB_NAME - len(suffix)] + suffix


def again_request(app_id: str, job: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The next native job of the Batch job ``app_id`` (``QUEUE:NAME``, described as ``job``):
    its new app id (``QUEUE:NAME-aN``) and SubmitJob's arguments — the job's own registered
    definition (its environment carries the outputs and the checkpoint store, so they stay
    the first job's), queue, tags, timeout and share. A job with no ledger carries its retry
    budget (``budget_tags``): the next one may spend what is left of it after this job's
    failures (its ``retryStrategy`` given on SubmitJob, its tag saying what is left). A
    sweep's trial (``QUEUE:NAME:INDEX``, a child of an array) is sent again as a job of its
    own, ``QUEUE:NAME-tINDEX-a2``, its index in ``TORCHX_NB_TRIAL_INDEX``. The new job's tag
    ``AGAIN_OF_TAG`` is ``job``'s jobId: the job it follows."""
    queue, _, rest = app_id.partition(":")
    array_name, _, index = rest.rpartition(":")
    child = bool(array_name) and index.isdigit()  # a sweep's trial: QUEUE:NAME:INDEX
    trial = index if child else _trial_index(job)
    # a trial runs again as a job of its own (Batch sends no single child again), named for
    # its index (NAME-t3-a2: trials of one array past the cap are distinct jobs)
    tags = dict(job.get("tags") or {})
    if child:
        name = next_name(f"{array_name}-t{index}", again=False)
    else:
        name = next_name(str(job["jobName"]), again=AGAIN_OF_TAG in tags)
    tags[AGAIN_OF_TAG] = str(job["jobId"])
    args: dict[str, Any] = {
        "jobName": name,
        "jobQueue": queue,
        "jobDefinition": job["jobDefinition"],
        "tags": tags,
    }
    # a trial's index, which the array gave it, in a variable of ours; the attempts Batch
    # reclaimed, which the job's ledger would otherwise call the program's failures when their
    # container was killed without a SIGTERM
    values = {
        **(trial_env(trial) if trial is not None else {}),
        RECLAIMED_ENV: reclaimed_tokens(job),
    }
    env = [{"name": k, "value": v} for k, v in values.items()]
    if job.get("nodeProperties"):  # a multi-node job takes its overrides per node range
        args["nodeOverrides"] = {
            "nodePropertyOverrides": [
                {"targetNodes": "0:", "containerOverrides": {"environment": env}}
            ]
        }
    else:
        args["containerOverrides"] = {"environment": env}
    if not has_ledger(job):  # its budget in its tags; with a ledger, tags of theirs are the user's
        left = max(0, budget_count(tags, RETRIES_TAG) - failures(job))
        limit = budget_count(tags, PREEMPTIONS_TAG)
        tags.update({RETRIES_TAG: str(left), PREEMPTIONS_TAG: str(limit)})
        args["retryStrategy"] = retry_strategy(left, limit, ledger=False)
    if job.get("timeout"):
        args["timeout"] = job["timeout"]
    if job.get("shareIdentifier"):
        args["shareIdentifier"] = job["shareIdentifier"]
        if job.get("schedulingPriority") is not None:
            args["schedulingPriorityOverride"] = job["schedulingPriority"]
    return f"{queue}:{name}", args


def _env(job: dict[str, Any], name: str) -> str | None:
    """The value of ``name`` in the DescribeJobs ``job``'s container environment (its main
    node's, for a multi-node job)."""
    container = job.get("container") or {}
    for group in (job.get("nodeProperties") or {}).get("nodeRangeProperties") or []:
        container = container or group.get("container") or {}
    for e in container.get("environment") or []:
        if e.get("name") == name:
            return str(e.get("value", ""))
    return None


def taken(app_id: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``again_request``'s ``app_id`` and ``args`` when its name is another job's (one not
    tagged as following this job): the next name (``NAME-a3`` for ``NAME-a2``)."""
    queue = app_id.partition(":")[0]
    name = next_name(str(args["jobName"]))
    return f"{queue}:{name}", {**args, "jobName": name}


def _trial_index(job: dict[str, Any]) -> str | None:
    """The trial index a job sent again for a sweep's trial carries (None: not one)."""
    value = _env(job, TRIAL_INDEX_ENV)
    return value if value is not None and value.isdigit() else None


def reclaimed_tokens(job: dict[str, Any]) -> str:
    """``RECLAIMED_ENV``'s value for the job sent after the DescribeJobs ``job``: the tokens
    that job was given (a job sent again more than once), each of its reclaimed attempts
    (``ID/N``: Batch's ``AWS_BATCH_JOB_ATTEMPT`` counts from 1) and its id alone (its last
    attempt, whose reclaim ended it: where the container had no attempt number)."""
    job_id = str(job.get("jobId") or "")
    mine = [f"{job_id}/{i}" for i, a in enumerate(job.get("attempts") or [], 1) if _reclaimed(a)]
    return add_reclaimed(_env(job, RECLAIMED_ENV) or "", [*mine, job_id])
