"""kubernetes on spot nodes, and a preemption that is not a failure.

- ``spot``: node selection and tolerations for the common spot node labels (GKE, EKS, AKS), or
  any of them (``spot=true``: a node affinity whose terms are ORed).
- An Indexed Job's ``podFailurePolicy`` ignores a pod with the ``DisruptionTarget`` condition (an
  eviction, a node drained or reclaimed, the scheduler's preemption), so it never spends
  ``backoffLimit``; ``Ignore`` has no limit of its own, so describe lists each such pod as a
  preemption (kept in a private record of this machine: an evicted pod leaves the API once it
  ended) and the runner stops the job past ``max_preemptions``.
  ``preempt`` (preempt.py) records the preemptions it makes here too."""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from torchx_nb.schedulers.kubernetes.describe import _epoch, _index_of
from torchx_nb.specs.api import InvalidRunConfigException
from torchx_nb.specs.preemption import Preemption

if TYPE_CHECKING:
    from pathlib import Path

#: each cloud's spot node label (its value on a spot node) and the taint its spot nodes carry
SPOT_NODES: dict[str, tuple[str, str, bool]] = {
    "gke": ("cloud.google.com/gke-spot", "true", True),
    "eks": ("eks.amazonaws.com/capacityType", "SPOT", False),  # managed node groups: no taint
    "aks": ("kubernetes.azure.com/scalesetpriority", "spot", True),
}
DISRUPTION = "DisruptionTarget"
#: the DisruptionTarget condition's reasons (Kubernetes' words) in ours
_WHY = {
    "EvictionByEvictionAPI": "evicted (its node drained or reclaimed)",
    "PreemptionByScheduler": "preempted by a pod of higher priority",
    "DeletionByTaintManager": "spot capacity reclaimed: its node was tainted NoExecute",
    "DeletionByPodGC": "its node is gone",
    "TerminationByKubelet": "ended by its node (shutdown or pressure)",
}
TORCHX_NB_WHY = "torchx-nb preempt"
#: pods disrupted within this many seconds of the first are one preemption of their job
TOGETHER_S = 60.0


def spot_choice(value: str | bool | None) -> str | None:
    """``gke``, ``eks``, ``aks``, ``any`` (``true``), or None (off); a bad value is one line."""
    text = str(value if value is not None else "").strip().lower()
    if text in ("", "false", "no", "0", "none", "off"):
        return None
    if text in ("true", "yes", "1", "any"):
        return "any"
    if text in SPOT_NODES:
        return text
    raise InvalidRunConfigException(
        f"spot {value!r}: use gke, eks or aks (that cloud's spot nodes), or true (any of them);"
        " for other spot nodes give their label and taint as -cfg node_selector and tolerations",
        "spot",
    )


def spot_placement(choice: str | None, node_selector: dict[str, str]) -> dict[str, Any]:
    """What ``spot`` adds to a pod spec: ``nodeSelector`` (one cloud) or a required node
    affinity (any of them), and ``tolerations`` of the spot taints. A node selector given that
    contradicts the cloud's label is one line."""
    if choice is None:
        return {}
    clouds = list(SPOT_NODES) if choice == "any" else [choice]
    tolerations = [
        {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}
        for key, value, tainted in (SPOT_NODES[c] for c in clouds)
        if tainted
    ]
    if choice != "any":
        key, value, _ = SPOT_NODES[choice]
        given = node_selector.get(key)
        if given is not None and given != value:
            raise InvalidRunConfigException(
                f"spot={choice} selects {key}={value}, and node_selector says {key}={given}:"
                " give only one of them",
                "spot",
            )
        return {"nodeSelector": {key: value}, "tolerations": tolerations}
    terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        for key, value, _ in SPOT_NODES.values()
    ]
    required = {"nodeSelectorTerms": terms}  # terms are ORed: a spot node of any cloud
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return {"affinity": affinity, "tolerations": tolerations}


def spot_note(choice: str | None, api: str) -> str | None:
    """The dry run's line on where ``spot`` places the pods, and what a preemption spends."""
    if choice is None:
        return None
    clouds = list(SPOT_NODES) if choice == "any" else [choice]
    where = " or ".join(f"{SPOT_NODES[c][0]}={SPOT_NODES[c][1]}" for c in clouds)
    spends = (
        "an evicted or reclaimed pod never spends max_retries (podFailurePolicy: Ignore on"
        " DisruptionTarget)"
        if api == "indexed"
        else "under Volcano an eviction restarts the job and spends one of its maxRetry"
        " (api=indexed spends none)"
    )
    return f"spot: on nodes labelled {where}, their spot taints tolerated; {spends}"


def ignore_disruptions() -> dict[str, Any]:
    """The rule that keeps a disrupted pod (evicted, reclaimed) out of ``backoffLimit``."""
    return {"action": "Ignore", "onPodConditions": [{"type": DISRUPTION, "status": "True"}]}


def _disrupted(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == DISRUPTION and cond.get("status") == "True":
            return dict(cond)
    return None


def record_path(kind: str, app_id: str) -> Path:
    from torchx_nb.paths import data_dir

    safe = app_id.replace(":", "_").replace("/", "_")
    return data_dir() / "kubernetes" / kind / f"{safe}.json"


def load_record(path: Path) -> dict[str, Any]:
    """The pods seen disrupted (name → when, why, index, resumed), as kept; a record that
    cannot be read, or an entry that is not one we wrote, counts as nothing seen."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {
        str(name): e
        for name, e in loaded.items()
        if isinstance(e, dict)
        and isinstance(e.get("at"), (int, float))
        and isinstance(e.get("index"), int)
        and isinstance(e.get("why", ""), str)
        and isinstance(e.get("resumed"), (int, float, type(None)))
    }


def save_record(path: Path, data: dict[str, Any]) -> None:
    """Keep the record, privately; one that cannot be written (a read-only data folder) is
    not kept — status goes on with what the API shows."""
    from torchx_nb.paths import private_dir, write_private

    with contextlib.suppress(OSError):
        private_dir(path.parent)
        write_private(path, json.dumps(data))


def preemptions(
    job_id: str, pods: list[dict[str, Any]], index: int | None = None
) -> list[Preemption]:
    """The preemptions of the Job ``job_id`` (``NAMESPACE:NAME``; of its completion ``index``
    only, for a sweep trial): each pod seen with the ``DisruptionTarget`` condition (kept once
    seen, so one that has left the API still counts), oldest first, with when the next pod of
    its index started."""
    path = record_path("preemptions", job_id)
    kept = load_record(path)
    changed = False
    for pod in pods:
        name = str(pod["metadata"].get("name", ""))
        cond = _disrupted(pod)
        if cond is None or name in kept:
            continue
        at = _epoch(cond.get("lastTransitionTime")) or time.time()
        why = _WHY.get(str(cond.get("reason")), "evicted")
        kept[name] = {"at": at, "why": why, "index": _index_of(pod)}
        changed = True
    for entry in kept.values():
        if entry.get("resumed") is None:
            starts = [
                t
                for p in pods
                if _index_of(p) == entry["index"] and _disrupted(p) is None
                if (t := _epoch((p.get("status") or {}).get("startTime"))) and t >= entry["at"] - 1
            ]
            if starts:
                entry["resumed"] = max(min(starts), entry["at"])  # a start time is in whole s
                changed = True
    if changed:
        save_record(path, kept)
    rows = sorted(
        (e for e in kept.values() if index is None or e["index"] == index), key=lambda e: e["at"]
    )
    # the pods of one job disrupted together (a preempt, a drained or reclaimed node pool) are
    # one preemption of the job, which resumed once every one of them runs again
    groups: list[list[dict[str, Any]]] = []
    for e in rows:
        if groups and e["at"] - groups[-1][0]["at"] <= TOGETHER_S:
            groups[-1].append(e)
        else:
            groups.append([e])
    out = []
    for group in groups:
        resumed = [float(e["resumed"]) for e in group if e.get("resumed") is not None]
        whole = len(resumed) == len(group)
        out.append(
            Preemption(
                at=group[0]["at"],
                why=group[0].get("why") or "evicted",
                resumed_at=max(resumed) if whole else None,
            )
        )
    return out
