"""How every surface writes a duration (pure data formatting, no I/O): schedulers' time-limit
cards, the phases, the CLI and the widgets share it."""

from __future__ import annotations


def fmt_duration(seconds: float | None) -> str:
    """``m:ss`` or ``h:mm:ss`` ("" when unknown): how every surface shows a duration."""
    if seconds is None:
        return ""
    total = int(max(0.0, seconds))
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


__all__ = ["fmt_duration"]
