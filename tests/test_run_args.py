"""The shared options are declared once: ``torchx_nb/run_args.py`` holds every flag the command
line and the magics share, and neither front end declares one of those flags itself (a copy
drifts: its help, its type, its default)."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from torchx_nb import run_args

PACKAGE = Path(run_args.__file__).parent
FRONT_ENDS = [*(PACKAGE / "cli").glob("*.py"), PACKAGE / "notebook" / "magic_line.py"]
# the same spelling for other options, known by their help: `list -s` filters the job list by
# scheduler, `configure -s` names the schedulers of the template
ELSEWHERE = ("only this scheduler's jobs", "comma-separated schedulers")


def shared_flags() -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    run_args.add_run_options(parser, run_args.CLI)
    run_args.add_sweep_options(parser, run_args.CLI)
    run_args.add_job_options(parser)
    run_args.add_output_options(parser)
    run_args.add_log_options(parser)
    run_args.add_notebook_options(parser, sweep=True)
    return {s for a in parser._actions for s in a.option_strings}


def declared_in(path: Path) -> list[tuple[str, str, str]]:
    """(file, flag, help) of every literal ``X.add_argument("--flag", ..., help=...)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            helps = [k.value for k in node.keywords if k.arg == "help"]
            shown = helps[0].value if helps and isinstance(helps[0], ast.Constant) else ""
            for arg in node.args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"):
                    found.append((path.name, str(arg.value), str(shown)))
    return found


def test_the_shared_flags_include_image_name_log_json_and_the_log_filters() -> None:
    flags = shared_flags()
    for flag in ("--image", "--name", "--log", "--json", "--regex", "--tail", "--streams"):
        assert flag in flags


def test_no_front_end_declares_a_shared_flag_itself() -> None:
    flags = shared_flags()
    copies = [
        d for path in FRONT_ENDS for d in declared_in(path) if d[2] in flags and d not in ELSEWHERE
    ]
    assert copies == []


def test_the_cli_and_the_magic_give_the_same_help_for_image_and_name() -> None:
    from torchx_nb.cli.parser import build_parser as _build_parser
    from torchx_nb.notebook.magic_line import _job_options

    cli = _build_parser()
    sub = next(a for a in cli._actions if isinstance(a, argparse._SubParsersAction))
    notebook = sub.choices["run-notebook"]
    magic = argparse.ArgumentParser(add_help=False)
    _job_options(magic)

    def helps(p: argparse.ArgumentParser) -> dict[str, str]:
        return {a.dest: str(a.help) for a in p._actions if a.dest in ("image", "name")}

    assert helps(notebook)["image"] == helps(magic)["image"] == "image the job runs in"
    assert helps(notebook)["name"] == "the job's name (default: the notebook's)"
    assert helps(magic)["name"] == "the job's name"
