"""Push (and download) progress: a tqdm bar on stderr by default; a notebook swaps in its own
progress bar widget with ``progress_to`` (see ``notebook.widgets.ProgressBar`` for why that one
is not tqdm's). A transfer reports several parts (layers, files) as one bar."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TextIO


class Progress(Protocol):
    def __call__(self, done: int, total: int, what: str) -> None: ...

    def close(self) -> None: ...


class TextProgress:
    """``progress(done, total, what)`` for each part (a layer, a file) drives one tqdm bar over
    all of them, on stderr (tqdm redraws at most 10 times a second)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr
        self._bar: Any = None
        self._parts: dict[str, tuple[int, int]] = {}

    def __call__(self, done: int, total: int, what: str) -> None:
        from tqdm import tqdm

        self._parts[what] = (done, total)
        if self._bar is None:
            self._bar = tqdm(
                total=total, unit="B", unit_scale=True, file=self.out, mininterval=0.1, leave=True
            )
        self._bar.total = sum(t for _, t in self._parts.values())
        self._bar.set_description_str(what[:28], refresh=False)
        self._bar.update(sum(d for d, _ in self._parts.values()) - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


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
