"""No ``if TYPE_CHECKING:`` block in the package declares methods or functions: a part that
calls another part's method gets it from a real base class (``schedulers/*/base.py``), or from
an abstract method its subclass must define, so a rename or a changed signature is a type error
(and, for an abstract method, an error at instantiation), never a stub that goes on compiling."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchx_nb"


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def stubs_in(source: str) -> list[str]:
    """``line: name`` of each function defined under an ``if TYPE_CHECKING:``, and of each
    ``if TYPE_CHECKING:`` inside a class body (attributes stubbed for a sibling part)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
                    found.append((stmt.lineno, f"TYPE_CHECKING block in class {node.name}"))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for inner in node.body:
                for d in ast.walk(inner):
                    if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found.append((d.lineno, f"def {d.name}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_no_type_checking_block_declares_a_stub() -> None:
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{hit}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in stubs_in(path.read_text())
    ]
    assert not bad, "stubs under TYPE_CHECKING (use a real base class):\n" + "\n".join(bad)


def test_the_finder_finds_a_stub_of_a_sibling_method() -> None:
    source = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from x import Y
class Logs:
    if TYPE_CHECKING:
        def _get(self, name: str) -> int: ...
if TYPE_CHECKING:
    def helper() -> None: ...
"""
    assert stubs_in(source) == [
        "6: TYPE_CHECKING block in class Logs",
        "7: def _get",
        "9: def helper",
    ]
