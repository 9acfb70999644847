"""Why an AWS Batch job ended, in words, where Batch says it: an attempt stopped at its
``attemptDurationSeconds`` (``-cfg timeout``). Pure functions over a DescribeJobs answer."""

from __future__ import annotations

import re
from typing import Any

# Batch's own wording ("Job attempt duration exceeded timeout"), and moto's
_TIMEOUT = re.compile(
    r"attempt duration exceeded timeout|exceeded the configured attemptDurationSeconds", re.I
)


def time_limit(job: dict[str, Any]) -> tuple[str, str] | None:
    """(what ended it, the next step) for a job Batch stopped at its timeout; None else."""
    if not _TIMEOUT.search(str(job.get("statusReason") or "")):
        return None
    from torchx_nb.specs.durations import fmt_duration

    seconds = (job.get("timeout") or {}).get("attemptDurationSeconds")
    said = f" of {fmt_duration(float(seconds))}" if seconds else ""
    return (
        f"was stopped at its time limit{said} (attemptDurationSeconds)",
        "raise the limit with -cfg timeout=SECONDS",
    )


__all__ = ["time_limit"]
