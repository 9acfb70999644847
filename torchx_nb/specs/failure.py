"""Why a replica failed, as one card: which replica, its exit code and the signal behind it,
whether it ran out of memory (when its scheduler says so), the exception the program raised
(a cell's, from the cell runner) and its last log lines. Pure data: the runner fills it, every
surface (widget, snapshot, panel, CLI, REST) shows it."""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field
from typing import Any


def signal_name(exit_code: int | None) -> str | None:
    """The signal behind an exit code: a negative code (a process killed by signal N, as
    Python's Popen reports it) or 128+N (as shells and container runtimes report it)."""
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def torchelastic_exception(text: str | None) -> str | None:
    """The exception line (``ValueError: boom``) of torchelastic's error file, as a replica's
    message carries it (TorchX passes the file through); None for any other text."""
    import json

    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    message = doc.get("message") if isinstance(doc, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    return (
        message.strip().splitlines()[-1][:1000]
        if "Traceback" in message
        else message.strip().splitlines()[0][:1000]
    )


@dataclass(frozen=True)
class FailureCard:
    role: str
    replica: int
    exit_code: int | None = None
    oom: bool = False
    exception: str | None = None  # "ValueError: boom"
    last_lines: list[str] = field(default_factory=list)

    @property
    def signal(self) -> str | None:
        return signal_name(self.exit_code)

    def headline(self) -> str:
        """One line: ``python/0 raised ValueError: boom (exit code 1)``, ``cell/0 ran out of
        memory (exit code 137, SIGKILL)``, ``main/1 was killed by SIGKILL (exit code 137)``."""
        where = f"{self.role}/{self.replica}"
        code = "" if self.exit_code is None else f"exit code {self.exit_code}"
        how = ", ".join(p for p in (code, self.signal or "") if p)
        paren = f" ({how})" if how else ""
        if self.oom:
            return f"{where} ran out of memory{paren}"
        if self.exception:
            return f"{where} raised {self.exception}{paren}"
        if self.signal:
            return f"{where} was killed by {self.signal}" + (f" ({code})" if code else "")
        if self.exit_code is None:
            return f"{where} failed"
        return f"{where} exited with code {self.exit_code}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "signal": self.signal, "headline": self.headline()}

    def text(self) -> str:
        lines = [self.headline()]
        if self.last_lines:
            lines.append("  last lines:")
            lines += [f"    {line.rstrip()}" for line in self.last_lines]
        return "\n".join(lines)


__all__ = ["FailureCard", "signal_name", "torchelastic_exception"]
