"""The request: an app as one sbatch script (a heterogeneous job, one component per replica), quoted so no option or argument can add a line, and the ids it answers to."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from torchx_nb.schedulers.outputs import OUTPUT_DIR_ENV
from torchx_nb.schedulers.slurm.commands import _APP_ID, OUTPUTS_FOLDER
from torchx_nb.schedulers.slurm.jobs import Job

JOB_ID_VAR = '"$SLURM_JOB_ID"'


# an array task's own id, as users and our trial handles name it: ARRAYID_INDEX
TASK_ID_VAR = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'

# What the script does when its srun failed. Slurm's record decides why (a preemption and a
# cancel also reach the program as SIGTERM): with a PreemptTime the job is being preempted, so
# the script waits for Slurm to requeue it (PreemptMode=REQUEUE) or end it PREEMPTED (CANCEL)
# when its GraceTime is over: exiting now would end it FAILED. A job Slurm is already ending
# (COMPLETING: a cancel, a requeue, a time limit) failed no program either. Only a program's
# own failure counts against TORCHX_MAX_RETRIES, in a file kept per job id across requeues
# (SLURM_RESTART_COUNT counts every requeue, preemptions included). Bash, in the script's
# f-string: ``{failures}`` is the quoted outputs folder.
_REQUEUE_ON_FAILURE = """\
    slurm_says=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null || true)
    case "$slurm_says" in
    *PreemptTime=[0-9]*)
        echo "job preempted: Slurm requeues or ends it once its grace time is over"
        while :; do sleep 60; done ;;
    *JobState=COMPLETING*) ;;
    *)
        failures_file={failures}/".failures-$SLURM_JOB_ID"
        failures=$(( $(cat "$failures_file" 2>/dev/null || echo 0) + 1 ))
        # no folder to count in: every requeue counts, as in TorchX
        echo "$failures" > "$failures_file" || failures=$(( ${{SLURM_RESTART_COUNT:-0}} + 1 ))
        echo "program failures: $failures of $TORCHX_MAX_RETRIES retries"
        if [ "$TORCHX_MAX_RETRIES" -ge "$failures" ]; then
            scontrol requeue "$SLURM_JOB_ID"
        fi ;;
    esac"""


# A cancel of ours (cancel.py) signals the batch script alone (scancel --batch --signal=TERM):
# srun, given a SIGTERM, SIGKILLs its tasks at once, so the program would have no time to end
# on it (the notebook runner stops its kernel, saves the notebook and says so). Bash runs a
# trap only between commands, hence srun in the background and ``wait``: on the cancel the
# script hands SIGTERM to the steps (not srun), waits for srun and ends the job CANCELLED
# itself. A SIGTERM while Slurm is ending the job (a time limit, a requeue, a plain scancel:
# JobState=COMPLETING) is not a cancel of ours: the script ends as before. Bash, in the
# script's f-string.
_CANCELLED = """\
    case "$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null || true)" in
    *JobState=RUNNING*)
        echo "job cancelled: its program was given SIGTERM and has ended"
        trap - TERM
        scancel "$SLURM_JOB_ID" && while :; do sleep 60; done ;;
    esac"""


def _log_times(replicas: Iterable[SlurmReplicaRequest], job_id: str) -> str:
    """The script's lines that start ``apps/log_times`` beside srun: it writes when each
    line of the replicas' files was written (``LOG.times`` beside each) and only reads the
    files, which slurmstepd writes itself, so no line can be lost to it (see that module).
    srun starts once it said ``ready``; closing its standard input (``log_times``) after srun
    says the step ended."""
    files = " ".join(_quote(r.srun_opts[k], job_id) for r in replicas for k in ("output", "error"))
    return (
        "# when each line of the logs was written, kept beside each (LOG.times)\n"
        f"coproc LOG_TIMES {{ exec python -m torchx_nb.apps.log_times {files}; }}\n"
        "log_times=${LOG_TIMES[1]} log_times_pid=$LOG_TIMES_PID\n"
        'read -r -t 30 -u "${LOG_TIMES[0]}" _ || true  # it is ready'
    )


def _quote(arg: str, job_id: str = JOB_ID_VAR) -> str:
    """``arg`` shell-quoted, with the job-id placeholder becoming ``job_id`` (a shell
    expression: the job's id, or an array task's)."""
    return job_id.join(shlex.quote(p) for p in arg.split(_APP_ID))


@dataclass
class SlurmReplicaRequest:
    """One replica: its heterogeneous component's ``#SBATCH`` options and its srun command."""

    name: str
    entrypoint: str
    args: list[str]
    srun_opts: dict[str, str]
    sbatch_opts: dict[str, str | None]
    env: dict[str, str]

    def materialize_sbatch(self) -> str:
        opts = " ".join(
            f"--{k}" if v is None else f"--{k}={v}" for k, v in self.sbatch_opts.items()
        )
        return f"#SBATCH {opts}"

    def materialize_srun(self, job_id: str = JOB_ID_VAR) -> list[str]:
        """srun's words for this component, each shell-quoted. Env values holding a comma
        (which ``--export`` would split) are set through ``env`` instead."""
        words = [f"--{k}={v}" for k, v in self.srun_opts.items()]
        export = {k: v for k, v in self.env.items() if "," not in v}
        rest = {k: v for k, v in self.env.items() if "," in v}
        if export:
            words.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in export.items()))
        if rest:
            words += ["env", *(f"{k}={v}" for k, v in rest.items())]
        words += [self.entrypoint, *self.args]
        return [_quote(w, job_id) for w in words]


@dataclass
class SlurmBatchRequest:
    """slurm's native request (TorchX's attribute names): the sbatch command, the replicas
    (``"<role>-<i>"`` → request), ``job_dir`` and the fewest retries over the roles; plus where
    the job runs and what is copied there."""

    cmd: list[str]
    replicas: dict[str, SlurmReplicaRequest]
    job_dir: str | None
    max_retries: int = 0
    workdir: str = ""
    workspace: str | None = None
    cell_files: dict[str, bytes] = field(default_factory=dict)
    app_name: str = ""
    roles: dict[str, int] = field(default_factory=dict)
    array: str | None = None  # sbatch --array: 0-N[%M], for a sweep's trials
    checkpoint: str = ""  # the job's checkpoint store (a folder), kept across its attempts

    @property
    def outputs_root(self) -> str:
        """Each job's output folder is ``outputs_root/JOB_ID``: hidden in the job folder (or
        the workspace), so no workspace ships it."""
        return f"{self.workdir}/{OUTPUTS_FOLDER}"

    def materialize(self) -> str:
        """The sbatch script."""
        from torchx_nb.version import __version__

        groups = "\n#SBATCH hetjob\n".join(r.materialize_sbatch() for r in self.replicas.values())
        job_id = JOB_ID_VAR
        outputs_id = JOB_ID_VAR
        if self.array:  # one task per trial; the cell runner adds the index to the folder
            groups += f"\n#SBATCH --array={self.array}"
            job_id, outputs_id = TASK_ID_VAR, '"$SLURM_ARRAY_JOB_ID"'
        srun = " :\\\n     ".join(  # TorchX: a group, " :\\", a newline, 5 spaces
            " ".join(r.materialize_srun(job_id)) for r in self.replicas.values()
        )
        return f"""#!/bin/bash
#
# Generated by torchx_nb {__version__}
# Run with: {" ".join(shlex.quote(w) for w in self.cmd)}
#
{groups}

set -evx

export PYTHONUNBUFFERED=1
export SLURM_UNBUFFEREDIO=1
export TORCHX_MAX_RETRIES={self.max_retries}
{self._checkpoint_exports()}export {OUTPUT_DIR_ENV}={shlex.quote(self.outputs_root)}/{outputs_id}
mkdir -p "${OUTPUT_DIR_ENV}"

trap 'cancelled=1' TERM
{_log_times(self.replicas.values(), job_id)}
set +e
srun {srun} &
srun_pid=$!
wait $srun_pid
if [ -n "${{cancelled:-}}" ]; then
    scancel --signal=TERM "$SLURM_JOB_ID"
    # a second cancel's SIGTERM ends ``wait`` again: wait until srun has really ended
    while kill -0 $srun_pid 2>/dev/null; do wait $srun_pid; done
fi
wait $srun_pid  # srun's own status (bash keeps it once it has been waited for)
exitcode=$?
exec {{log_times}}>&-
wait "$log_times_pid"
set -e

echo "job exited with code $exitcode"
if [ -n "${{cancelled:-}}" ]; then
{_CANCELLED}
fi
if [ $exitcode -ne 0 ]; then
{_REQUEUE_ON_FAILURE.format(failures=shlex.quote(self.outputs_root))}
    exit $exitcode
fi
"""

    def _checkpoint_exports(self) -> str:
        """``export`` lines of the checkpoint's env (the cell runner reads it), one per line
        ending in a newline; none without a store."""
        if not self.checkpoint:
            return ""
        from torchx_nb.schedulers.outputs import checkpoint_env

        env = checkpoint_env(
            f"file://{self.checkpoint}",
            f"{self.checkpoint}.local",
            attempt_var="SLURM_RESTART_COUNT",
            max_retries=self.max_retries,
        )
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())

    def __repr__(self) -> str:
        return _fmt_request(self)


def _fmt_request(req: SlurmBatchRequest) -> str:
    from torchx_nb.redact import redact_text

    cmd = " ".join(shlex.quote(w) for w in [*req.cmd, f"--chdir={req.workdir}"])
    head = f"{cmd} $SBATCH_SCRIPT\n"
    if req.job_dir:
        head += f"# job folder (created at submit, workspace copied in): {req.workdir}\n"
    return redact_text(f"{head}\n# SBATCH_SCRIPT\n{req.materialize()}")


def _memory_allowed(partition: str | None) -> bool:
    """TorchX's probe: ask sinfo for the partition's memory; leave ``--mem`` out where a
    partition reports 1000 MB or less (sites that do not track memory)."""
    try:
        out = subprocess.run(
            ["sinfo", "--format", "%P,%m", "--noconvert"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if out.returncode != 0:
        return True
    rows = [ln.split(",", 1) for ln in out.stdout.splitlines()[1:] if "," in ln]
    for name, mem in rows:
        default = name.endswith("*")
        if (partition and name.rstrip("*") == partition) or (not partition and default):
            digits = re.match(r"\d+", mem.strip())
            return digits is None or int(digits.group()) > 1000
    return True


def _index_dir(session: str) -> Path:
    from torchx_nb.paths import data_dir

    return data_dir() / "slurm" / session


def check_job_id(app_id: str) -> str:
    """``app_id`` if it is a Slurm job id (digits, as sbatch prints, or an array task's
    ``ARRAYID_INDEX``), else a one-line error."""
    if not re.fullmatch(r"[0-9]{1,12}(_[0-9]{1,7})?", app_id):
        raise ValueError(
            f"{app_id!r} is not a Slurm job id (digits, as sbatch prints, or ARRAYID_INDEX)"
        )
    return app_id


def _id_order(app_id: str) -> tuple[int, int]:
    job, _, task = app_id.partition("_")
    return int(job), int(task or -1)


def _add_steps(job: Job, acct: Job) -> None:
    """Each replica's own outcome (its srun step) from sacct onto squeue's view of a finished
    job. Right after a job ends slurmdbd may still hold a partial record (a placeholder name,
    components missing), so only components that match by offset and name are used."""
    by_offset = {c.offset: c for c in acct.components}
    for comp in job.components:
        match = by_offset.get(comp.offset)
        if match is not None and match.name == comp.name:
            comp.step_state = match.step_state
