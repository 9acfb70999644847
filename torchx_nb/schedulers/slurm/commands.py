"""Slurm's commands run as subprocesses: bounded in time, their failures in one line."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from torchx_nb.specs.exceptions import SlurmError as SlurmError

RANK0_ENV = "SLURM_JOB_NODELIST_HET_GROUP_0"


SCRIPT_NAME = "torchx-sbatch.sh"


# stands for the job id inside srun arguments until the script is written; a NUL cannot occur
# in an argument, so a user's literal "${app_id}" text is never mistaken for it
_APP_ID = "\0app_id\0"


# seconds a Slurm command may take before we give up on the controller
COMMAND_TIMEOUT_S = 60.0


TAIL_IDLE_S = 0.5


# earlier jobs' logs and scripts in a workspace are not the job's code
WORKSPACE_EXCLUDES = ("slurm-*.out", "slurm-*.err", SCRIPT_NAME)


OUTPUTS_FOLDER = ".torchx-nb-outputs"


# options on sbatch's command line (argv, so a space is fine); the rest go into #SBATCH lines
CMD_OPTS = ("comment", "mail-user", "mail-type")


def _slurm_line(tool: str, stderr: str) -> str:
    """Slurm's error text as one line: ``sbatch: error: X`` prefixes dropped, lines joined."""
    parts = []
    for line in stderr.splitlines():
        line = re.sub(rf"^{re.escape(tool)}:\s*(error:\s*)?", "", line.strip())
        if line and line not in parts:
            parts.append(line)
    text = "; ".join(parts) or f"{tool} failed"
    if "Problem talking to the database" in text:  # sacct: slurmdbd, not the controller
        return (
            f"Slurm's accounting database (slurmdbd) does not answer ({text}), and only it"
            " knows jobs that left the queue; try again once it is back (`sacctmgr show"
            " cluster` answers then)"
        )
    if "Unable to contact slurm controller" in text or "Connection refused" in text:
        return f"the Slurm controller does not answer ({text}); check it with `scontrol ping`"
    if "partition" in text.lower():
        return f"Slurm refused the job: {text} (`sinfo -s` lists the partitions)"
    if tool == "sbatch":
        return f"Slurm refused the job: {text}"
    return f"{tool}: {text}"


def _not_on_path(tool: str) -> SlurmError:
    return SlurmError(
        f"{tool} is not on PATH: run this on a Slurm login node, or add Slurm's bin folder to PATH"
    )


def run_slurm(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    """Run a Slurm command; its stdout, or a one-line SlurmError."""
    tool = argv[0]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=COMMAND_TIMEOUT_S,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise _not_on_path(tool) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{tool} did not finish within {COMMAND_TIMEOUT_S:.0f}s: the Slurm controller does"
            " not answer; check it with `scontrol ping`"
        ) from None
    if proc.returncode != 0:
        raise SlurmError(_slurm_line(tool, proc.stderr or proc.stdout))
    return proc.stdout
