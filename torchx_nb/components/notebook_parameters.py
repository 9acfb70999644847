"""A notebook's parameters as papermill sees them: the names (and each value's source, exactly
as written) its ``parameters``-tagged cell assigns, read with Python's own parser; and ``-p``
text read as a Python literal, else kept as the text it is."""

from __future__ import annotations

import ast
from typing import Any


def parameters_source(nb: dict[str, Any]) -> str | None:
    """The source of the notebook's first code cell tagged ``parameters`` (None without one);
    ``nb`` is the notebook's JSON (nbformat 4)."""
    for cell in nb.get("cells") or []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if "parameters" in ((cell.get("metadata") or {}).get("tags") or []):
            source = cell.get("source", "")
            return "".join(source) if isinstance(source, list) else str(source)
    return None


def declared(source: str) -> dict[str, str]:
    """Each name the parameters cell assigns at top level, with its value's source as written
    (multi-line values, ``#`` inside strings, underscores and all); empty when the cell is not
    valid Python."""
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
        text = ast.get_source_segment(source, value) or ""
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = text
    return found


def read_value(text: str) -> Any:
    """What ``-p NAME=TEXT`` gives: a Python literal (``3``, ``0.1``, ``'a'``, ``[1, 2]``,
    ``None``, ``True``; ``true``/``false`` too) read with ``ast.literal_eval``; anything else is
    the text itself, spaces kept."""
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if isinstance(value, tuple) and not text.strip().startswith("("):
        return text  # a comma is part of the text (1,2 is not a tuple here)
    return value
