"""Why a Kubernetes job waits, in words: from the pod's own status (the scheduler's
``PodScheduled=False`` condition, with its message: which resource no node has; the
container's waiting reason: the image that cannot be pulled, a bad image name, a missing
secret or config map) and, when those say nothing, from the Warning events about the job and
its pods (a ResourceQuota that refuses every pod leaves no pod at all: only the Job's
``FailedCreate`` event says why)."""

from __future__ import annotations

import re
from typing import Any

_IMAGE = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
_CONFIG = {"CreateContainerConfigError", "CreateContainerError"}


def pod_pending_reason(pod: dict[str, Any]) -> str | None:
    """One line saying why ``pod`` has not started, with the next step; None when nothing
    says it is held (it is simply starting)."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = cond.get("reason") or "Unschedulable"
            message = " ".join(str(cond.get("message") or "no node fits it").split())[:600]
            return f"pending ({reason}): {message}; {unschedulable_step(reason, message, pod)}"
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    image = containers[0].get("image", "")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        message = " ".join(str(waiting.get("message") or "").split())[:300]
        if reason in _IMAGE:
            return (
                f"pending ({reason}): cannot pull the image {cs.get('image') or image}"
                + (f": {message}" if message else "")
                + "; check its name and tag, and that the cluster may pull from its registry"
                " (imagePullSecrets)"
            )
        if reason in _CONFIG:
            return f"pending ({reason}): {message or 'the container cannot be created'}"
    return None


_LESS = "ask for less (-h, cpu, memMB, gpu), or add nodes that have it"


def unschedulable_step(
    reason: str, message: str, pod: dict[str, Any] | None = None, fallback: str = _LESS
) -> str:
    """The next step for a pod the scheduler cannot place, fitted to what it said (one per
    cause it names, in its order): a taint wants a toleration, a node selector or affinity
    wants labels, a scheduling gate its controller, an unbound claim the claim; only too
    few resources want a smaller ask."""
    spec = (pod or {}).get("spec") or {}
    if reason == "SchedulingGated":
        gates = ", ".join(str(g.get("name")) for g in spec.get("schedulingGates") or [])
        return (
            f"it waits for its scheduling gates ({gates or 'see the pod'}) to be removed by"
            " the controller that set them (a queue such as Kueue admits it when there is room)"
        )
    steps: list[str] = []
    for taint in re.findall(r"untolerated taints?\(?s?\)? ?\{([^}]*)\}", message):
        key, _, value = taint.partition(":")
        value = value.strip()
        spec_ = f"{key.strip()}={value}:NoSchedule" if value else f"{key.strip()}:NoSchedule"
        steps.append(
            f"tolerate the taint {{{taint}}} with -cfg tolerations={spec_} (its effect:"
            " `kubectl describe node`), or run where no such taint is"
        )
    if "untolerated taint" in message and not steps:
        steps.append("tolerate the nodes' taints with -cfg tolerations=KEY=VALUE:EFFECT")
    if "node affinity/selector" in message or "node(s) didn't match node selector" in message:
        wanted = spec.get("nodeSelector") or {}
        said = ", ".join(f"{k}={v}" for k, v in wanted.items())
        steps.append(
            "no node has the labels the pod selects"
            + (f" ({said})" if said else "")
            + ": change -cfg node_selector (or the instance type), or label nodes"
            " (`kubectl get nodes --show-labels`)"
        )
    if "PersistentVolumeClaim" in message or "persistentvolumeclaim" in message:
        claims = [
            str((v.get("persistentVolumeClaim") or {}).get("claimName"))
            for v in spec.get("volumes") or []
            if v.get("persistentVolumeClaim")
        ]
        named = re.findall(r'persistentvolumeclaim "([^"]+)" not found', message) or claims
        steps.append(
            f"the claim {', '.join(named) or 'it mounts'} is not bound: create it, or check"
            " its StorageClass can provision it (`kubectl describe pvc`)"
        )
    if "volume node affinity conflict" in message:
        steps.append("its volume lives in another zone than the nodes that fit: run there")
    if "Insufficient" in message or "Too many pods" in message:
        steps.append(_LESS)
    if not steps and fallback:
        steps.append(fallback)
    return "; ".join(steps)


_NEXT_STEP = {
    "exceeded quota": "ask for less (-h, cpu, memMB, gpu), or ask for a larger ResourceQuota"
    " in the namespace (kubectl describe quota)",
    "FailedMount": "check the mounts' volumes, claims and secrets exist in the namespace",
}


def _when(event: dict[str, Any]) -> str:
    return str(
        event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""
    )


def event_pending_reason(
    events: list[dict[str, Any]], job_name: str, pods: list[dict[str, Any]]
) -> str | None:
    """The latest Warning event that still explains why the job ``job_name`` waits: one about
    the job newer than its newest pod (the controller could not make one), or one about a pod
    still Pending (a scheduling failure only while the pod is unscheduled). None when none
    does."""
    newest_pod = max((str(p["metadata"].get("creationTimestamp") or "") for p in pods), default="")
    waiting: dict[str, bool] = {}
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in (None, "Pending"):
            waiting[pod["metadata"]["name"]] = not any(
                c.get("type") == "PodScheduled" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
    best: dict[str, Any] | None = None
    for event in events:
        if event.get("type") != "Warning":
            continue
        about = (event.get("involvedObject") or {}).get("name")
        if about == job_name:
            if _when(event) < newest_pod:
                continue
        elif about in waiting:
            if event.get("reason") == "FailedScheduling" and not waiting[about]:
                continue
        else:
            continue
        if best is None or _when(event) >= _when(best):
            best = event
    if best is None:
        return None
    reason = str(best.get("reason") or "Warning")
    message = " ".join(str(best.get("message") or "").split())[:400]
    count = int(best.get("count") or 1)
    step = next((s for key, s in _NEXT_STEP.items() if key in message or key == reason), "")
    if reason == "FailedScheduling":
        about = (best.get("involvedObject") or {}).get("name")
        found = [p for p in pods if p["metadata"].get("name") == about]
        step = unschedulable_step(reason, message, found[0] if found else None, "")
    return (
        f"pending ({reason}): {message}"
        + (f" (x{count})" if count > 1 else "")
        + (f"; {step}" if step else "")
    )


__all__ = ["event_pending_reason", "pod_pending_reason", "unschedulable_step"]
