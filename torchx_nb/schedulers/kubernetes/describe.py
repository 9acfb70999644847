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
    cancelled: dict[int, str]  # index → who cancelled it (the Job's annotations)

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
            cancelled_indexes(job),
        )


#: the Job's annotation ``torchx.pytorch.org/cancel-INDEX`` (its value: who cancelled) records a
#: cancelled trial where every process that reads the Job sees it, whatever its pods become
CANCEL_INDEX_PREFIX = "torchx.pytorch.org/cancel-"


def cancel_index_key(index: int) -> str:
    """The Job's annotation that records trial ``index`` cancelled."""
    return f"{CANCEL_INDEX_PREFIX}{index}"


def cancelled_indexes(job: dict[str, Any]) -> dict[int, str]:
    """The indexes the Job's annotations record cancelled, with who cancelled each."""
    out: dict[int, str] = {}
    for key, value in ((job.get("metadata") or {}).get("annotations") or {}).items():
        tail = key[len(CANCEL_INDEX_PREFIX) :] if key.startswith(CANCEL_INDEX_PREFIX) else ""
        if tail.isdigit():
            out[int(tail)] = str(value or "")
    return out


#: a sweep trial's pod exits with this when its cancel mark (a pod annotation) appears
CANCELLED_EXIT = 170
CANCEL_ANNOTATION = "torchx.pytorch.org/cancel"
_PODINFO = "/etc/torchx-nb/pod"
# The trial's program under a watcher (sh): a pod marked before it starts ends with
# CANCELLED_EXIT without starting the program; an eviction's SIGTERM goes on to the program; a
# background loop reads the downward API's annotations file each second and, once the cancel
# mark is there, stops the program (SIGTERM, SIGKILL 10 s later). A pod marked when its program
# ends ends with CANCELLED_EXIT whatever the program's status (one that exits 0 on SIGTERM
# would otherwise complete its index). ``wait`` interrupted by the trap is waited again until
# the program is gone. The program's own exit 170 (no mark) ends the pod with 1: 170 would fail
# its index for good and read as a cancel.
_MARKED = f"grep -q '^{CANCEL_ANNOTATION}=' {_PODINFO}/annotations 2>/dev/null"
_TRIAL_SH = f"""\
if {_MARKED}; then exit {CANCELLED_EXIT}; fi
"$@" & pid=$!
(while sleep 1; do if {_MARKED}; then kill -TERM $pid; sleep 10; kill -KILL $pid; exit; fi; done) &
watcher=$!
trap 'kill -TERM $pid 2>/dev/null' TERM
wait $pid; code=$?
while kill -0 $pid 2>/dev/null; do wait $pid; code=$?; done
kill $watcher 2>/dev/null
if {_MARKED}; then exit {CANCELLED_EXIT}; fi
if [ $code -eq {CANCELLED_EXIT} ]; then exit 1; fi
exit $code
"""


def array_job(job: dict[str, Any], size: int) -> dict[str, Any]:
    """The one-replica Indexed Job ``job`` made into a sweep of ``size`` trials: a completion
    index per trial, all started at once, each failing on its own (``backoffLimitPerIndex``:
    a failed trial neither stops nor fails the others before they end). One trial is cancelled
    by a mark of its own, not by eviction: the cancel annotates the pod, the trial's watcher
    (``sh``) sees it in the downward API's annotations file and ends the program with exit
    170, which fails the index for good (``FailIndex`` on that exit code); an evicted or
    reclaimed pod (``DisruptionTarget``) is ignored and its trial runs again. Each trial is
    replica 0 of its own run."""
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
                    "onExitCodes": {"operator": "In", "values": [CANCELLED_EXIT]},
                },
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ]
        },
    )
    pod = spec["template"]["spec"]
    pod.pop("subdomain", None)
    pod["volumes"] = [
        *pod.get("volumes", []),
        {
            "name": "torchx-nb-pod",
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        },
    ]
    container = pod["containers"][0]
    container["command"] = ["sh", "-c", _TRIAL_SH, "torchx-nb-trial", *container["command"]]
    container["volumeMounts"] = [
        *container.get("volumeMounts", []),
        {"name": "torchx-nb-pod", "mountPath": _PODINFO, "readOnly": True},
    ]
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
