"""What every widget here shares: whether widgets can show at all, a widget displayed with a
text fallback (headless runs and frontends without widgets still show the information), closing
a widget tree, how often a view may redraw, and the process's pool for a view's slow reads."""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

WIDGETS_ENV = "TORCHX_NB_WIDGETS"
MIN_REFRESH_S = 0.1
WORK_THREADS = "torchx-nb-work"
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def in_background(fn: Any, *args: Any) -> Future[Any]:
    """``fn(*args)`` on the process's small pool for what a view reads slowly (a result from
    an output store), never on the refresher's thread that every watcher shares: one pool
    for every view, not a thread per view."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=WORK_THREADS)
        return _pool.submit(fn, *args)


def widgets_enabled() -> bool:
    """False for ``TORCHX_NB_WIDGETS=0|false|text|off``, without ipywidgets, or outside a Jupyter
    kernel (a terminal IPython cannot show widgets); True otherwise."""
    if os.environ.get(WIDGETS_ENV, "").strip().lower() in ("0", "false", "text", "off", "no"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def widget_bundle(widget: Any, text: str) -> dict[str, Any]:
    """A display bundle of ``widget`` with ``text`` as its text/plain fallback, so headless runs
    (nbconvert, nbclient) and frontends without widgets show the information."""
    return {
        "application/vnd.jupyter.widget-view+json": {
            "model_id": widget.model_id,
            "version_major": 2,
            "version_minor": 0,
        },
        "text/plain": text,
    }


def display_with_text(widget: Any, text: str) -> Any:
    """Display ``widget`` with a text fallback; returns the DisplayHandle."""
    from IPython.display import display

    return display(widget_bundle(widget, text), raw=True, display_id=True)


def close_tree(widget: Any) -> None:
    """Close a widget and its children (frees their models in the kernel and the frontend)."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    with contextlib.suppress(Exception):
        widget.close()
