"""Log lines: which stream (``Stream``), and a line that knows when it was written.

``log_iter`` yields strings, as TorchX's does; where a backend keeps each line's time
(CloudWatch, Cloud Logging, the Kubernetes pod log with ``timestamps=true``, Docker's log, the
``.times`` files beside local_cwd's and Slurm's logs) the string is a ``LogLine``, which is
still a ``str`` everywhere a string goes, and carries ``time`` (seconds since the epoch, or
None where a line's time is not known)."""

from __future__ import annotations

from enum import Enum


class Stream(str, Enum):
    """Which of a replica's logs: stdout, stderr, or both as they were written."""

    STDOUT = "stdout"
    STDERR = "stderr"
    COMBINED = "combined"


class LogLine(str):
    """A ``str`` with the time its line was written (``None``: not known)."""

    time: float | None

    def __new__(cls, text: str, time: float | None = None) -> LogLine:
        line = super().__new__(cls, text)
        line.time = time
        return line

    @staticmethod
    def time_of(line: str) -> float | None:
        """When ``line`` was written, if its backend said."""
        return line.time if isinstance(line, LogLine) else None


__all__ = ["LogLine", "Stream"]
