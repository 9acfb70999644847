"""Why an AWS Batch job stays RUNNABLE, from its queue's compute environments: the famous
'stuck in RUNNABLE' with no reason shown. Past a grace period the job's queue and its compute
environments are read (one call each per queue, per describe round) and the reason names the
environment and the fix: disabled, invalid (with Batch's own reason), or too small for the
job (maxvCpus below its vCPUs: it can never start there)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

GRACE_S = 60.0


def job_vcpus(job: dict[str, Any]) -> int:
    """The vCPUs the job asks for at once (all its nodes, for a multi-node job)."""
    total = 0
    ranges = (job.get("nodeProperties") or {}).get("nodeRangeProperties") or [
        {"targetNodes": "0", "container": job.get("container") or {}}
    ]
    for rng in ranges:
        lo, _, hi = str(rng.get("targetNodes", "0")).partition(":")
        nodes = (int(hi) if hi else int(lo or 0)) - int(lo or 0) + 1
        reqs = (rng.get("container") or {}).get("resourceRequirements") or []
        vcpu = next((int(r["value"]) for r in reqs if r.get("type") == "VCPU"), 1)
        total += max(nodes, 1) * vcpu
    return total


def job_node_needs(job: dict[str, Any]) -> tuple[int, int]:
    """The largest memory (MiB) and GPU count one of the job's nodes asks for."""
    ranges = (job.get("nodeProperties") or {}).get("nodeRangeProperties") or [
        {"container": job.get("container") or {}}
    ]
    mem = gpu = 0
    for rng in ranges:
        reqs = {
            r.get("type"): int(r["value"])
            for r in (rng.get("container") or {}).get("resourceRequirements") or []
        }
        mem, gpu = max(mem, reqs.get("MEMORY", 0)), max(gpu, reqs.get("GPU", 0))
    return mem, gpu


def no_instance_fits(job: dict[str, Any], types: list[str]) -> str | None:
    """Why none of ``types`` can hold one of the job's nodes (its memory or GPUs); None when
    one can, or when a type is not in our table ("optimal", families), which may."""
    from torchx_nb.specs.named_resources_aws import instance_shape

    mem, gpu = job_node_needs(job)
    shapes = [instance_shape(t) for t in types]
    if not types or any(s is None for s in shapes):
        return None
    if all(s is not None and s[1] < gpu for s in shapes):
        most = max(s[1] for s in shapes if s is not None)
        return f"a node needs {gpu} GPUs and its instance types ({', '.join(types)}) have at most {most}"
    if all(s is not None and s[2] < mem for s in shapes):
        most = max(s[2] for s in shapes if s is not None)
        return (
            f"a node needs {mem} MiB of memory and its instance types ({', '.join(types)}) have"
            f" at most {most} MiB"
        )
    return None


def runnable_reason(
    job: dict[str, Any],
    environments_of: Callable[[str], list[dict[str, Any]]],
    now: float | None = None,
    grace: float = GRACE_S,
) -> str | None:
    """Why a RUNNABLE job waits, or None (not RUNNABLE, within the grace period, or nothing
    found that holds it). ``environments_of(queue)``: the queue's compute environments."""
    if job.get("status") != "RUNNABLE":
        return None
    since = (job.get("createdAt") or 0) / 1000
    waited = (now or time.time()) - since
    if since and waited < grace:
        return None
    queue = str(job.get("jobQueue") or "")
    envs = environments_of(queue)
    name = queue.rsplit("/", 1)[-1]
    if not envs:
        return f"RUNNABLE: the queue {name} has no compute environment: add one to the queue"
    usable = []
    problems = []
    need = job_vcpus(job)
    for env in envs:
        ce = env.get("computeEnvironmentName", "?")
        resources = env.get("computeResources") or {}
        if env.get("status") == "INVALID":
            why = env.get("statusReason") or "no reason given"
            problems.append(f"{ce} is INVALID ({why}): fix it and update it")
        elif env.get("state") == "DISABLED":
            problems.append(
                f"{ce} is DISABLED: enable it (aws batch update-compute-environment"
                f" --compute-environment {ce} --state ENABLED)"
            )
        elif resources.get("maxvCpus") is not None and int(resources["maxvCpus"]) < need:
            problems.append(
                f"{ce} allows at most {resources['maxvCpus']} vCPUs (maxvCpus) and the job"
                f" needs {need}: it can never start there; raise maxvCpus or ask for less"
            )
        elif misfit := no_instance_fits(job, list(resources.get("instanceTypes") or [])):
            problems.append(
                f"in {ce} {misfit}: it can never start there; add a larger instance type or"
                " ask for less"
            )
        else:
            usable.append(ce)
    if usable:
        return None
    minutes = int(waited // 60)
    return f"RUNNABLE for {minutes} min: " + "; ".join(problems)


__all__ = ["GRACE_S", "job_node_needs", "job_vcpus", "no_instance_fits", "runnable_reason"]
