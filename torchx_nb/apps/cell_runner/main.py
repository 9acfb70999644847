"""The runner's entry: a cell (``CELL.py [ARGS...]``) or a notebook (``--notebook NB.ipynb
[--cell-timeout S]``) run, then, however it ended, what the job ran recorded and its outputs
uploaded where the backend says (``$TORCHX_NB_OUTPUT_URL``), its checkpoint saved."""

from __future__ import annotations

import os
import sys

from . import checkpoint, env_record
from .common import OWN, rank
from .upload import drop_stale, upload


def main(argv: list[str]) -> int:
    """Run what ``argv`` (``sys.argv``: the program's name first) names; the exit status."""
    if len(argv) < 2:
        sys.stderr.write(
            "usage: cell_main.py CELL.py [ARGS...] | --notebook NB.ipynb [--cell-timeout S]\n"
        )
        return 2
    code = 1
    try:
        if argv[1] == "--notebook":
            from .notebook import main as run_notebook

            code = run_notebook(argv[2:])
        else:
            from .cell import run

            code = run(argv[1], argv[2:])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        checkpoint.finish(checkpoint.CURRENT, code)  # first: a SIGTERM's grace is short
        url = os.environ.get("TORCHX_NB_OUTPUT_URL")
        folder = os.environ.get("TORCHX_OUTPUT_DIR")
        if folder and os.path.isdir(folder) and rank() == 0:
            try:  # what the job ran, into its outputs
                env_record.record(os.path.join(folder, OWN), env_record.planned())
            except Exception as e:
                sys.stderr.write(f"torchx_nb: the job's environment was not recorded: {e}\n")
        if url and folder and os.path.isdir(folder):
            try:
                upload(folder, url)
                if code not in checkpoint.NOT_FAILURES:  # it ran: its records are the story
                    drop_stale(folder, url)
            except Exception as e:
                sys.stderr.write(f"torchx_nb: the outputs were not uploaded to {url}: {e}\n")
    return code
