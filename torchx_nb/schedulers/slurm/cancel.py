"""A cancel the program sees: a running job's batch script is given SIGTERM and ends the job
CANCELLED once its program has ended on it (request.py ``_CANCELLED``), so a notebook job's
runner stops its kernel, saves the notebook and says where it was cancelled. A plain
``scancel`` gives the batch script and srun SIGTERM at once, and srun SIGKILLs its tasks on
it: the program had no time to end. A job still waiting, a script that does not end within
``GRACE_S`` (a program that ignores SIGTERM) and a job submitted without the script's trap
get the plain ``scancel``."""

from __future__ import annotations

import time
from collections.abc import Mapping

from torchx_nb.schedulers.slurm.commands import SlurmError, run_slurm

# how long a running job's program may take to end on SIGTERM before the plain scancel; a
# notebook's runner needs about a second (stop its kernel, save the notebook)
GRACE_S = 10.0

POLL_S = 0.25

# squeue's states of a job that has not ended (a COMPLETING job is being ended already)
_NOT_ENDED = ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED", "RESIZING")


def _states(job_id: str, env: Mapping[str, str]) -> list[str] | None:
    """squeue's state of each part of ``job_id`` still in the queue (a heterogeneous job's
    components, an array's tasks): none once it has left, None when squeue failed."""
    try:
        out = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%T"], env)
    except SlurmError as e:
        return [] if "Invalid job id" in str(e) else None
    return [line.strip() for line in out.splitlines() if line.strip()]


def cancel_job(job_id: str, env: Mapping[str, str], script_traps: bool) -> None:
    """Cancel ``job_id``. Running, with a script that traps SIGTERM (``script_traps``): its
    batch script alone is signalled and the job given up to ``GRACE_S`` to end; whatever of
    it has not ended then (or at once, otherwise) is cancelled by a plain ``scancel``."""
    states = _states(job_id, env) or []  # squeue failed: scancel says what is wrong
    if script_traps and "RUNNING" in states and _signal_script(job_id, env):
        deadline = time.monotonic() + GRACE_S
        while "RUNNING" in states and time.monotonic() < deadline:
            time.sleep(POLL_S)
            now = _states(job_id, env)
            if now is not None:  # squeue failed: ask again
                states = now
        if not any(s in _NOT_ENDED for s in states):
            return  # ended (or ending) CANCELLED by its script
    run_slurm(["scancel", job_id], env)


def _signal_script(job_id: str, env: Mapping[str, str]) -> bool:
    """Give ``job_id``'s batch script (not srun, not the steps) SIGTERM; False where Slurm
    refused (it has just ended, or its script has not started yet)."""
    try:
        run_slurm(["scancel", "--batch", "--signal=TERM", job_id], env)
    except SlurmError:
        return False
    return True
