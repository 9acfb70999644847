"""Push progress: one line on stderr, redrawn at most 10 times a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO


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
