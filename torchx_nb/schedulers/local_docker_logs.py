"""A container's log as Docker keeps it: each message stamped with the time the daemon
received it, read back as lines that carry that time (``LogLine``)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from torchx_nb.schedulers.logs import LineSplitter
from torchx_nb.specs.log_line import LogLine


def timed_lines(streams: list[Any]) -> Iterator[str]:
    """The lines of a container's logs (its attempts' in order) asked with ``timestamps``:
    the daemon sends each log message as one chunk, its time, a space, then its text. A line
    over 16 KB is kept as several messages (only the last ends with a newline), so a line has
    the time of the message it began in, as local_cwd's line written in parts has the time
    it began."""
    lines = LineSplitter()
    began: float | None = None  # when the line still open began
    is_open = False
    try:
        for message in itertools.chain.from_iterable(streams):
            stamp, sep, text = message.partition(b" ")
            when = _docker_stamp(stamp) if sep else None
            if when is None:  # not a stamped message: text that continues what came before
                text, when = message, began
            if not is_open:
                began = when
            for line in lines.feed(text):
                yield LogLine(line, began)
                began = when
            is_open = not text.endswith(b"\n")
        for line in lines.flush():
            yield LogLine(line, began)
    finally:
        for stream in streams:
            stream.close()


def _docker_stamp(stamp: bytes) -> float | None:
    """The time of a message's ``2026-11-23T10:00:00.123456789Z`` stamp, else None."""
    if not re.fullmatch(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z", stamp):
        return None
    try:
        return docker_time(stamp.decode())
    except ValueError:
        return None


def docker_time(text: str | None) -> float | None:
    """Epoch seconds of a Docker timestamp (``2026-11-23T10:00:00.123456789Z``); None for
    Docker's zero time or nothing."""
    if not text or text.startswith("0001-"):
        return None

    head, _, frac = text.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(head + "+00:00").timestamp()
    digits = "".join(ch for ch in frac if ch.isdigit())[:6]
    return stamp + (int(digits) / 10 ** len(digits) if digits else 0.0)
