"""How a job search folds text: one definition for the job store's query (a stored, folded
column) and the server's live matching of its event stream, so both find the same jobs."""

from __future__ import annotations


def search_text(handle: str, name: str, notebook: str | None, sweep: str | None) -> str:
    """What a text search looks in, case folded with Python's ``str.lower`` (SQLite's
    ``lower()`` folds ASCII only)."""
    return f"{handle} {name} {notebook or ''} {sweep or ''}".lower()


def fold_query(text: str) -> str:
    """A search query folded as ``search_text`` folds what it searches."""
    return text.lower()
