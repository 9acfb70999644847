"""gcp_batch on Spot VMs: ``spot`` as the alias of ``provisioning_model=spot``, and the task's
retries, so that a Spot preemption (exit 50001) is retried and the program's own failure only
per ``max_retries``.

GCP Batch's lifecycle policies act on the exit codes they name and take "the opposite action
for all unspecified failures"; what happens with RETRY_TASK and FAIL_TASK policies together is
not documented, so a job gets policies of one kind only:

- ``max_retries`` 0: RETRY_TASK on 50001; anything else fails the task.
- ``max_retries`` > 0 and a checkpoint ledger (``output_path``): FAIL_TASK on 171 (the ledger
  says the program already failed ``max_retries`` times); anything else, 50001 included, is
  retried, up to ``maxRetryCount = min(10, max_retries + max_preemptions)``.
- ``max_retries`` > 0 without a ledger: no policy and ``maxRetryCount = max_retries`` as
  before (nothing could tell the program's failures from preemptions).

Past ``maxRetryCount`` (at most 10) a task preempted again fails the job; torchx_nb then
creates the job again as ``ID-a2`` (``-a3``…), the next attempt of the same handle, up to the
job's ``max_preemptions``."""

from __future__ import annotations

import re
from typing import Any

from torchx_nb.apps.cell_runner.checkpoint import RETRIES_SPENT_EXIT
from torchx_nb.specs.api import AppState, InvalidRunConfigException, ReplicaStatus

PREEMPTED_EXIT = 50001  # GCP Batch's exit code of a task whose Spot VM was preempted
MAX_RETRY_COUNT = 10  # GCP Batch's cap on a task's maxRetryCount


def provisioning(spot: bool, provisioning_model: str | None) -> str:
    """The provisioning model (STANDARD, SPOT, PREEMPTIBLE); ``spot`` with another model
    given is one line."""
    given = (provisioning_model or "").strip()
    if spot and given and given.upper() != "SPOT":
        raise InvalidRunConfigException(
            f"spot=True and provisioning_model={given} disagree (spot is the alias of"
            " provisioning_model=spot): give only one of them",
            "spot",
        )
    return "SPOT" if spot else (given or "standard").upper()


def retries(max_retries: int, max_preemptions: int, ledger: bool) -> tuple[int, list[Any]]:
    """The task's ``maxRetryCount`` and its ``lifecyclePolicies`` (see the module's text)."""
    from google.cloud import batch_v1

    Policy = batch_v1.LifecyclePolicy

    def policy(action: Any, code: int) -> Any:
        return Policy(action=action, action_condition=Policy.ActionCondition(exit_codes=[code]))

    if max_retries <= 0:
        count = max_preemptions
        policies = [policy(Policy.Action.RETRY_TASK, PREEMPTED_EXIT)]
    elif ledger:
        count = max_retries + max_preemptions
        policies = [policy(Policy.Action.FAIL_TASK, RETRIES_SPENT_EXIT)]
    else:
        count, policies = max_retries, []
    return max(0, min(MAX_RETRY_COUNT, count)), policies


# GCP Batch's job ids: a lowercase letter first, then lowercase letters, digits and hyphens,
# ending with a letter or digit, 63 characters at most
MAX_JOB_ID = 63
_ATTEMPT_SUFFIX = re.compile(r"^(?P<base>.+)-a(?P<n>\d+)$")


def ended_preempted(state: AppState, replicas: list[ReplicaStatus]) -> bool:
    """The job ended FAILED because its tasks' last runs were preempted (exit 50001) past
    ``maxRetryCount`` (≤ 10): GCP Batch will not run it again by itself."""
    failed = [r for r in replicas if r.state == AppState.FAILED]
    return (
        state == AppState.FAILED
        and bool(failed)
        and all(r.exit_code == PREEMPTED_EXIT for r in failed)
    )


def next_job_id(job_id: str) -> str:
    """The job id of the next native job: ``ID-a2``, then ``ID-a3``… (ids are unique in a
    project and location), cut to GCP's 63 characters."""
    m = _ATTEMPT_SUFFIX.match(job_id)
    base, n = (m["base"], int(m["n"]) + 1) if m else (job_id, 2)
    suffix = f"-a{n}"
    return base[: MAX_JOB_ID - len(suffix)].rstrip("-") + suffix


def again_job(job: Any) -> Any:
    """A copy of the described ``job`` to create again: its task groups, allocation policy,
    labels and logs policy (the task's environment carries the outputs and the checkpoint
    store, so they stay the first job's), without the fields GCP Batch sets itself."""
    from google.cloud import batch_v1

    new = batch_v1.Job(
        task_groups=list(job.task_groups),
        allocation_policy=job.allocation_policy,
        labels=dict(job.labels),
        logs_policy=job.logs_policy,
    )
    for group in new.task_groups:
        group.name = ""
    return new
