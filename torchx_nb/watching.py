"""Putting a job's or a sweep's live widgets back from Python: ``JobHandle.watch()`` and
``Sweep.watch()`` run ``%torchx watch`` through IPython's own API, so nothing below the
notebook layer imports it."""

from __future__ import annotations

from torchx_nb.specs.api import TorchxNbError


def watch_in_kernel(target: str) -> None:
    """``%torchx watch TARGET`` in the running kernel (the extension loaded if it was not)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise TorchxNbError("watch() shows widgets in a notebook: run it in a kernel")
    shell.extension_manager.load_extension("torchx_nb")
    shell.run_line_magic("torchx", f"watch {target}")


__all__ = ["watch_in_kernel"]
