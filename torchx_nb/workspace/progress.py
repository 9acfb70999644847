"""Push progress: one line on stderr by default, redrawn at most 10 times a second; a notebook
swaps in a progress bar widget with ``progress_to``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TextIO


class Progress(Protocol):
    def __call__(self, done: int, total: int, what: str) -> None: ...

    def close(self) -> None: ...


class TextProgress:
    """``progress(done, total, what)`` draws ``what [#####     ] 42% 12.0/28.5 MB``."""

    def __init__(self, out: TextIO | None = None, width: int = 30) -> None:
        self.out = out or sys.stderr
        self.width = width
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * self.width)
        line = (
            f"\r{what[:28]:<28} [{bar:<{self.width}}] {frac:4.0%} "
            f"{done / 1e6:.1f}/{total / 1e6:.1f} MB"
        )
        self.out.write(line)
        self.out.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.out.write("\n")
            self.out.flush()


_FACTORY: ContextVar[Callable[[], Progress] | None] = ContextVar("torchx_nb_progress", default=None)


def new_progress() -> Progress:
    """The progress display of the current context (text on stderr unless ``progress_to``)."""
    factory = _FACTORY.get()
    return factory() if factory is not None else TextProgress()


@contextmanager
def progress_to(factory: Callable[[], Progress]) -> Iterator[None]:
    """Within the block, builds and pushes report to ``factory()``'s progress displays."""
    token = _FACTORY.set(factory)
    try:
        yield
    finally:
        _FACTORY.reset(token)
