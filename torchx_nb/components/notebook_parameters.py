"""A notebook's parameters as papermill sees them: the names (and each value's source, exactly
as written) its ``parameters``-tagged cell assigns, read with Python's own parser; and ``-p``
text read as a Python literal, else kept as the text it is."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from typing import Any


def parameters_source(nb: dict[str, Any]) -> str | None:
    """The source of the notebook's first code cell tagged ``parameters`` (None without one);
    ``nb`` is the notebook's JSON (nbformat 4), taken as it comes: a malformed cell is skipped."""
    cells = nb.get("cells")
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata")
        tags = meta.get("tags") if isinstance(meta, dict) else None
        if isinstance(tags, list) and "parameters" in tags:
            source = cell.get("source", "")
            if isinstance(source, list) and all(isinstance(x, str) for x in source):
                return "".join(source)
            return source if isinstance(source, str) else None
    return None


def as_python(source: str) -> str:
    """The cell's source as the kernel runs it: IPython's own transformer turns magics
    (``%matplotlib inline``), ``!`` escapes and ``x = !ls`` into Python, leaving every other
    line as written (so a value's source is still the notebook's own). IPython is imported
    only for a cell Python's parser refuses."""
    try:
        ast.parse(source)
        return source
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    try:
        return str(TransformerManager().transform_cell(source))
    except Exception:  # IPython cannot read it either: Python's parser says why
        return source


def declared(source: str) -> dict[str, str]:
    """Each name the parameters cell assigns at top level, with its value's source as written
    (multi-line values, ``#`` inside strings, underscores and all); empty when the cell is not
    valid Python. ``a = b = 1`` gives both names ``1``; ``a, b = 1, 2`` gives each its own
    element; a name whose value has no source of its own (``a, *rest = f()``) gives ``""``."""
    source = as_python(source)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            _assigned(source, target, value, found)
    return found


def _assigned(source: str, target: ast.expr, value: ast.expr | None, found: dict[str, str]) -> None:
    """The names ``target`` binds, each with its own part of ``value`` when it has one."""
    if isinstance(target, ast.Starred):
        target, value = target.value, None
    if isinstance(target, ast.Name):
        found[target.id] = (ast.get_source_segment(source, value) or "") if value else ""
    elif isinstance(target, (ast.Tuple, ast.List)):
        parts: list[ast.expr | None] = [None] * len(target.elts)
        starred = any(isinstance(t, ast.Starred) for t in target.elts)
        if (
            isinstance(value, (ast.Tuple, ast.List))
            and not starred
            and len(value.elts) == len(target.elts)
            and not any(isinstance(v, ast.Starred) for v in value.elts)
        ):
            parts = list(value.elts)
        for part_target, part in zip(target.elts, parts, strict=True):
            _assigned(source, part_target, part, found)


@dataclass(frozen=True)
class ParametersCell:
    """What a notebook's parameters cell holds, for a form: whether there is one, its names
    with each value's source as written (in order), and why it cannot be read (or None)."""

    found: bool
    names: tuple[tuple[str, str], ...] = ()
    error: str | None = None


def parameters_cell(nb: Any) -> ParametersCell:
    """The parameters cell of ``nb`` (a notebook's JSON), read with Python's own parser."""
    source = parameters_source(nb) if isinstance(nb, dict) else None
    if source is None:
        return ParametersCell(found=False)
    try:
        ast.parse(as_python(source))
    except SyntaxError as e:
        return ParametersCell(True, error=f"line {e.lineno}: {e.msg}")
    except (ValueError, RecursionError, MemoryError) as e:
        return ParametersCell(True, error=str(e).splitlines()[0] if str(e) else type(e).__name__)
    return ParametersCell(True, tuple(declared(source).items()))


_NON_FINITE = re.compile(r"[+-]?(nan|inf|infinity)", re.IGNORECASE)
_INT = re.compile(r"[+-]?\d+(_\d+)*")


def read_value(text: str) -> Any:
    """What ``-p NAME=TEXT`` gives: a Python literal (``3``, ``0.1``, ``'a'``, ``[1, 2]``,
    ``None``, ``True``; ``true``/``false`` too) read with ``ast.literal_eval``; ``nan``,
    ``inf``, ``-inf`` (any case) as the float, as papermill reads them; anything else is the
    text itself, spaces kept. An int of more than Python's digit limit for text (4300) is a
    ``ValueError`` naming it (it was kept as text without a word)."""
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if _NON_FINITE.fullmatch(t):
        return float(t)
    if _INT.fullmatch(t) and sum(c.isdigit() for c in t) > sys.get_int_max_str_digits() > 0:
        raise ValueError(
            f"an int of {sum(c.isdigit() for c in t)} digits is over Python's limit for int"
            f" text ({sys.get_int_max_str_digits()}); give it as text, in quotes, or compute it"
            " in the notebook"
        )
    try:
        value = ast.literal_eval(t)
    except (ValueError, SyntaxError) as e:
        if "integer string conversion" in str(e):  # an int over the limit inside a list
            raise ValueError(
                f"an int in it is over Python's limit for int text"
                f" ({sys.get_int_max_str_digits()} digits); give it as text, in quotes, or"
                " compute it in the notebook"
            ) from None
        return text
    except (TypeError, MemoryError, RecursionError):
        return text
    if isinstance(value, tuple) and not t.startswith("("):
        return text  # a comma is part of the text (1,2 is not a tuple here)
    if value is Ellipsis or ... in _leaves(value):
        return text  # '...' has no literal repr: it was refused after being read as one
    return value


def _leaves(value: Any) -> list[Any]:
    """The values inside ``value`` (its items, keys and theirs), without recursion."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend([*item.keys(), *item.values()])
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
        else:
            found.append(item)
    return found
