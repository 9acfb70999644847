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
# the same spelling for other options, known by their help: `configure -s` names the
# schedulers of the template and its `--all` takes the optional ones too; `%torchx workspace -n`
# is how many files it shows
ELSEWHERE = {
    ("configure", "-s", "comma-separated schedulers"),
    ("configure", "--all", "include optional options"),
    ("workspace", "-n", "rows to show"),
}


def shared_flags() -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    run_args.add_run_options(parser, run_args.CLI)
    run_args.add_sweep_options(parser, run_args.CLI)
    run_args.add_job_options(parser)
    run_args.add_output_options(parser)
    run_args.add_log_options(parser)
    run_args.add_notebook_options(parser, sweep=True)
    listing = argparse.ArgumentParser(add_help=False)  # its -s is list's own
    run_args.add_list_options(listing)
    return {s for p in (parser, listing) for a in p._actions for s in a.option_strings}


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
    """A flag spelled as a shared one, declared in a front end, is a copy unless it is another
    option by that name (``ELSEWHERE``, by its help). The check compared the help with the
    flags before, so it never found one: ``list -s`` was declared in both front ends."""
    flags = shared_flags()
    elsewhere = {(flag, shown) for _, flag, shown in ELSEWHERE}
    copies = [
        d
        for path in FRONT_ENDS
        for d in declared_in(path)
        if d[1] in flags and (d[1], d[2]) not in elsewhere
    ]
    assert copies == []


def test_list_takes_the_same_options_from_the_cli_and_the_magic() -> None:
    from torchx_nb.cli.parser import build_parser as _build_parser
    from torchx_nb.notebook.magic_line import _list_args

    cli = _build_parser()
    sub = next(a for a in cli._actions if isinstance(a, argparse._SubParsersAction))
    magic = argparse.ArgumentParser(add_help=False)
    _list_args(magic)

    def options(p: argparse.ArgumentParser) -> dict[str, tuple[list[str], str]]:
        return {a.dest: (a.option_strings, str(a.help)) for a in p._actions if a.dest != "help"}

    assert options(sub.choices["list"]) == options(magic)


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
