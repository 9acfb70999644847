"""Who cancels a job (``canceller``: the user, the front end, its process), as torchx_nb's
cancel leaves it where the backend keeps it (local_cwd's ``cancel`` marker, AWS Batch's
terminate reason, a SageMaker tag); and who cancelled a local_cwd job: a signal that comes
to its supervisor without the marker (a ``kill``, a Ctrl-C in its terminal) came from
elsewhere, and the supervisor records which signal it was."""

from __future__ import annotations

import getpass
import os
import re
import signal
import sys
from typing import Any

# what a front end's process is called → the words for it
_PROGRAMS = {
    "torchx-nb": "torchx-nb cancel",
    "cli/__main__.py": "torchx-nb cancel",  # python -m torchx_nb.cli
    "ipykernel_launcher.py": "a Jupyter kernel",
    "jupyter-lab": "the Jupyter server (panel or REST)",
    "jupyter-server": "the Jupyter server (panel or REST)",
    "jupyter-notebook": "the Jupyter server (panel or REST)",
}


WHO_LIMIT = 200  # characters of who cancelled that are kept and shown


def clean_who(text: str, limit: int = WHO_LIMIT) -> str:
    """Who cancelled, as it may be shown: one line (newlines and other control characters
    are spaces, terminal escapes gone), at most ``limit`` characters. The user name comes
    from the environment (``$LOGNAME``) and a backend's record may be written by anyone
    with access to it (a Batch terminate reason, a Kubernetes mark), so neither may add a
    line to a status or a card, colour a terminal, or fill a panel."""
    from torchx_nb.specs.failure import clean_line, strip_escapes

    one = " ".join(re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", strip_escapes(str(text))).split())
    return clean_line(one, limit)


def cancelled_by(by: str, verb: str = "cancelled") -> str:
    """The one way a status says who cancelled a job: ``was cancelled by WHO`` (``WHO`` as
    ``canceller`` wrote it, cleaned by ``clean_who``), ``was cancelled by torchx_nb`` when its
    record names nobody; ``verb`` for a backend that calls it otherwise (SageMaker stops)."""
    return f"was {verb} by {by or 'torchx_nb'}"


def canceller() -> str:
    """Who is cancelling, for the marker: the user, the front end and its process."""
    try:
        user = clean_who(getpass.getuser(), 64)
    except (KeyError, OSError):
        user = ""
    user = user or f"uid {os.getuid()}"
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    if program == "__main__.py":  # a package run with -m: named by its folder
        program = f"{os.path.basename(os.path.dirname(sys.argv[0]))}/{program}"
    return f"{user} with {_PROGRAMS.get(program, program)} (pid {os.getpid()})"


def cancel_ending(state: dict[str, Any], supervisor_pid: int | None) -> str:
    """``was cancelled by …`` for a job torchx_nb cancelled, ``was stopped by SIGTERM sent to
    its supervisor … from outside torchx_nb`` for one a signal from elsewhere stopped; ''
    when the record says neither (a record written before this was kept)."""
    by = clean_who(state.get("cancelled_by") or "")
    if by:
        return cancelled_by(by)
    signum = state.get("stop_signal")
    if isinstance(signum, int):
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        pid = f" (pid {supervisor_pid})" if supervisor_pid else ""
        return f"was stopped by {name} sent to its supervisor{pid} from outside torchx_nb"
    return ""


__all__ = ["cancel_ending", "cancelled_by", "canceller", "clean_who"]
