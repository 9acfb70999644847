"""What a ``%torchx`` / ``%%torchx`` line says: its commands, their options (the run and
sweep options shared with the CLI through ``run_args``) and the parsed line. A bad line is one
``UsageError`` naming the fix, raised before anything is built or submitted."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

COMMANDS = (
    "run",
    "run-notebook",
    "sweep",
    "status",
    "describe",
    "log",
    "cancel",
    "result",
    "outputs",
    "list",
    "runopts",
    "schedulers",
    "workspace",
    "watch",
)
WIDGETS_ENV = "TORCHX_NB_WIDGETS"


# A ``%torchx`` line that cannot be understood. An alias, not a subclass: IPython shows a
# subclass of UsageError with a full traceback.
MagicLineError = UsageError


class _Parser(MagicArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise HelpShown()


class HelpShown(Exception):
    """``--help`` was asked for and printed."""


def _run_options(parser: argparse.ArgumentParser) -> None:
    """``%%torchx run``: the job's options, torchrun's ``-j`` and ``--push``."""
    _job_options(parser)
    parser.add_argument(
        "-j", default=None, metavar="[MIN:]NxP", help="run under torchrun: N nodes of P processes"
    )
    parser.add_argument(
        "--push",
        default=None,
        metavar="VAR[,VAR]",
        help="kernel variables sent into the cell's namespace (cloudpickle; at most 64 MiB)",
    )
    parser.add_argument("--help", action="help", help="show this help")


def _notebook_sweep_args(parser: argparse.ArgumentParser) -> None:
    """``%torchx sweep --notebook NB.ipynb -p NAME=V1,V2``: a whole notebook per point."""
    from torchx_nb.run_args import MAGIC, add_notebook_options, add_sweep_options

    _job_options(parser)
    add_sweep_options(parser, MAGIC)
    add_notebook_options(parser, sweep=True)
    parser.add_argument("--help", action="help", help="show this help")


def _notebook_args(parser: argparse.ArgumentParser) -> None:
    """``%torchx run-notebook NB.ipynb``: the job's options and the notebook's."""
    from torchx_nb.run_args import add_notebook_options

    _job_options(parser)
    add_notebook_options(parser)
    parser.add_argument("--help", action="help", help="show this help")


def _job_options(parser: argparse.ArgumentParser) -> None:
    from torchx_nb.run_args import MAGIC, add_job_options, add_run_options

    add_run_options(parser, MAGIC)
    add_job_options(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help="environment variables for the job (repeatable; a value may hold commas)",
    )
    parser.add_argument(
        "-h",
        "--resource",
        default=None,
        metavar="RESOURCE",
        help="a named resource, e.g. cpu.small or aws_g5.xlarge",
    )
    parser.add_argument(
        "-o",
        "--out",
        default=None,
        metavar="VAR",
        help="store the job's handle object in this variable",
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a number to chart from the log lines, e.g. loss=loss: ([0-9.]+) (repeatable)",
    )


def _sweep_options(parser: argparse.ArgumentParser) -> None:
    """``%%torchx sweep``: the run options, the grid and how trials are let go."""
    from torchx_nb.run_args import MAGIC, add_sweep_options

    _run_options(parser)
    add_sweep_options(parser, MAGIC)


def _parser(prog: str, build: Callable[[argparse.ArgumentParser], None]) -> _Parser:
    p = _Parser(prog=prog, add_help=False, formatter_class=argparse.HelpFormatter)
    build(p)
    return p


def _handle_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("handle", help="a handle (sched://session/app_id) or a variable holding one")
    p.add_argument("--help", action="help", help="show this help")


def _cancel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("handle", help="a handle, a sweep's id (sweep-...) or a variable holding either")
    p.add_argument("--help", action="help", help="show this help")


def _log_args(p: argparse.ArgumentParser) -> None:
    from torchx_nb.run_args import add_log_options

    _handle_arg(p)
    p.add_argument("-r", "--role", default=None, help="role (default: all)")
    p.add_argument("-k", "--replica", type=int, default=None, help="replica (default: all)")
    add_log_options(p)


def _result_args(p: argparse.ArgumentParser) -> None:
    _handle_arg(p)
    p.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="give up after S seconds"
    )


def _outputs_args(p: argparse.ArgumentParser) -> None:
    _handle_arg(p)
    p.add_argument(
        "--download",
        nargs="?",
        const="",
        default=None,
        metavar="DEST",
        help="fetch them into DEST (default: a folder named after the job)",
    )


def _list_args(p: argparse.ArgumentParser) -> None:
    from torchx_nb.run_args import add_list_options

    add_list_options(p)
    p.add_argument("--help", action="help", help="show this help")


def _runopts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scheduler", nargs="?", default=None, help="one scheduler (default: all)")
    p.add_argument("--help", action="help", help="show this help")


def _line_run_args(p: argparse.ArgumentParser) -> None:
    _run_options(p)
    p.add_argument("component", help="component, e.g. utils.echo or path/file.py:fn")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the component's arguments")


def _watch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target", help="a job's handle or -o variable, or a sweep's id (sweep-...) or variable"
    )
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="chart a metric from the log (repeatable)",
    )
    p.add_argument("--help", action="help", help="show this help")


def _no_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--help", action="help", help="show this help")


def _workspace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default=None, help="the folder (default: the notebook's)")
    p.add_argument("-n", "--rows", type=int, default=50, help="rows to show")
    p.add_argument("--help", action="help", help="show this help")


PARSERS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "workspace": _workspace_args,
    "run": _line_run_args,
    "run-notebook": _notebook_args,
    "sweep": _notebook_sweep_args,
    "status": _handle_arg,
    "describe": _handle_arg,
    "cancel": _cancel_args,
    "result": _result_args,
    "outputs": _outputs_args,
    "log": _log_args,
    "list": _list_args,
    "runopts": _runopts_args,
    "schedulers": _no_args,
    "watch": _watch_args,
}


@dataclass
class ParsedLine:
    """A parsed magic line: the command and its arguments."""

    command: str
    args: argparse.Namespace


def parse_line(line: str, cell: str | None = None) -> ParsedLine:
    """Parse a ``%torchx`` / ``%%torchx`` line; anything wrong raises MagicLineError."""
    try:
        tokens = shlex.split(line, posix=True)
    except ValueError as e:
        raise MagicLineError(f"%torchx: cannot split the line: {e} (check the quotes)") from None
    if not tokens:
        raise MagicLineError(f"%torchx: missing command: one of {', '.join(COMMANDS)}")
    command, rest = tokens[0], tokens[1:]
    if cell is not None:
        if command not in ("run", "sweep"):
            raise MagicLineError(
                f"%%torchx {command}: only `%%torchx run` and `%%torchx sweep` take a cell body"
            )
        parser = _parser(
            f"%%torchx {command}", _run_options if command == "run" else _sweep_options
        )
    else:
        if command == "sweep" and "--notebook" not in rest:
            raise MagicLineError(
                "%torchx sweep: a sweep runs a cell: write `%%torchx sweep -p NAME=V1,V2` above"
                " it, or sweep a whole notebook: `%torchx sweep --notebook NB.ipynb -p"
                " NAME=V1,V2` (or use torchx-nb sweep for a component)"
            )
        if command not in PARSERS:
            import difflib

            close = difflib.get_close_matches(command, COMMANDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise MagicLineError(
                f"%torchx: unknown command {command!r}{hint} (commands: {', '.join(COMMANDS)})"
            )
        parser = _parser(f"%torchx {command}", PARSERS[command])
    return ParsedLine(command, parser.parse_args(rest))


def split_env(items: list[str]) -> dict[str, str]:
    """``--env A=1,B=2 --env CUDA_VISIBLE_DEVICES=0,1``: as in TorchX, a comma starts a new
    pair only before ``KEY=``, so values may hold commas."""
    from torchx_nb.specs.api import split_key_values

    env: dict[str, str] = {}
    for item in items:
        try:
            pairs = split_key_values(item)
        except ValueError as e:
            raise UsageError(f"%torchx run: --env expects K=V[,K=V]: {e}") from None
        for key, val in pairs:
            if not key.replace("_", "a").isalnum() or key[0].isdigit():
                raise UsageError(
                    f"%torchx run: --env name {key!r} is not a variable name (letters, digits, _)"
                )
            env[key] = val
    return env


def out_name(name: str | None) -> str | None:
    import keyword

    if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):
        raise UsageError(f"%torchx run: -o needs a Python variable name, got {name!r}")
    return name
