"""Pods and jobs read back: a replica's index and latest pod, times, an Indexed Job's indexes as a sweep's trials."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from torchx_nb.schedulers.kubernetes.constants import INDEX_LABEL, LABEL_REPLICA_ID, RANK0_ENV
from torchx_nb.specs.log_line import LogLine


def _index_ranges(text: str | None) -> set[int]:
    """The indexes a Job status lists as ``completedIndexes``/``failedIndexes`` ("1,3-5")."""
    out: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _index_of(pod: dict[str, Any]) -> int:
    labels = pod["metadata"].get("labels") or {}
    raw = labels.get(LABEL_REPLICA_ID) or labels.get(INDEX_LABEL) or "0"
    return int(raw) if str(raw).isdigit() else 0


def _latest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


@dataclass
class _ArrayState:
    """What one describe round knows of a sweep's Indexed Job, read once for all its trials:
    the Job, the indexes that ended each way, and the pods of each index."""

    job: dict[str, Any]
    completed: set[int]
    failed: set[int]
    pods: dict[int, list[dict[str, Any]]]

    @classmethod
    def of(cls, job: dict[str, Any], pods: list[dict[str, Any]]) -> _ArrayState:
        status = job.get("status") or {}
        by_index: dict[int, list[dict[str, Any]]] = {}
        for pod in pods:
            by_index.setdefault(_index_of(pod), []).append(pod)
        return cls(
            job,
            _index_ranges(status.get("completedIndexes")),
            _index_ranges(status.get("failedIndexes")),
            by_index,
        )


def array_job(job: dict[str, Any], size: int) -> dict[str, Any]:
    """The one-replica Indexed Job ``job`` made into a sweep of ``size`` trials: a completion
    index per trial, all started at once, each failing on its own (``backoffLimitPerIndex``:
    a failed trial neither stops nor fails the others before they end), and a pod evicted
    through the API fails its index for good (``FailIndex`` on ``DisruptionTarget``): that is
    how one trial is cancelled. Each trial is replica 0 of its own run."""
    out = json.loads(json.dumps(job))
    spec = out["spec"]
    retries = int(spec.pop("backoffLimit", 0) or 0)
    spec.update(
        completions=size,
        parallelism=size,
        backoffLimitPerIndex=retries,
        podFailurePolicy={
            "rules": [
                {
                    "action": "FailIndex",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        },
    )
    pod = spec["template"]["spec"]
    pod.pop("subdomain", None)
    container = pod["containers"][0]
    container["env"] = [
        {"name": "TORCHX_REPLICA_ID", "value": "0"} if e["name"] == "TORCHX_REPLICA_ID" else e
        for e in container["env"]
        if e["name"] != RANK0_ENV
    ]
    return out


def _parse_time(text: str) -> datetime | None:
    """An RFC 3339 time as the API writes it (up to nanoseconds, ``Z``), in UTC."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if m is None:
        return None
    base, frac, zone = m.groups()
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{base}.{(frac or '0')[:6].ljust(6, '0')}{zone}")


def _after_timestamp(line: str, since: datetime | None, until: datetime | None) -> str | None:
    """The line without the time stamp the API put in front, or None outside the window."""
    stamp, sep, rest = line.partition(" ")
    when = _parse_time(stamp) if sep else None
    if when is None:
        return line
    if since and when < since.astimezone(timezone.utc):
        return None
    if until and when > until.astimezone(timezone.utc):
        return None
    return LogLine(rest, when.timestamp())


def _epoch(text: Any) -> float | None:
    when = _parse_time(str(text)) if text else None
    return when.timestamp() if when else None
