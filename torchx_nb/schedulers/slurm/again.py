"""Preempting a Slurm job on request, and sending a preempted one again.

``preempt`` is ``scontrol requeue``, as a preemption under ``PreemptMode=REQUEUE`` ends: Slurm
sends SIGTERM to the batch script and the srun tasks, SIGKILL after the cluster's ``KillWait``
(Slurm takes no grace of ours), holds the job ~2 minutes (BeginTime) and runs it again with the
same id. ``submit_again`` sends a job that Slurm ended PREEMPTED (``PreemptMode=CANCEL``) again
from the batch script kept at submit: a new job id, the next attempt of the same handle."""

from __future__ import annotations

import re
from pathlib import Path

from torchx_nb.schedulers.abilities import Preemptible, SubmitsAgain
from torchx_nb.schedulers.slurm.base import SlurmJobs
from torchx_nb.schedulers.slurm.commands import SlurmError, run_slurm
from torchx_nb.schedulers.slurm.request import check_job_id
from torchx_nb.specs.api import AppState
from torchx_nb.specs.exceptions import NotPreemptible, TorchxNbError


class SlurmPreempts(Preemptible, SubmitsAgain, SlurmJobs):
    """``preempt`` (``scontrol requeue``) and ``submit_again`` (sbatch of the kept script)."""

    #: Slurm's default KillWait: ``scontrol requeue`` waits the cluster's, not ours
    preempt_grace = 30.0
    grace_ignored = (
        "Slurm takes no grace of ours: it sends SIGKILL after the cluster's KillWait"
        " (scontrol show config | grep KillWait)"
    )

    def preempt(self, app_id: str, grace: float | None = None) -> None:
        """Requeue the running job as a preemption does (``grace`` is the cluster's
        ``KillWait``: Slurm takes none of ours). It is marked first, so its describe tells
        this requeue from the batch script's own after a failure."""
        from torchx_nb.schedulers.cancellers import canceller
        from torchx_nb.schedulers.outputs import mark_cancelled
        from torchx_nb.schedulers.slurm.preemptions import preempt_mark

        check_job_id(app_id)
        job = self._squeue().get(app_id)
        states = [c.state for c in job.components] if job else []
        if AppState.RUNNING not in states:
            said = "it is not in Slurm's queue" if job is None else "it is not running"
            raise NotPreemptible(f"Slurm job {app_id} cannot be preempted: {said}")
        mark_cancelled("slurm-preempt", app_id, canceller())
        try:
            run_slurm(["scontrol", "requeue", app_id], self._command_env())
        except SlurmError as e:
            preempt_mark(app_id).unlink(missing_ok=True)
            raise NotPreemptible(f"Slurm job {app_id} cannot be preempted: {e}") from None

    def submit_again(self, app_id: str) -> str:
        """sbatch the job's kept batch script again, from its folder; the new job id. Sent
        once: the new job's comment names the job it follows (``again of ID``), and a job in
        the queue that says so already is the one returned — a watcher killed after its
        sbatch, before the job store kept the new id, leaves it for the next to find."""
        known = self._recall(app_id) or {}
        script, cmd, workdir = known.get("script"), known.get("cmd"), known.get("workdir")
        if not (script and isinstance(cmd, list) and workdir and Path(script).is_file()):
            raise TorchxNbError(
                f"Slurm job {app_id} cannot be submitted again: its batch script"
                f" ({script or 'not recorded'}) is gone; run the job again"
            )
        mark = f"{AGAIN_OF}{app_id}"
        sent = self._sent_again(mark)
        if sent:
            return sent
        argv = [*_with_comment(cmd, mark), f"--chdir={workdir}", script]
        out = run_slurm(argv, self._command_env())
        new_id = check_job_id(out.strip().split(";", 1)[0])
        import json

        from torchx_nb.paths import write_private
        from torchx_nb.schedulers.slurm.request import _index_dir

        write_private(_index_dir(self.session_name) / f"{new_id}.json", json.dumps(known))
        return new_id

    def _sent_again(self, mark: str) -> str | None:
        """The id of a job of the user's in the queue whose comment ends with ``mark``."""
        out = run_slurm(["squeue", "--me", "-h", "-o", "%i|%k"], self._command_env())
        for line in out.splitlines():
            job, _, comment = line.partition("|")
            if comment.strip().endswith(mark):
                return re.split(r"[+_]", job.strip(), maxsplit=1)[0]  # a het job's 41+1: 41
        return None


#: the comment a job sent again carries: the job it follows (so it is sent once)
AGAIN_OF = "torchx-nb: again of "


def _with_comment(cmd: list[str], mark: str) -> list[str]:
    """``cmd`` with ``mark`` at the end of its ``--comment`` (the user's own kept before it)."""
    own = [a.removeprefix("--comment=") for a in cmd if a.startswith("--comment=")]
    rest = [a for a in cmd if not a.startswith("--comment=")]
    said = own[0].split(AGAIN_OF)[0].rstrip() if own else ""
    return [*rest, f"--comment={said} {mark}" if said else f"--comment={mark}"]
