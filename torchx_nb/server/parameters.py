"""``GET /torchx-nb/api/parameters``: a notebook's parameters cell as the Run as Job dialog
pre-fills it, read on the server with Python's own parser (the browser has none): each name,
and its value's source exactly as written, so a value the user leaves alone is never sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchx_nb.server.submit import BadSubmission, notebook_under_root


def notebook_parameters(notebook: Any, root_dir: str | None) -> dict[str, Any]:
    """The parameters cell of ``notebook`` (a path under the server's root): whether there is
    one, its names and values as written, and why it is not valid Python (else None).
    ``BadSubmission`` for a path that is not a notebook under the root."""
    from torchx_nb.components.notebook_parameters import parameters_cell

    path = notebook_under_root(notebook, root_dir)
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadSubmission(f"notebook {notebook!r} cannot be read as a notebook: {why}") from None
    cell = parameters_cell(nb)
    return {
        "notebook": notebook,
        "cell": cell.found,
        "parameters": [{"name": name, "value": value} for name, value in cell.names],
        "error": cell.error,
    }


__all__ = ["notebook_parameters"]
