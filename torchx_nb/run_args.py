"""The ``run`` options the command line and the magics share, declared once (help included),
and the ``RunRequest`` they make: ``torchx-nb run`` and ``%%torchx run`` parse the same way and
call the same submit path (``Runner.prepare`` and ``Runner.submit``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from torchx_nb.runner import RunRequest


@dataclass(frozen=True)
class Surface:
    """How a front end names things in the shared help."""

    runopts: str  # how to list a scheduler's options
    default_scheduler: str  # where the default scheduler comes from
    folder: str  # the default workspace
    no_workspace: str  # how to ask for none


CLI = Surface(
    runopts="`torchx-nb runopts SCHEDULER`",
    default_scheduler="[cli:run] scheduler in .torchxconfig, else local_cwd",
    folder="the current folder",
    no_workspace="''",
)
MAGIC = Surface(
    runopts="%%torchx runopts SCHEDULER",
    default_scheduler="TorchxMagics.scheduler, then [cli:run] in .torchxconfig, then local_cwd",
    folder="the notebook's folder",
    no_workspace="none",
)


def add_run_options(parser: argparse.ArgumentParser, surface: Surface) -> None:
    """``-s``, ``-cfg``, ``--workspace``, ``--dryrun`` and ``--wait``."""
    parser.add_argument(
        "-s",
        "--scheduler",
        default=None,
        help=f"where to run (default: {surface.default_scheduler})",
    )
    parser.add_argument(
        "-cfg",
        "--cfg",
        action="append",
        default=[],
        metavar="K=V,...",
        help=f"scheduler options (see {surface.runopts})",
    )
    parser.add_argument(
        "--workspace",
        default=None,
        metavar="PATH",
        help=f"folder shipped with the job (default: {surface.folder}; {surface.no_workspace}"
        " for none)",
    )
    parser.add_argument(
        "--dryrun",
        action="store_true",
        help="show the scheduler's exact request (secrets masked); build, push and submit nothing",
    )
    parser.add_argument("--wait", action="store_true", help="wait for the job to end")


def run_request(args: argparse.Namespace, **fields: Any) -> RunRequest:
    """The request the shared options (and ``fields``, the front end's own) describe."""
    return RunRequest(
        scheduler=args.scheduler, cfg=list(args.cfg), workspace=args.workspace, **fields
    )
