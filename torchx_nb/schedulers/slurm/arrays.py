"""A cell sweep as one job array (``--array``, ``%N`` for at most N at once): each trial a task."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from torchx_nb.schedulers.abilities import (
    SubmitsArrays,
)
from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.slurm.base import SlurmJobs
from torchx_nb.schedulers.slurm.commands import (
    run_slurm,
)
from torchx_nb.schedulers.slurm.jobs import task_range
from torchx_nb.schedulers.slurm.request import (
    SlurmBatchRequest,
    _fmt_request,
    check_job_id,
)
from torchx_nb.specs.api import (
    AppDryRunInfo,
    AppState,
    ReplicaStatus,
    Role,
    RoleStatus,
)


class SlurmArrays(SubmitsArrays, SlurmJobs):
    """A cell sweep as one job array (``--array``, ``%N`` for at most N at once): each trial a task."""

    def array_request(
        self, info: AppDryRunInfo[SlurmBatchRequest], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[SlurmBatchRequest]:
        """The same script as one job array: ``#SBATCH --array=0-(size-1)[%max_parallel]``."""
        req = dataclasses.replace(
            info.request, array=f"0-{size - 1}" + (f"%{max_parallel}" if max_parallel else "")
        )
        return AppDryRunInfo(req, _fmt_request)

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        return [f"{app_id}_{i}" for i in range(size)]

    def array_of(self, trial_id: str) -> str:
        """``ARRAYID`` of ``ARRAYID_INDEX``."""
        return check_job_id(trial_id).partition("_")[0]

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """``scancel ARRAYID``: Slurm cancels the array's tasks that have not ended, and those
        that have keep their end."""
        run_slurm(["scancel", check_job_id(array_id)], self._command_env())
        return True

    def removed_task(self, task_id: str, known: Iterable[str]) -> DescribeAppResponse | None:
        """A task of one of our arrays that Slurm has no record of while it still knows the
        array (``known``: the ids squeue and sacct answered): it was cancelled while it
        waited — Slurm then drops it from the array's pending record and writes no row for
        it, in squeue or sacct. None for an id the array never had (or an array submitted
        before its tasks were remembered)."""
        array, _, index = task_id.partition("_")
        recalled = self._recall(array) or {}
        spec = recalled.get("array")
        if not index.isdigit() or not isinstance(spec, str) or int(index) not in task_range(spec):
            return None
        if not any(k.partition("_")[0] == array for k in known):
            return None  # Slurm knows nothing of the array either: not ours to guess
        roles = recalled.get("roles")
        role = str(next(iter(roles))) if isinstance(roles, dict) and roles else "cell"
        state, ending = AppState.CANCELLED, "was cancelled before it started"
        return DescribeAppResponse(
            app_id=task_id,
            state=state,
            msg=f"it {ending}",
            roles_statuses=[RoleStatus(role, [ReplicaStatus(0, state, role, "", ending=ending)])],
            roles=[Role(name=role, image="", num_replicas=1)],
            metadata={"workdir": str(recalled.get("workdir") or "")},
        )
