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
  before (nothing could tell the program's failures from preemptions)."""

from __future__ import annotations

from typing import Any

from torchx_nb.apps.cell_runner.checkpoint import RETRIES_SPENT_EXIT
from torchx_nb.specs.api import InvalidRunConfigException

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
