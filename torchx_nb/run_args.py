"""Every ``run``, ``sweep`` and ``log`` option the command line and the magics share, declared
once (help included), and the ``RunRequest`` they make: ``torchx-nb run`` and ``%%torchx run``
parse the same way and call the same submit path (``Runner.prepare`` and ``Runner.submit``).
A front end adds a group of them with one call; it declares none of these flags itself."""

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
    param: str = ""  # where a sweep's parameter reaches the program


CLI = Surface(
    runopts="`torchx-nb runopts SCHEDULER`",
    default_scheduler="[cli:run] scheduler in .torchxconfig, else local_cwd",
    folder="the current folder",
    no_workspace="''",
    param="${NAME} in the arguments, and $TORCHX_PARAM_NAME in the job",
)
MAGIC = Surface(
    runopts="%%torchx runopts SCHEDULER",
    default_scheduler="TorchxMagics.scheduler, then [cli:run] in .torchxconfig, then local_cwd",
    folder="the notebook's folder",
    no_workspace="none",
    param="a variable NAME in the cell, and $TORCHX_PARAM_NAME",
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
        "--packages",
        default=None,
        metavar="auto|none|FILE",
        help="what the image gets from this Python's packages: auto (default; what the program"
        " imports, at this kernel's versions, minus what the image has), none, or a"
        " requirements.txt / pyproject.toml / uv.lock ([cli:run] packages in .torchxconfig)",
    )
    parser.add_argument(
        "--dryrun",
        action="store_true",
        help="show the scheduler's exact request (secrets masked); build, push and submit nothing",
    )
    parser.add_argument("--wait", action="store_true", help="wait for the job to end")


def add_job_options(parser: argparse.ArgumentParser, name_default: str = "") -> None:
    """``--image`` and ``--name``: what the job runs in and what it is called (``name_default``:
    where the name comes from when none is given, for the help)."""
    parser.add_argument("--image", default=None, help="image the job runs in")
    parser.add_argument(
        "--name",
        default=None,
        help="the job's name" + (f" (default: {name_default})" if name_default else ""),
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--log`` and ``--json``: what a terminal run prints."""
    parser.add_argument("--log", action="store_true", help="stream the job's logs (implies --wait)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --dryrun, also print the whole request and the workspace's files",
    )


def add_list_options(parser: argparse.ArgumentParser) -> None:
    """``list``'s ``-s``, ``--all`` and ``-n``/``--limit``: which jobs, and how many."""
    from torchx_nb.errors import positive_int

    parser.add_argument(
        "-s",
        "--scheduler",
        default=None,
        help="only this scheduler's jobs, plus the ones it lists itself",
    )
    parser.add_argument("--all", action="store_true", help="every job, not just the newest --limit")
    parser.add_argument(
        "-n", "--limit", type=positive_int, default=50, help="at most this many rows (≥ 1)"
    )


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """``--regex``, ``-t``/``--tail`` and ``--streams``: which log lines, and whether to follow."""
    from torchx_nb.errors import regex_arg

    parser.add_argument(
        "--regex", default=None, type=regex_arg, help="only lines matching this regex"
    )
    parser.add_argument("-t", "--tail", action="store_true", help="follow until the job ends")
    parser.add_argument("--streams", choices=["stdout", "stderr", "combined"], default=None)


def add_sweep_options(parser: argparse.ArgumentParser, surface: Surface) -> None:
    """``-p``, ``--zip``, ``--max-parallel`` and ``--fail-fast``: the grid and how trials go."""
    from torchx_nb.errors import positive_int

    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        required=True,
        metavar="NAME=V1,V2,...",
        help=f"a parameter and its values (repeatable): {surface.param}",
    )
    parser.add_argument(
        "--zip",
        action="store_true",
        help="pair the lists (the i-th values) instead of crossing them",
    )
    parser.add_argument(
        "--max-parallel",
        type=positive_int,
        default=None,
        metavar="N",
        help="at most N trials at once",
    )
    parser.add_argument(
        "--fail-fast", action="store_true", help="cancel the other trials when one fails"
    )


def add_notebook_options(parser: argparse.ArgumentParser, sweep: bool = False) -> None:
    """A notebook job's own options: the notebook (``run-notebook``'s first argument, or
    ``--notebook`` of a sweep, whose ``-p`` is its grid), ``-p NAME=VALUE`` (``run-notebook``)
    and ``--cell-timeout``."""
    from torchx_nb.errors import positive_float

    if sweep:
        parser.add_argument(
            "--notebook",
            default=None,
            metavar="NB.ipynb",
            help="sweep a whole notebook: each trial's values go in after its parameters cell",
        )
    else:
        parser.add_argument("notebook", help="the notebook (.ipynb); its folder is the workspace")
        parser.add_argument(
            "-p",
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a value injected after the notebook's `parameters` cell (repeatable): a"
            " Python literal (3, 0.1, True, None, [1, 2], '\" x \"'), else the text as given",
        )
    parser.add_argument(
        "--cell-timeout",
        type=positive_float,
        default=None,
        metavar="S",
        help="seconds each cell may run; a cell over it ends the job FAILED, naming the cell",
    )


def notebook_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The request's fields ``add_notebook_options`` parsed: each ``-p`` value a Python
    literal, else the text as given (spaces kept)."""
    from torchx_nb.components.notebook_parameters import read_value

    params: dict[str, Any] = {}
    for item in args.param:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"-p {item!r}: give NAME=VALUE")
        try:
            params[name.strip()] = read_value(value)
        except ValueError as e:
            raise ValueError(f"-p {name.strip()}: {e}") from None
    return {"run_notebook": args.notebook, "parameters": params, "cell_timeout": args.cell_timeout}


def run_request(args: argparse.Namespace, **fields: Any) -> RunRequest:
    """The request the shared options (and ``fields``, the front end's own) describe."""
    return RunRequest(
        scheduler=args.scheduler,
        cfg=list(args.cfg),
        workspace=args.workspace,
        packages=args.packages,
        **fields,
    )
