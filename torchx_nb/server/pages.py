"""What a jobs page asks, apart from the store: its keyset cursor, the filter a live row must
still pass, the notebook path it links to, and a trial's parameters (masked)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from torchx_nb.redact import redact
from torchx_nb.search import fold_query, search_text
from torchx_nb.specs.exceptions import BadCursor as BadCursor

_CURSOR = re.compile(r"(-?[0-9]{1,20}(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,3})?):([\s\S]{1,1000})")


def page_cursor(submitted: float, handle: str) -> str:
    """The position after one row of a jobs page (keyset paging): ``SUBMITTED:HANDLE``, a
    plain value a client may also write itself (everything before the newest job)."""
    return f"{submitted!r}:{handle}"


def parse_cursor(text: str) -> tuple[float, str]:
    """A ``page_cursor`` back to (submitted, handle); anything else is ``BadCursor``."""
    m = _CURSOR.fullmatch(text)
    if m is None:
        raise BadCursor("after must be SUBMITTED:HANDLE, as a jobs page's next gives it")
    return float(m.group(1)), m.group(2)


def matches(
    row: dict[str, Any], scheduler: str | None, state: str | None, text: str | None
) -> bool:
    """Whether a job row passes a jobs page's filters: the same test as the store's query
    (``search_text`` and ``fold_query`` are the store's own fold), so a row that changes
    live stays in, or leaves, a filtered list exactly as a reload would show it."""
    if scheduler and row["scheduler"] != scheduler:
        return False
    if state and row["state"] != state.upper():
        return False
    if text:
        found = search_text(row["handle"], row["name"], row.get("notebook"), row.get("sweep"))
        if fold_query(text) not in found:
            return False
    return True


def notebook_path(notebook: str | None, root_dir: str | None) -> str | None:
    """The submitting notebook as a path under the server's root (what the page opens), or None
    when it lies outside it or is not a notebook file."""
    if not notebook or not root_dir or not notebook.endswith(".ipynb"):
        return None
    path = Path(os.path.expanduser(notebook))
    root = Path(os.path.expanduser(root_dir)).resolve()
    if not path.is_absolute():
        path = root / path
    try:
        return path.resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return None


_NON_FINITE = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def trial_params(text: str | None) -> dict[str, Any] | None:
    """A trial's parameters (masked), or None for a job that is not a sweep's trial."""
    import json

    if not text:
        return None
    try:  # a non-finite float is stored as NaN/Infinity, which browsers' JSON refuses
        value = json.loads(text, parse_constant=_NON_FINITE.__getitem__)
    except ValueError:
        return None
    return redact(value) if isinstance(value, dict) else None
