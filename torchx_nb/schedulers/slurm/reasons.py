"""Why a Slurm job waits, in words, with the next step: Slurm's own reason codes (squeue's
``state_reason``, slurm's ``job_reason`` names) translated. Pure data and one function; the
code stays in the text so it can be looked up."""

from __future__ import annotations

# code -> (why, next step); {id} is the job's id
_REASONS: dict[str, tuple[str, str]] = {
    "Resources": (
        "the nodes, CPUs, memory or GPUs it asks for are in use by other jobs",
        "it starts when they free up",
    ),
    "Priority": (
        "jobs of higher priority wait ahead of it in the partition",
        "it starts after them",
    ),
    "JobHeldAdmin": (
        "an administrator holds it",
        "it will not start until released: ask an administrator to `scontrol release {id}`",
    ),
    "JobHeldUser": (
        "it is held (by you, or held at submit)",
        "release it with `scontrol release {id}`",
    ),
    "Dependency": ("it waits for the jobs it depends on to end", "it starts after them"),
    "DependencyNeverSatisfied": (
        "a job it depends on ended in a way its dependency rules out",
        "it can never start: cancel it",
    ),
    "BeginTime": ("it waits for its start time (--begin)", "it starts then"),
    "ReqNodeNotAvail": (
        "a node it needs is unavailable (down, drained or reserved)",
        "check `sinfo -R`; it starts when the node is back",
    ),
    "NodeDown": ("a node it needs is down", "check `sinfo -R`"),
    "PartitionDown": ("its partition is down", "ask an administrator, or pick another partition"),
    "PartitionInactive": ("its partition is inactive", "pick another partition"),
    "PartitionTimeLimit": (
        "its time limit is longer than the partition allows",
        "it can never start there: resubmit with a shorter -cfg time or another partition",
    ),
    "PartitionNodeLimit": (
        "it asks for more nodes than the partition allows",
        "it can never start there: fewer replicas, or another partition",
    ),
    "PartitionConfig": (
        "it asks for more than the partition's nodes have (CPUs, memory, GPUs or features)",
        "it can never start there: ask for less, or pick another partition",
    ),
    "BadConstraints": (
        "no node matches its constraints",
        "it can never start: change -cfg constraint",
    ),
    "InvalidAccount": ("its account is not valid", "it can never start: fix -cfg account"),
    "InvalidQOS": ("its QOS is not valid", "it can never start: fix -cfg qos"),
    "Reservation": ("it waits for its reservation to start", "it starts then"),
    "Licenses": ("the licenses it needs are in use", "it starts when they free up"),
    "JobArrayTaskLimit": (
        "its array runs at most --max-parallel tasks at once",
        "it starts as earlier tasks end",
    ),
}


def pending_reason(code: str, job_id: str) -> str:
    """Why the job waits and what to do, for Slurm's reason ``code``."""
    found = _REASONS.get(code)
    if found is None and code.startswith("QOS"):
        found = (
            f"a limit of its QOS holds it ({code})",
            "it starts when your running jobs drop under the limit; `sacctmgr show qos` lists them",
        )
    elif found is None and code.startswith("Assoc"):
        found = (
            f"a limit of your account's association holds it ({code})",
            "it starts when your running jobs drop under the limit; `sacctmgr show assoc` lists them",
        )
    if found is None:
        return f"pending: {code} (Slurm's reason; `scontrol show job {job_id}` says more)"
    why, step = found
    return f"pending ({code}): {why}; {step.format(id=job_id)}"


__all__ = ["pending_reason"]
