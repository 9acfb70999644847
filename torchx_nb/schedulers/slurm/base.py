"""``SlurmJobs``: what the Slurm scheduler and its parts (logs, arrays, preemption) share —
the commands' environment, the index of submitted jobs, the queue and a job's folder — so
each part calls real methods, not stubs."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from torchx_nb.schedulers.api import Scheduler
from torchx_nb.schedulers.slurm.commands import SlurmError, run_slurm
from torchx_nb.schedulers.slurm.index import recall, remember
from torchx_nb.schedulers.slurm.jobs import Job, errors, parse_jobs
from torchx_nb.schedulers.slurm.options import SlurmOpts
from torchx_nb.schedulers.slurm.request import SlurmBatchRequest


class SlurmJobs(Scheduler[SlurmOpts]):
    """The base of ``SlurmScheduler`` and of its parts."""

    #: the environment Slurm's commands get (None: this process's)
    _env: dict[str, str] | None = None

    def _command_env(self) -> dict[str, str]:
        """The environment sbatch (and so every srun, through ``--export=ALL``) sees: ours,
        with this Python's bin folder first on PATH, so ``python`` and ``torchrun`` in the job
        are the kernel's."""
        env = dict(self._env if self._env is not None else os.environ)
        bindir = os.path.dirname(sys.executable)
        parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir]
        env["PATH"] = os.pathsep.join([bindir, *parts])
        return env

    def _remember(
        self, job_id: str, req: SlurmBatchRequest, workdir: str, script: str = ""
    ) -> None:
        remember(self.session_name, job_id, req, workdir, script)

    def _recall(self, job_id: str) -> dict[str, Any] | None:
        return recall(self.session_name, job_id)

    def _squeue(self) -> dict[str, Job]:
        """Every job of the user still in the queue, from one squeue call (22.05 ignores
        ``-j``; we filter ourselves, which also keeps the call count at one)."""
        out = run_slurm(["squeue", "--json", "--me"], self._command_env())
        doc = json.loads(out or "{}")
        failed = errors(doc)
        if failed:  # squeue exits 0 with an empty list when the controller does not answer
            raise SlurmError(
                f"squeue: {'; '.join(failed)[:300]}: the Slurm controller does not answer;"
                " check it with `scontrol ping`"
            )
        return parse_jobs(doc)

    def _workdir(self, app_id: str) -> str:
        known = self._recall(app_id)
        if known and known.get("workdir"):
            return str(known["workdir"])
        desc = self.describe(app_id)
        if desc is None or not desc.metadata.get("workdir"):
            raise FileNotFoundError(f"Slurm knows no job {app_id} (nor where its logs are)")
        return desc.metadata["workdir"]
