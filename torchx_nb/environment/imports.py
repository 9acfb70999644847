"""Which top-level modules a program imports: a cell's source (imports nested in functions,
classes and ``try`` blocks included), every code cell of a notebook (IPython magics and shell
escapes skipped), a component's script or ``-m`` module, and, followed through, the workspace
modules those import. Read with ``ast``; nothing is imported or run."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from torchx_nb.specs.api import AppDef
from torchx_nb.specs.program import CellProgram, NotebookProgram, Program

# what the cell runner itself imports in the job, beyond the standard library
RUNNER_NEEDS: dict[type, tuple[str, ...]] = {
    NotebookProgram: ("nbclient", "nbformat", "ipykernel"),
}
_MAGIC = re.compile(r"^\s*(%%?|!|\?)|^\s*\w+\s*=\s*[!%]")
_MAX_FILES = 2000


@dataclass
class Imports:
    """Top-level module names, each with where it was first seen (``cell line 3``,
    ``helpers.py line 1``…), and the workspace modules read along the way."""

    modules: dict[str, str] = field(default_factory=dict)
    workspace_modules: set[str] = field(default_factory=set)

    def add(self, name: str, where: str) -> None:
        self.modules.setdefault(name, where)


def python_source(cell: str) -> str:
    """A notebook cell's source as Python: lines that are IPython syntax (magics, ``!``
    escapes, ``x = !cmd``) blanked, so line numbers stay; a cell magic blanks the cell."""
    lines = cell.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        return ""
    return "\n".join("" if _MAGIC.match(line) else line for line in lines)


def _module_names(tree: ast.AST) -> Iterable[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def _is_stdlib(name: str) -> bool:
    return name in sys.stdlib_module_names or name in sys.builtin_module_names


class _Scanner:
    def __init__(self, workspace: Path | None) -> None:
        self.workspace = workspace
        self.found = Imports()
        self.read: set[Path] = set()

    def local_module(self, name: str) -> list[Path]:
        """The workspace files a top-level import of ``name`` reads (a module or a package's
        ``.py`` files); [] when it is not the workspace's."""
        if self.workspace is None or not name.isidentifier():
            return []
        single = self.workspace / f"{name}.py"
        if single.is_file():
            return [single]
        package = self.workspace / name
        if package.is_dir() and not package.is_symlink():
            return sorted(p for p in package.rglob("*.py") if not p.is_symlink())[:_MAX_FILES]
        return []

    def source(self, text: str, where: str) -> None:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return
        for name, line in _module_names(tree):
            if name == "__future__" or _is_stdlib(name):
                continue
            local = self.local_module(name)
            if local:
                self.found.workspace_modules.add(name)
                for path in local:
                    self.file(path)
            else:
                self.found.add(name, f"{where} line {line}")

    def file(self, path: Path) -> None:
        if path in self.read or len(self.read) >= _MAX_FILES:
            return
        self.read.add(path)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        rel = path.relative_to(self.workspace) if self.workspace else path
        self.source(text, str(rel))


def _notebook_cells(path: Path) -> list[str]:
    import json

    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    cells = nb.get("cells") if isinstance(nb, dict) else None
    out = []
    for cell in cells if isinstance(cells, list) else []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            out.append("".join(src) if isinstance(src, list) else str(src))
    return out


def _script_of(app: AppDef, workspace: Path | None) -> tuple[str | None, Path | None]:
    """A component's program in the workspace: ``-m MODULE`` or a ``.py`` path among the
    first role's arguments."""
    if not app.roles:
        return None, None
    args = [app.roles[0].entrypoint, *app.roles[0].args]
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1].split(".")[0], None
        if arg.endswith(".py") and workspace is not None:
            candidate = (workspace / arg).resolve()
            if candidate.is_file() and candidate.is_relative_to(workspace.resolve()):
                return None, candidate
    return None, None


def program_imports(program: Program, workspace: str | None) -> Imports:
    """The modules ``program`` imports that are neither the standard library's nor the
    workspace's own (those are followed instead), plus what the cell runner needs for it."""
    root = Path(workspace).expanduser().resolve() if workspace else None
    scan = _Scanner(root)
    if isinstance(program, CellProgram):
        scan.source(program.source, "cell")
    elif isinstance(program, NotebookProgram):
        if root is not None:
            for i, cell in enumerate(_notebook_cells(root / program.path), start=1):
                scan.source(python_source(cell), f"{program.path} cell {i}")
    else:
        module, script = _script_of(program, root)
        if script is not None:
            scan.file(script)
        elif module is not None:
            scan.source(f"import {module}", "-m")
    for need in RUNNER_NEEDS.get(type(program), ()):
        scan.found.add(need, "the notebook runner")
    return scan.found
