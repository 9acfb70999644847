"""Every process's command line on this machine, sampled while something runs: to prove a
secret never reaches argv (``ps`` shows it to every user)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class CommandLines:
    """Every process's command line on this machine, sampled while a submit runs."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    self.seen.add(raw.replace(b"\0", b" ").decode(errors="replace"))
            self._stop.wait(0.005)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
