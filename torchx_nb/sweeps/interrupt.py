"""An interrupt (Ctrl-C, the notebook's stop button) while a sweep submits its trials: the
trial being submitted finishes its submit (so it is recorded and has a handle, never sent and
lost half-way through the job store), then the sweep stops and cancels what it submitted."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class SweepInterrupted(KeyboardInterrupt):
    """A sweep interrupted while it submitted: ``sweep`` holds the trials submitted before the
    interrupt, all cancelled but those in ``not_cancelled`` (index, handle, why; one line
    each in the text)."""

    def __init__(
        self, sweep: Any, submitted: int, not_cancelled: list[tuple[int, str, str]] | None = None
    ) -> None:
        text = (
            f"interrupted: the {submitted} trial(s) of {sweep.id} submitted so far were cancelled"
        )
        if not_cancelled:
            text += "".join(
                f"\n{sweep.id}: trial {i} ({handle}) could not be cancelled and may still run:"
                f" {why}"
                for i, handle, why in not_cancelled
            )
        super().__init__(text)
        self.sweep = sweep
        self.submitted = submitted
        self.not_cancelled = not_cancelled or []


class Deferred:
    """Whether SIGINT arrived while deferred (``bool(deferred)``)."""

    def __init__(self) -> None:
        self.hit = False

    def __bool__(self) -> bool:
        return self.hit


@contextmanager
def deferred_interrupt() -> Iterator[Deferred]:
    """Hold SIGINT until the caller checks (main thread only; elsewhere no signal arrives)."""
    flag = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def note(_signum: int, _frame: Any) -> None:
        flag.hit = True

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
