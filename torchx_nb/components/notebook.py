"""A whole notebook as the job's program: the checks made before anything is built, the
AppDef it runs as (the cell runner in its notebook mode, under nbclient), and the files that
go beside the workspace."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torchx_nb
from torchx_nb import specs
from torchx_nb.components.cell import RUNNER
from torchx_nb.specs.exceptions import BadParameter
from torchx_nb.specs.program import CellApp, NotebookProgram


class UnknownParameterWarning(UserWarning):
    """A value whose name the parameters cell does not assign (injected anyway)."""


# said at every run, as papermill logs it: Python's default shows a warning once per process,
# so a kernel's second run with the same misspelled name injected it without a word (appended:
# a filter of the user's own still comes first)
warnings.filterwarnings("always", category=UnknownParameterWarning, append=True)


def notebook_program(
    path: str,
    workspace: str,
    parameters: dict[str, Any] | None = None,
    cell_timeout: float | None = None,
) -> NotebookProgram:
    """A checked notebook program: ``path`` an existing ``.ipynb`` notebook inside
    ``workspace``, parameter names Python identifiers. One line naming the fix otherwise."""
    import keyword

    nb_path = Path(path).expanduser().resolve()
    root = Path(workspace).expanduser().resolve()
    if nb_path.suffix != ".ipynb":
        raise ValueError(f"{path!r} is not a notebook: give a .ipynb file")
    if not nb_path.is_file():
        raise ValueError(f"notebook {path!r} does not exist")
    if not nb_path.is_relative_to(root):
        raise ValueError(
            f"notebook {path!r} is outside the workspace {workspace!r}: the job runs it from"
            " there; drop --workspace (its folder is the default) or give a folder holding it"
        )
    why = _not_a_notebook(nb_path)
    if why:
        raise ValueError(f"{path!r} cannot be read as a notebook: {why}")
    with open(nb_path, encoding="utf-8") as f:
        nb = json.load(f)
    language = _language(nb)
    if language.lower() not in ("python", ""):
        raise ValueError(
            f"{path!r} runs in a kernel for {language[:40]}, not Python: a notebook job runs"
            " Python notebooks only"
        )
    for name, value in (parameters or {}).items():
        if (
            not isinstance(name, str)  # from Python, any key: {1: 2} raised AttributeError
            or not name.isidentifier()
            or keyword.iskeyword(name)
            or name.startswith("__")
        ):
            raise BadParameter(str(name), "a parameter's name must be a Python variable name")
        if _too_long_int(value):
            raise BadParameter(name, TOO_LONG_INT)
        if _too_deep(value):
            raise BadParameter(name, TOO_DEEP)
        if not _is_literal(value):
            raise BadParameter(
                name,
                f"a {type(value).__name__} is not a Python literal; give numbers, text,"
                " booleans, None, or lists and dicts of them",
            )
    _warn_unknown(nb, parameters or {})
    if cell_timeout is not None and cell_timeout <= 0:
        raise ValueError(f"--cell-timeout must be more than 0 seconds, not {cell_timeout:g}")
    return NotebookProgram(
        nb_path.relative_to(root).as_posix(),
        tuple((parameters or {}).items()),
        cell_timeout,
    )


def _language(nb: dict[str, Any]) -> str:
    """The notebook's kernel language ("" when the notebook does not say)."""
    meta = nb.get("metadata")
    if not isinstance(meta, dict):
        return ""
    for key in ("kernelspec", "language_info"):
        info = meta.get(key)
        if isinstance(info, dict):
            name = info.get("language") if key == "kernelspec" else info.get("name")
            if isinstance(name, str) and name:
                return name
    return ""


def _warn_unknown(nb: dict[str, Any], parameters: dict[str, Any]) -> None:
    """One warning per value whose name the parameters cell does not assign, as papermill's
    (it is injected anyway); none when the notebook has no parameters cell."""
    from torchx_nb.components.notebook_parameters import declared, parameters_source

    source = parameters_source(nb) if nb.get("nbformat", 0) >= 4 else None
    if source is None:
        return
    known = declared(source)
    for name in parameters:
        if name not in known:
            warnings.warn(
                f"Passed unknown parameter: {name} (the parameters cell assigns"
                f" {', '.join(known) or 'nothing'}); it is injected anyway",
                UnknownParameterWarning,
                stacklevel=3,
            )


def warn_unknown_names(path: str, names: list[str]) -> None:
    """The unknown-name warning for a notebook sweep's ``-p`` names (its trials' values reach
    the notebook in the job, not through ``notebook_program``); nothing when the notebook
    cannot be read (the run's own checks say why)."""
    try:
        with open(Path(path).expanduser(), encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return
    if isinstance(nb, dict):
        _warn_unknown(nb, dict.fromkeys(names))


def _not_a_notebook(path: Path) -> str | None:
    """Why ``path`` is not a notebook nbformat can run (its JSON and its format, read without
    importing nbformat, whose schema validator takes seconds to import), else None."""
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    if not isinstance(nb, dict) or not isinstance(nb.get("nbformat"), int):
        return "no nbformat version (not a Jupyter notebook's JSON)"
    if nb["nbformat"] < 3:
        return f"nbformat {nb['nbformat']} is too old: open and save it in Jupyter first"
    cells = nb.get("cells") if nb["nbformat"] >= 4 else nb.get("worksheets")
    if not isinstance(cells, list):
        return "it has no list of cells"
    return None


TOO_LONG_INT = (
    "an int of more than 4300 digits has no text in Python (sys.get_int_max_str_digits);"
    " give it as text, or compute it in the notebook"
)


def _too_long_int(value: Any) -> bool:
    """Whether ``value`` holds an int whose ``repr`` Python refuses to write (over its
    int-to-text digit limit)."""
    try:
        repr(value)
    except ValueError as e:
        return "integer string conversion" in str(e)
    except Exception:
        return False
    return False


TOO_DEEP = (
    "it nests deeper than Python's parser reads back (about 200 levels of brackets, the"
    " job's own dict of values included); flatten it, or build it in the notebook"
)


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests too deep to travel: its ``repr`` raises RecursionError, or the
    job's dict of values holding it (one level more) is too deep for Python's parser, so the
    job would fail reading it back."""
    import ast

    try:
        ast.parse(repr({"x": value}), mode="eval")
    except RecursionError:
        return True
    except SyntaxError as e:
        return "too many nested" in str(e)
    except Exception:
        return False
    return False


def _is_literal(value: Any) -> bool:
    """Whether ``value`` is written back exactly by its repr (what the injected cell holds):
    a literal ``ast.literal_eval`` reads, or a non-finite float in one (papermill injects
    those as ``float('nan')``, and so does the job)."""
    from torchx_nb.apps.cell_runner.notebook import read_literal

    try:
        text = repr(value)
        back = read_literal(text)
        return bool(back == value) or repr(back) == text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def notebook_app(
    program: NotebookProgram,
    *,
    name: str | None = None,
    image: str = torchx_nb.IMAGE,
    h: str | None = None,
    env: dict[str, str] | None = None,
    mounts: list[str] | None = None,
) -> CellApp:
    """The AppDef the notebook runs as: one replica of the cell runner in notebook mode
    (pointed at its files by ``run_notebook_with_runner`` once the workspace is known)."""
    args = [RUNNER, "--notebook", program.path]
    if program.cell_timeout is not None:
        args += ["--cell-timeout", f"{program.cell_timeout:g}"]
    return CellApp(
        name=name or Path(program.path).stem or "notebook",
        roles=[
            specs.Role(
                name="notebook",
                image=image,
                entrypoint="python",
                args=args,
                env=dict(env or {}),
                resource=specs.resource(cpu=1, memMB=1024, h=h),
                mounts=specs.parse_mounts(mounts) if mounts else [],
            )
        ],
        program=program,
    )


def parameters_file(program: NotebookProgram) -> dict[str, bytes]:
    """The file the values travel in beside the runner: their dict as a Python literal
    (``repr``, read back with ``ast.literal_eval``), so tuples, sets, bytes and non-text dict
    keys arrive as they were, and no value is bounded by the environment's size."""
    values = {k: v for k, v in program.parameters}
    from torchx_nb.apps.cell_runner.notebook import PARAMETERS_FILE  # the job's (asyncio)

    return {f".torchx-nb/{PARAMETERS_FILE}": repr(values).encode()}


def run_notebook_with_runner(role: specs.Role, program: NotebookProgram, folder: str = "") -> None:
    """Point the notebook's role at the cell runner in ``folder`` (the job's working folder
    when empty)."""
    base = f"{folder.rstrip('/')}/" if folder else ""
    role.args = [f"{base}{RUNNER}", *role.args[1:]]
