"""The ``torchx-nb`` argument parser: every subcommand and its flags (the run flags come from
``run_args``, declared once for the CLI and the magic). A parse error is one line naming
``--help``."""

from __future__ import annotations

import argparse
import inspect
from typing import NoReturn

from torchx_nb.specs.exceptions import CliError

PROG = "torchx-nb"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see `{self.prog} --help`)")


def builtins_text() -> str:
    from torchx_nb.runner import Runner

    lines = ["built-in components:"]
    for name, fn in sorted(Runner.builtin_components().items()):
        summary = (inspect.getdoc(fn) or "").split("\n", 1)[0]
        lines.append(f"  {name:<14} {summary}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from torchx_nb.run_args import (
        CLI,
        add_job_options,
        add_list_options,
        add_log_options,
        add_notebook_options,
        add_output_options,
        add_run_options,
        add_sweep_options,
    )
    from torchx_nb.version import __version__

    parser = _Parser(prog=PROG, description="Run TorchX-style jobs and watch them.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser(
        "run",
        help="run a component (e.g. utils.echo, dist.ddp, cell)",
        epilog=builtins_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(run, CLI)
    add_output_options(run)
    run.add_argument(
        "--no-log",
        dest="no_log",
        action="store_true",
        help="with --wait on a local scheduler, do not print the logs",
    )
    run.add_argument("--parent_run_id", default=None, help="id of the parent run, for trackers")
    run.add_argument("component", help="component name, or path/to/file.py:function")
    run.add_argument(
        "component_args",
        nargs=argparse.REMAINDER,
        help="the component's arguments (see `torchx-nb run COMPONENT --help`)",
    )

    rn = sub.add_parser(
        "run-notebook",
        help="run a whole notebook as a job (-p NAME=VALUE injects parameters)",
    )
    add_run_options(rn, CLI)
    add_notebook_options(rn)
    add_job_options(rn, name_default="the notebook's")
    add_output_options(rn)

    sw = sub.add_parser(
        "sweep",
        help="run a component once per point of a parameter grid (${NAME} in its arguments)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(sw, CLI)
    add_sweep_options(sw, CLI)
    add_notebook_options(sw, sweep=True)
    sw.add_argument(
        "component", nargs="?", default=None, help="component name, or path/to/file.py:function"
    )
    sw.add_argument("component_args", nargs=argparse.REMAINDER, help="the component's arguments")

    for name, text in (
        ("status", "print a job's status"),
        ("describe", "print a job's AppDef"),
        ("cancel", "cancel a job, or every trial of a sweep"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument(
            "app_handle",
            help="SCHEDULER://SESSION/APP_ID"
            + (", or a sweep's id (sweep-...)" if name == "cancel" else ""),
        )

    pre = sub.add_parser(
        "preempt",
        help="preempt a running job as its backend would (to try its resume from a checkpoint)",
    )
    pre.add_argument("app_handle", help="SCHEDULER://SESSION/APP_ID")
    pre.add_argument(
        "--grace",
        type=float,
        default=None,
        metavar="S",
        help="seconds between its SIGTERM and its kill (default: the backend's)",
    )
    watch = sub.add_parser(
        "watch", help="follow a job (or a sweep) submitted earlier to its end, as run --wait"
    )
    watch.add_argument("target", help="SCHEDULER://SESSION/APP_ID, or a sweep's id (sweep-...)")
    watch.add_argument("--no-log", dest="no_log", action="store_true", help="do not print logs")
    res = sub.add_parser("result", help="wait for a cell job and print its value")
    res.add_argument("app_handle", help="SCHEDULER://SESSION/APP_ID")
    res.add_argument("--timeout", type=float, default=None, metavar="S", help="wait at most S s")
    env = sub.add_parser(
        "env", help="the distributions a job's Python ran, and how they differ from this one's"
    )
    env.add_argument("app_handle", help="SCHEDULER://SESSION/APP_ID")
    out = sub.add_parser("outputs", help="list (or download) the files a job wrote")
    out.add_argument("app_handle", help="SCHEDULER://SESSION/APP_ID")
    out.add_argument(
        "--download",
        nargs="?",
        const="",
        default=None,
        metavar="DEST",
        help="fetch them into DEST (default: ./APP_ID), keeping their paths",
    )

    log = sub.add_parser("log", help="print a job's logs")
    log.add_argument("identifier", help="SCHEDULER://SESSION/APP_ID[/ROLE[/REPLICA,...]]")
    add_log_options(log)

    lst = sub.add_parser("list", help="list jobs (from the job store and the scheduler)")
    add_list_options(lst)

    ro = sub.add_parser("runopts", help="print the options a scheduler accepts")
    ro.add_argument("scheduler", nargs="?", default=None)

    sub.add_parser("builtins", help="list the built-in components")
    sub.add_parser("schedulers", help="list the available schedulers")
    sub.add_parser("resources", help="list the named resources (-h NAME)")

    conf = sub.add_parser("configure", help="write a .torchxconfig template")
    conf.add_argument("-s", "--schedulers", default=None, help="comma-separated schedulers")
    conf.add_argument("--print", dest="print_", action="store_true", help="print, don't write")
    conf.add_argument("-a", "--all", action="store_true", help="include optional options")
    return parser
