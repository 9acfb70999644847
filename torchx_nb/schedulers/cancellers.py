"""Who cancels a job (``canceller``: the user, the front end, its process), as torchx_nb's
cancel leaves it where the backend keeps it (local_cwd's ``cancel`` marker, AWS Batch's
terminate reason, a SageMaker tag); and who cancelled a local_cwd job: a signal that comes
to its supervisor without the marker (a ``kill``, a Ctrl-C in its terminal) came from
elsewhere, and the supervisor records which signal it was."""

from __future__ import annotations

import getpass
import os
import signal
import sys
from typing import Any

# what a front end's process is called → the words for it
_PROGRAMS = {
    "torchx-nb": "torchx-nb cancel",
    "cli.py": "torchx-nb cancel",
    "ipykernel_launcher.py": "a Jupyter kernel",
    "jupyter-lab": "the Jupyter server (panel or REST)",
    "jupyter-server": "the Jupyter server (panel or REST)",
    "jupyter-notebook": "the Jupyter server (panel or REST)",
}


def canceller() -> str:
    """Who is cancelling, for the marker: the user, the front end and its process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{user} with {_PROGRAMS.get(program, program)} (pid {os.getpid()})"


def cancel_ending(state: dict[str, Any], supervisor_pid: int | None) -> str:
    """``was cancelled by …`` for a job torchx_nb cancelled, ``was stopped by SIGTERM sent to
    its supervisor … from outside torchx_nb`` for one a signal from elsewhere stopped; ''
    when the record says neither (a record written before this was kept)."""
    by = state.get("cancelled_by")
    if by:
        return f"was cancelled by {by}" if by != "torchx_nb" else "was cancelled by torchx_nb"
    signum = state.get("stop_signal")
    if isinstance(signum, int):
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        pid = f" (pid {supervisor_pid})" if supervisor_pid else ""
        return f"was stopped by {name} sent to its supervisor{pid} from outside torchx_nb"
    return ""


__all__ = ["cancel_ending", "canceller"]
