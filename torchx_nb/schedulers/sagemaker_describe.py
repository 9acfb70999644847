"""A SageMaker ``DescribeTrainingJob`` answer read into a ``DescribeAppResponse``: its state
(a job still starting is PENDING, one stopped by its own time limit FAILED), the role it
ran (the bootstrap's wrapping and variables taken off), each instance's exit code and who
stopped it. Pure functions over the answer."""

from __future__ import annotations

from typing import Any

from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.sagemaker_status import (
    out_of_memory,
    replica_exits,
    status_message,
    time_limit,
)
from torchx_nb.schedulers.sagemaker_stop import stop_ending
from torchx_nb.specs.api import (
    AppState,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    is_terminal,
)

#: the variables holding the bootstrap's chunks: the request's, left out of a described role
BOOT_ENV = "TORCHX_NB_SM_BOOT"
STATES = {
    "InProgress": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Stopping": AppState.RUNNING,
    "Stopped": AppState.CANCELLED,
}
# InProgress jobs whose SecondaryStatus says no instance runs the container yet
WAITING = {
    "Starting",
    "Pending",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
    "Restarting",
}


def job_response(
    app_id: str, job: dict[str, Any], region: str, stopped_by: str | None = None
) -> DescribeAppResponse:
    """The status of a DescribeTrainingJob answer; a failed replica's exit code is the one
    its bootstrap wrote into the failure reason; a stopped job says who stopped it
    (``stopped_by``: torchx_nb's tag, '' for none, None when not read)."""
    state = STATES.get(job.get("TrainingJobStatus", ""), AppState.UNKNOWN)
    secondary = str(job.get("SecondaryStatus") or "")
    if state == AppState.RUNNING and secondary in WAITING:
        state = AppState.PENDING
    limit = time_limit(job)
    if limit is not None:
        state = AppState.FAILED  # Stopped by its own limit, not by anyone: a failure
    ending, next_step = limit or ("", "")
    exits = replica_exits(job) if state == AppState.FAILED else {}
    algo = job.get("AlgorithmSpecification", {})
    res = job.get("ResourceConfig", {})
    count = int(res.get("InstanceCount", 1))
    entry = list(algo.get("ContainerEntrypoint") or [""])
    if entry[:2] == ["/bin/sh", "-c"] and len(entry) == 5 and entry[3] == "torchx-nb":
        entry = entry[4:]
    env = {k: v for k, v in (job.get("Environment") or {}).items() if not k.startswith(BOOT_ENV)}
    role = Role(
        name="sagemaker",
        image=algo.get("TrainingImage", ""),
        entrypoint=entry[0],
        args=[*entry[1:], *algo.get("ContainerArguments", [])],
        num_replicas=count,
        env=env,
        resource=Resource(-1, -1, -1),
    )
    resp = DescribeAppResponse(
        app_id=app_id,
        state=state,
        num_restarts=0,
        ui_url=(
            f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{app_id}"
        ),
        roles=[role],
        roles_statuses=[
            RoleStatus(
                "sagemaker",
                [
                    ReplicaStatus(
                        i,
                        state,
                        "sagemaker",
                        f"algo-{i + 1}",
                        oom=state == AppState.FAILED and out_of_memory(job),
                        exit_code=exits.get(i),
                        ending=ending,
                        next_step=next_step,
                    )
                    for i in range(count)
                ],
            )
        ],
        started=epoch(job.get("TrainingStartTime")),
        ended=epoch(job.get("TrainingEndTime")) if is_terminal(state) else None,
    )
    resp.msg = status_message(job)
    if state == AppState.CANCELLED and stopped_by is not None:
        ending = stop_ending(stopped_by)
        resp.msg = f"it {ending}"
        for rep in resp.roles_statuses[0].replicas:
            rep.ending = ending
    return resp


def epoch(value: Any) -> float | None:
    """boto3 gives datetimes; a JSON-decoded response may give epoch numbers."""
    if value is None:
        return None
    return value.timestamp() if hasattr(value, "timestamp") else float(value)
