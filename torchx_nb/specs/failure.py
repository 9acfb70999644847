"""Why a replica failed, as one card: which replica, its exit code and the signal behind it,
whether it ran out of memory (when its scheduler says so), the exception the program raised
(a cell's, from the cell runner) and its last log lines. Pure data: the runner fills it, every
surface (widget, snapshot, panel, CLI, REST) shows it."""

from __future__ import annotations

import re
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


# a card is read in a widget, a terminal, a REST answer and a chat message: every part of it
# is bounded, so one runaway line (a 200,000-character exception, 5 MB printed on one line)
# cannot flood any of them
MAX_LINE = 500  # characters per line
MAX_LINES = 20  # last log lines
MAX_CARD_BYTES = 16_000  # the whole card, as JSON

# ECMA-48 escape sequences (colours, cursor moves, titles) and the other control characters
# a terminal would act on; tabs stay
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, links
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the 8-bit CSI
    r"|[\x00-\x08\x0b-\x1f\x7f]"
)


def strip_escapes(text: str) -> str:
    """``text`` without terminal escapes and control characters (newlines and tabs stay): what
    the CLI prints of a scheduler's or a program's words."""
    return _ESCAPES.sub("", text)


def clean_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` without terminal escapes or control characters, at most ``limit``
    characters (a longer one ends with ``… (N more characters)``)."""
    text = _ESCAPES.sub("", text.replace("\r\n", "\n").rstrip("\n"))
    if len(text) <= limit:
        return text
    rest = len(text) - (limit - 30)
    return f"{text[: limit - 30]}… ({rest} more characters)"


def clean_lines(lines: list[str], limit: int = MAX_LINES) -> list[str]:
    """The last ``limit`` lines, each cleaned and bounded (a line holding newlines is split)."""
    out: list[str] = []
    for line in lines[-limit:]:
        text = str(line).replace("\r\n", "\n").rstrip("\n")
        out += [clean_line(part) for part in _ESCAPES.sub("", text).split("\n")]
    return out[-limit:]


@dataclass(frozen=True)
class FailureCard:
    """One failing replica. Built cleaned and bounded (see ``MAX_*``): terminal escapes are
    stripped and long lines cut, so every surface can show it as it is."""

    role: str
    replica: int
    exit_code: int | None = None
    oom: bool = False
    exception: str | None = None  # "ValueError: boom"
    last_lines: list[str] = field(default_factory=list)
    # the signal its scheduler named (0: none); None: read from a 128+N exit code
    signal_number: int | None = None
    ended: float | None = None  # when it ended, where its scheduler says
    ending: str = ""  # why it ended, in words ("was stopped at its time limit of 1:00:00")
    next_step: str = ""  # what to do about it ("raise it with -cfg time=MINUTES")

    def __post_init__(self) -> None:
        fix = object.__setattr__
        if self.exception is not None:
            fix(self, "exception", clean_line(" ".join(self.exception.split("\n"))) or None)
        fix(self, "ending", clean_line(self.ending))
        fix(self, "next_step", clean_line(self.next_step))
        lines = clean_lines(list(self.last_lines))
        import json

        # a line of 500 four-byte characters is 2 KB: drop the oldest until the card fits
        while lines and len(json.dumps({**asdict(self), "last_lines": lines})) > MAX_CARD_BYTES:
            lines.pop(0)
        fix(self, "last_lines", lines)

    @property
    def signal(self) -> str | None:
        if self.signal_number is not None:
            if self.signal_number <= 0 or (self.oom and self.signal_number > 64):
                return None  # Slurm writes 0:125 for a job it stopped for its memory
            return signal_name(-self.signal_number)
        return signal_name(self.exit_code)

    def headline(self) -> str:
        """One line: ``python/0 raised ValueError: boom (exit code 1)``, ``cell/0 ran out of
        memory (exit code 137, SIGKILL)``, ``main/1 was killed by SIGKILL (exit code 137)``,
        ``train/0 was stopped at its time limit of 1:00:00 (SIGTERM)``."""
        where = f"{self.role}/{self.replica}"
        code = "" if self.exit_code is None else f"exit code {self.exit_code}"
        how = ", ".join(p for p in (code, self.signal or "") if p)
        paren = f" ({how})" if how else ""
        if self.oom:
            return f"{where} ran out of memory{paren}"
        if self.exception:
            return f"{where} raised {self.exception}{paren}"
        if self.ending:
            return f"{where} {self.ending}{paren}"
        if self.signal:
            return f"{where} was killed by {self.signal}" + (f" ({code})" if code else "")
        if self.exit_code is None:
            return f"{where} failed"
        return f"{where} exited with code {self.exit_code}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "signal": self.signal, "headline": self.headline()}

    def text(self) -> str:
        lines = [self.headline()]
        if self.next_step:
            lines.append(f"  next: {self.next_step}")
        if self.last_lines:
            lines.append("  last lines:")
            lines += [f"    {line.rstrip()}" for line in self.last_lines]
        return "\n".join(lines)


def first_failures(cards: list[FailureCard]) -> list[FailureCard]:
    """The cards, the first failure first: by the time each replica ended where its
    scheduler tells (a replica stopped because another failed ends later); where it does
    not, one that raised, then one that ran out of memory, then other exit codes, then
    replicas killed by a signal (usually the others being stopped)."""

    def kind(card: FailureCard) -> int:
        return 0 if card.exception else 1 if card.oom else 3 if card.signal else 2

    def key(card: FailureCard) -> tuple[float, int, str, int]:
        return (
            card.ended if card.ended is not None else float("inf"),
            kind(card),
            card.role,
            card.replica,
        )

    return sorted(cards, key=key)


__all__ = [
    "MAX_CARD_BYTES",
    "MAX_LINE",
    "MAX_LINES",
    "FailureCard",
    "clean_line",
    "clean_lines",
    "first_failures",
    "signal_name",
    "strip_escapes",
    "torchelastic_exception",
]
