"""Why a GCP Batch job waits, in words: its latest status event (GCP's own sentence) with
the next step for the ones that hold a job — quota, and a location out of resources."""

from __future__ import annotations

import re

# GCP's own wording, not any "quota" (a project or job may be called quota-something)
_QUOTA = re.compile(r"inadequate quotas?\b|QUOTA_EXCEEDED|\bquota exceeded\b", re.I)
_NO_CAPACITY = re.compile(
    r"RESOURCE_POOL_EXHAUSTED|does not have enough resources|ZONE_RESOURCE|STOCKOUT", re.I
)


def waiting_reason(description: str) -> str:
    """The event's sentence, with what to do when it says the job is held."""
    text = " ".join(description.split())
    if _QUOTA.search(text):
        return (
            f"pending (quota): {text}; ask for more quota for the project (IAM & Admin >"
            " Quotas), or for less (-h, cpu, gpu)"
        )
    if _NO_CAPACITY.search(text):
        return f"pending (no capacity): {text}; try another -cfg location or machine type, or wait"
    return text


__all__ = ["waiting_reason"]
