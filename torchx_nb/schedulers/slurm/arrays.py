"""A cell sweep as one job array (``--array``, ``%N`` for at most N at once): each trial a task."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from torchx_nb.schedulers.abilities import (
    SubmitsArrays,
)
from torchx_nb.schedulers.slurm.commands import (
    run_slurm,
)
from torchx_nb.schedulers.slurm.request import (
    SlurmBatchRequest,
    _fmt_request,
    check_job_id,
)
from torchx_nb.specs.api import (
    AppDryRunInfo,
)


class SlurmArrays(SubmitsArrays):
    """A cell sweep as one job array (``--array``, ``%N`` for at most N at once): each trial a task."""

    if TYPE_CHECKING:

        def _command_env(self) -> dict[str, str]: ...

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
