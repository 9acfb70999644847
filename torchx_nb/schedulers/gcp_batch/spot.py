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
job's ``max_preemptions`` — once (the id is the previous one's, so a create that finds it
ALREADY_EXISTS, labelled as following it, was sent before; one not so labelled is someone
else's, passed over for the next id), and without a ledger with what is left of ``max_retries``
after the earlier jobs' failures (``budget_labels``)."""

from __future__ import annotations

import re
from typing import Any

from torchx_nb.apps.cell_runner.checkpoint import RECLAIMED_ENV, RETRIES_SPENT_EXIT, add_reclaimed
from torchx_nb.schedulers.outputs import budget_count, counts_failures, trial_env
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
_TRIAL_SUFFIX = re.compile(r"^(?P<base>.+)(?P<trial>-t\d+)$")
# a job without a ledger carries its retry budget in its labels, for the one that creates it
# again
RETRIES_LABEL = "torchx_nb_retries_left"
PREEMPTIONS_LABEL = "torchx_nb_max_preemptions"


# a job created again: the uid of the job it follows (a job of the next id without it is not ours)
AGAIN_OF_LABEL = "torchx_nb_again_of"
TAKEN_IDS = 5  # next ids found taken by jobs that are not ours, before giving up in one line
OURS = "torchx_nb_"  # our labels' prefix: no label of the user's may start with it


def check_labels(keys: list[str]) -> None:
    """One line when a label of the user's (``-cfg labels``, the app's metadata, as GCP label
    keys) is one of ours (``torchx_nb_…``): the job created again reads its budget from them."""
    taken = sorted({k for k in keys if k.startswith(OURS)})
    if taken:
        raise InvalidRunConfigException(
            f"the label {', '.join(taken)} is torchx_nb's own (labels starting with {OURS} carry"
            " a job's retry budget): rename it in -cfg labels or the app's metadata",
            "labels",
        )


def _uid_label(job: Any) -> str:
    """``job``'s uid as a label value (lowercase letters, digits, ``_`` and ``-``, 63 at most)."""
    return re.sub(r"[^a-z0-9_-]", "_", str(job.uid).lower())[:63]


def follows(there: Any, job: Any) -> bool:
    """The described job ``there`` was created again from ``job`` by torchx_nb."""
    return bool(job.uid) and there.labels.get(AGAIN_OF_LABEL) == _uid_label(job)


def has_ledger(job: Any) -> bool:
    """The described ``job`` keeps a checkpoint ledger that counts its failures against
    max_retries (its task's environment has the store and the job's max_retries, as
    ``output_path`` sets them): then the ledger counts them, never its labels. A store of the
    user's own (``TORCHX_NB_CHECKPOINT_URL`` in the role's env) keeps a ledger that knows no
    max_retries: its budget is in its labels."""
    return any(counts_failures(g.task_spec.environment.variables) for g in job.task_groups)


def budget_labels(max_retries: int, max_preemptions: int, ledger: bool) -> dict[str, str]:
    """The labels of a job with no ledger (no checkpoint store): the program retries each
    task may still spend and the preemption limit, read when it is created again past
    ``maxRetryCount`` (with a ledger, the ledger counts the program's failures across every
    job)."""
    if ledger:
        return {}
    return {RETRIES_LABEL: str(max(0, max_retries)), PREEMPTIONS_LABEL: str(max_preemptions)}


def task_failures(tasks: list[Any]) -> int:
    """The most failures of the program in one task (GCP's ``maxRetryCount`` is each
    task's): its executions that ended with an exit code other than 0 and 50001 (a Spot
    preemption)."""
    most = 0
    for task in tasks:
        codes = [
            int(ev.task_execution.exit_code)
            for ev in task.status.status_events
            if ev.task_execution and ev.task_state.name == "FAILED"
        ]
        most = max(most, sum(c not in (0, PREEMPTED_EXIT) for c in codes))
    return most


def ended_preempted(state: AppState, replicas: list[ReplicaStatus]) -> bool:
    """The job ended FAILED because its tasks' last runs were preempted (exit 50001) past
    ``maxRetryCount`` (≤ 10): GCP Batch will not run it again by itself."""
    failed = [r for r in replicas if r.state == AppState.FAILED]
    return (
        state == AppState.FAILED
        and bool(failed)
        and all(r.exit_code == PREEMPTED_EXIT for r in failed)
    )


def preemptible(job: Any) -> bool:
    """The described ``job`` runs on Spot (or preemptible) VMs: its tasks' events, not its
    state, say when GCP Batch preempted and retried one."""
    return any(
        getattr(i.policy.provisioning_model, "name", "") in ("SPOT", "PREEMPTIBLE")
        for i in job.allocation_policy.instances
    )


def next_job_id(job_id: str) -> str:
    """The job id of the next native job: ``ID-a2``, then ``ID-a3``… (ids are unique in a
    project and location), cut to GCP's 63 characters."""
    m = _ATTEMPT_SUFFIX.match(job_id)
    base, n = (m["base"], int(m["n"]) + 1) if m else (job_id, 2)
    # a trial's chain (ID-tINDEX-aN) keeps its index: only ID is cut
    t = _TRIAL_SUFFIX.match(base) if m else None
    suffix = f"{t['trial'] if t else ''}-a{n}"
    base = t["base"] if t else base
    return base[: MAX_JOB_ID - len(suffix)].rstrip("-") + suffix


def trial_job_id(job_id: str, index: int) -> str:
    """The job id of a sweep trial's next job: ``ID-tINDEX-a2`` (GCP runs no single task of a
    job again), ``ID`` cut so that ``-a99`` still fits GCP's 63 characters (trials of one job
    past the cap are distinct jobs, each chain of its own; past ``-a99`` ``next_job_id`` cuts
    ``ID`` again, never the index)."""
    trial = f"-t{index}"
    return job_id[: MAX_JOB_ID - len(trial) - len("-a99")].rstrip("-") + trial + "-a2"


def again_job(job: Any, failed: int = 0, trial: int | None = None) -> Any:
    """A copy of the described ``job`` to create again: its task groups, allocation policy,
    labels and logs policy (the task's environment carries the outputs and the checkpoint
    store, so they stay the first job's), without the fields GCP Batch sets itself. A job with
    no ledger carries its retry budget (``budget_labels``): the copy's tasks may spend what is
    left of it after ``failed`` failures (the most of one task: ``task_failures``), a label
    missing or not a whole number counting 0 (never more than it had). Its label
    ``AGAIN_OF_LABEL`` is ``job``'s uid: the job it follows. ``trial``:
    the index of the sweep's trial (a task of ``job``) it runs again, as a job of one task
    with its index in ``TRIAL_INDEX_ENV``, which ``$TORCHX_NB_TRIAL_FROM`` then names."""
    from google.cloud import batch_v1

    new = batch_v1.Job(
        task_groups=list(job.task_groups),
        allocation_policy=job.allocation_policy,
        labels=dict(job.labels),
        logs_policy=job.logs_policy,
    )
    for group in new.task_groups:
        group.name = ""
        # the job preempted: its tasks' last runs, which a ledger would otherwise call the
        # program's failures when their container was killed without a SIGTERM
        env = group.task_spec.environment.variables
        env[RECLAIMED_ENV] = add_reclaimed(env.get(RECLAIMED_ENV, ""), [job.uid])
        if trial is not None:  # BATCH_TASK_INDEX is GCP's, and 0 in a job of one task
            group.task_count, group.parallelism = 1, 1
            env.update(trial_env(str(trial)))
    new.labels[AGAIN_OF_LABEL] = _uid_label(job)
    if not has_ledger(job):  # its budget in its labels; with a ledger, labels are the user's
        left = max(0, budget_count(new.labels, RETRIES_LABEL) - failed)
        limit = budget_count(new.labels, PREEMPTIONS_LABEL)
        new.labels.update({RETRIES_LABEL: str(left), PREEMPTIONS_LABEL: str(limit)})
        count, policies = retries(left, limit, ledger=False)
        for group in new.task_groups:
            group.task_spec.max_retry_count = count
            group.task_spec.lifecycle_policies = policies
    return new
