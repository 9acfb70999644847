"""``torchx_nb.checkpoint()``: the folder a job keeps its checkpoint in, restored at the start
of every attempt and saved back (on SIGTERM, at the end and on ``save()``).

In a job the cell runner has already restored the folder before the cell runs; here we only
read what it found. In the kernel (no job around it) the folder is a temporary one of this
process and the attempt is 1, so the same cell runs unchanged in both places. No cloud SDK
is imported here: a save loads boto3 or google-cloud-storage only when it uploads.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from torchx_nb.apps.cell_runner import checkpoint as job_side

RUNNER_MODULE = "torchx_nb_cell_runner.checkpoint"  # the runner a job ships, loaded by path
_KERNEL_FOLDER: list[str] = []


@dataclass
class Checkpoint:
    """This attempt's checkpoint folder and what is known of the attempts before it."""

    path: Path
    """The local folder to write the checkpoint into (the rank's own)."""
    attempt: int = 1
    """This attempt's number, from 1: preemptions and retries both count."""
    preemptions: int = 0
    """The preemptions before this attempt."""
    restored_from: datetime | None = None
    """When the restored generation was saved (None: nothing was restored)."""
    _session: Any = field(default=None, repr=False)

    def save(self) -> int | None:
        """Save the folder now as a new generation (only the files that changed go up);
        its number, or None where nothing is uploaded (the kernel, SageMaker's own sync)."""
        if self._session is None:
            return None
        return int(self._session.save()) if not self._session.store.syncs_itself else None


def _when(seconds: float | None) -> datetime | None:
    return None if not seconds else datetime.fromtimestamp(seconds, tz=timezone.utc)


def _from_session(session: Any) -> Checkpoint:
    return Checkpoint(
        Path(session.folder),
        session.attempt,
        session.preemptions,
        _when(session.restored_from),
        session,
    )


def checkpoint() -> Checkpoint:
    """The checkpoint of the job this code runs in, or a local temporary one in a kernel."""
    runner = sys.modules.get(RUNNER_MODULE)
    session = getattr(runner, "CURRENT", None) or job_side.CURRENT
    if session is not None:  # the cell itself, in the cell runner's process
        return _from_session(session)
    if os.environ.get(job_side.ATTEMPT_ENV):  # a process the job started (a notebook's kernel)
        found = job_side.Session.from_env()
        if found is not None:
            found.folder = os.environ.get(job_side.DIR_ENV) or found.folder
            found.attempt = int(os.environ[job_side.ATTEMPT_ENV])
            found.preemptions = int(os.environ.get(job_side.PREEMPTIONS_ENV, "0") or 0)
            restored = os.environ.get(job_side.RESTORED_ENV, "")
            found.restored_from = float(restored) if restored else None
            return _from_session(found)
    bare = os.environ.get(job_side.DIR_ENV)
    if bare:  # a folder without a store to save it to
        os.makedirs(bare, exist_ok=True)
        return Checkpoint(Path(bare), int(os.environ.get(job_side.ATTEMPT_ENV, "1") or 1))
    if not _KERNEL_FOLDER:
        _KERNEL_FOLDER.append(tempfile.mkdtemp(prefix="torchx-nb-checkpoint-"))
    return Checkpoint(Path(_KERNEL_FOLDER[0]))
