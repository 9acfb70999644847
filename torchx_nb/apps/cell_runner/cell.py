"""Running a cell: its source in a fresh namespace (with the variables the kernel pushed), as
IPython would, the value of its last expression kept; a module it needs and this Python lacks
is one line before anything of it runs."""

from __future__ import annotations

import ast
import linecache
import os
import pickle
import sys
from typing import Any

from .cancel import CANCELLED_EXIT
from .common import OWN, cloudpickle, rank
from .records import CELL, cell_traceback, record_error, record_exit, record_failure, record_value
from .start import start

SITE_DIRS = {"site-packages", "dist-packages"}  # where IPython puts '' before the first
_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _guarded(handlers: list[ast.ExceptHandler]) -> bool:
    """Whether a ``try`` catches a failed import (so the import is optional)."""
    for h in handlers:
        if h.type is None:
            return True
        names = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any(isinstance(n, ast.Name) and n.id in _GUARDS for n in names):
            return True
    return False


def required_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """The top-level modules of a program's leading imports (before its first other
    statement, so a cell that installs or puts a folder on ``sys.path`` first is never judged
    early), skipping a ``try`` that catches ImportError: each with its line."""
    found: list[tuple[str, int]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.extend((a.name.split(".")[0], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Try) and _guarded(node.handlers):
            continue
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break
    return found


def missing_import(tree: ast.Module, source_lines: list[str]) -> str | None:
    """One line naming the first module the program needs that this Python cannot find
    (checked before anything runs, without importing it), with where it runs; else None."""
    import importlib.util

    for name, line in required_imports(tree):
        if name == "__future__" or name in sys.builtin_module_names:
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            text = source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""
            image = os.environ.get("TORCHX_NB_BASE_IMAGE")
            where = f"{sys.executable}" + (f" in the image {image}" if image else "")
            return (
                f"No module named {name!r} in this job (line {line}: {text[:80]}): the job's"
                f" Python is {where}; install {name} there, or ship it in the workspace"
            )
    return None


def _ends_with_semicolon(source: str) -> bool:
    """IPython's rule: a cell whose last token (comments aside) is ``;`` shows no value."""
    import io
    import tokenize

    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.ENDMARKER,
        tokenize.INDENT,
        tokenize.DEDENT,
    }
    last = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in skip:
                last = tok
    except (tokenize.TokenError, SyntaxError):
        return source.rstrip().endswith(";")
    return last is not None and last.type == tokenize.OP and last.string == ";"


def _workspace_on_path(*folders: str) -> None:
    """The job runs in its workspace: put it (then the cell's own folder: on local_cwd and
    Slurm a private one) where IPython puts ``''`` in a kernel, after the standard library
    and before the first site-packages, so a ``statistics.py`` there shadows the standard
    module in the job exactly when it does in the kernel (not at all)."""
    for path in folders:
        while path in sys.path:
            sys.path.remove(path)
    # none (python -S): first, as IPython does then
    at = next((i for i, p in enumerate(sys.path) if os.path.basename(p) in SITE_DIRS), 0)
    sys.path[at:at] = list(folders)


def run(script: str, args: list[str]) -> int:
    """Run the cell; returns the process's exit status."""
    pickler = cloudpickle()
    folder, params, cancelled = start()
    if cancelled:
        return CANCELLED_EXIT
    out = os.path.join(folder, OWN)
    with open(script, encoding="utf-8") as f:
        source = f.read()
    linecache.cache[CELL] = (len(source), None, source.splitlines(keepends=True), CELL)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__, **params}
    sys.argv = [script, *args]
    _workspace_on_path(os.getcwd(), os.path.dirname(os.path.abspath(script)))
    try:
        tree = ast.parse(source, CELL)
        missing = missing_import(tree, source.splitlines())
        if missing is not None:  # one line, before anything of the cell runs
            return record_failure(
                out, "ModuleNotFoundError", missing, f"ModuleNotFoundError: {missing}"
            )
        last = tree.body[-1] if tree.body else None
        wants_value = isinstance(last, ast.Expr) and not _ends_with_semicolon(source)
        body = tree.body[:-1] if wants_value else tree.body
        push = os.environ.get("TORCHX_NB_PUSH")
        if push:
            with open(push, "rb") as f:
                pushed = pickle.load(f)
            namespace.update({name: pickler.loads(data) for name, data in pushed.items()})
        exec(compile(ast.Module(body=body, type_ignores=[]), CELL, "exec"), namespace)
        value = None
        if wants_value:
            assert isinstance(last, ast.Expr)
            value = eval(compile(ast.Expression(body=last.value), CELL, "eval"), namespace)
    except SystemExit as exc:
        record_exit(out, exc)
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        record_error(out, exc, pickler)
        sys.stderr.write(cell_traceback(exc))
        return 1
    return record_value(out, value, pickler) if rank() == 0 else 0
