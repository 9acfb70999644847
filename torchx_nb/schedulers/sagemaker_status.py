"""What a SageMaker training job is doing, in words: its ``SecondaryStatus`` with the
message of its latest transition (SageMaker's own sentence), the next step where there is
one, and whether its ``FailureReason`` says it ran out of memory. Pure functions over a
``DescribeTrainingJob`` response."""

from __future__ import annotations

import re
from typing import Any

# SecondaryStatus -> what it means while the job waits or winds down
_WORDS: dict[str, str] = {
    "Starting": "SageMaker is starting the job",
    "Pending": "waiting for SageMaker to start it",
    "LaunchingMLInstances": "launching the instances",
    "PreparingTrainingStack": "preparing the training stack",
    "Downloading": "downloading the input data",
    "DownloadingTrainingImage": "pulling the image {image}",
    "Training": "training",
    "Uploading": "uploading the outputs",
    "Stopping": "stopping",
    "Restarting": "restarting after a failure",
    "Interrupted": "its spot instances were interrupted",
    "MaxRuntimeExceeded": "it ran longer than -cfg max_run allows",
    "MaxWaitTimeExceeded": "it waited longer than -cfg max_wait allows for spot capacity",
}
_OOM = re.compile(r"out ?of ?memory|OutOfMemory|OOM|with more memory", re.I)
_CAPACITY = re.compile(r"capacity|ResourceLimitExceeded", re.I)


def status_message(job: dict[str, Any]) -> str:
    """``SecondaryStatus: words (SageMaker's message)``, and the failure reason with its next
    step once it failed."""
    secondary = str(job.get("SecondaryStatus") or "")
    image = str((job.get("AlgorithmSpecification") or {}).get("TrainingImage", ""))
    words = _WORDS.get(secondary, "").format(image=image)
    if words.lower() == secondary.lower():
        words = ""  # "Training: training" says nothing more
    transitions = job.get("SecondaryStatusTransitions") or []
    said = str(transitions[-1].get("StatusMessage") or "") if transitions else ""
    reason = str(job.get("FailureReason") or "")
    if reason:
        step = ""
        if out_of_memory(job):
            step = "; it ran out of memory: a larger -cfg instance_type, or less per instance"
        elif _CAPACITY.search(reason):
            step = "; no capacity for the instance type: another type or region, or retry later"
        head = f"{secondary}: " if secondary else ""
        return f"{head}{reason}{step}"
    parts = [p for p in (words, said) if p]
    if not secondary:
        return said
    if len(parts) == 2 and said.lower().rstrip(".") != words.lower():
        return f"{secondary}: {words} ({said})"
    return f"{secondary}: {parts[0]}" if parts else secondary


def time_limit(job: dict[str, Any]) -> tuple[str, str] | None:
    """(what ended it, the next step) for a job SageMaker stopped at a limit of its
    ``StoppingCondition`` (its status is then Stopped, though nobody stopped it); None for
    any other job."""
    found = _LIMITS.get(str(job.get("SecondaryStatus") or ""))
    if found is None:
        return None
    from torchx_nb.specs.durations import fmt_duration

    field, what, next_step = found
    limit = (job.get("StoppingCondition") or {}).get(field)
    said = f" of {fmt_duration(float(limit))}" if limit else ""
    return f"was stopped at its {what}{said} ({field})", next_step


# SageMaker's secondary status at a limit → (its StoppingCondition field, the limit in words,
# the next step)
_LIMITS = {
    "MaxRuntimeExceeded": (
        "MaxRuntimeInSeconds",
        "time limit",
        "raise the limit with -cfg max_run=SECONDS (up to 28 days)",
    ),
    "MaxWaitTimeExceeded": (
        "MaxWaitTimeInSeconds",
        "wait limit for spot capacity",
        "raise -cfg max_wait=SECONDS, or run without -cfg use_spot_instances",
    ),
}


def out_of_memory(job: dict[str, Any]) -> bool:
    """Whether SageMaker's failure reason says the job ran out of memory."""
    return bool(_OOM.search(str(job.get("FailureReason") or "")))


# what the bootstrap (aws_sagemaker.BOOTSTRAP) writes for a replica that failed, and SageMaker
# passes on as its FailureReason: "bash exited with code 3 on algo-2 (replica 1)"
_EXITED = re.compile(r"exited with code (\d+) on \S+ \(replica (\d+)\)")


def replica_exits(job: dict[str, Any]) -> dict[int, int]:
    """Each failed replica's exit code, from the lines our bootstrap wrote to
    ``/opt/ml/output/failure`` (SageMaker's ``FailureReason``); empty when it says none."""
    found: dict[int, int] = {}
    for code, replica in _EXITED.findall(str(job.get("FailureReason") or "")):
        found.setdefault(int(replica), int(code))
    return found


__all__ = [
    "out_of_memory",
    "replica_exits",
    "status_message",
    "time_limit",
]
