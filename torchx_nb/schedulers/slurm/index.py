"""What is remembered of each submitted Slurm job, in a private file per job id: where it runs,
its replicas, what it needs, and its batch script and sbatch command (``submit_again``)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from torchx_nb.schedulers.slurm.fit import replica_needs
from torchx_nb.schedulers.slurm.request import SlurmBatchRequest, _index_dir


def remember(
    session: str, job_id: str, req: SlurmBatchRequest, workdir: str, script: str = ""
) -> None:
    """Where the job runs and what its replicas are called, so logs and describe work
    from any folder (TorchX found a job_dir job's logs only from the submitting folder)."""
    from torchx_nb.paths import private_dir, write_private

    with contextlib.suppress(OSError):
        folder = private_dir(_index_dir(session))
        needs = [replica_needs(r.sbatch_opts) for r in req.replicas.values()]
        partition = next((r.sbatch_opts.get("partition") for r in req.replicas.values()), None)
        write_private(
            folder / f"{job_id}.json",
            json.dumps(
                {
                    "workdir": workdir,
                    "name": req.app_name,
                    "roles": req.roles,
                    "needs": needs,
                    "partition": partition,
                    "array": req.array,  # "0-9%2": which tasks it has
                    "term_cancel": True,  # its script ends a cancel's SIGTERM CANCELLED
                    "script": script,  # what submit_again sends again
                    "cmd": req.cmd,
                }
            ),
        )


def recall(session: str, job_id: str) -> dict[str, Any] | None:
    """What was remembered of ``job_id`` (an array task: what its array was told)."""
    job_id = job_id.partition("_")[0]
    try:
        data = json.loads((_index_dir(session) / f"{job_id}.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
