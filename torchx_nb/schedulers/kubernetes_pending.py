"""Why a Kubernetes pod waits, in words, from the pod's own status: the scheduler's
``PodScheduled=False`` condition (Unschedulable, with its message: which resource no node
has) and the container's waiting reason (the image that cannot be pulled, a bad image name, a
missing secret or config map)."""

from __future__ import annotations

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
            message = " ".join(str(cond.get("message") or "no node fits it").split())
            return (
                f"pending ({reason}): {message}; ask for less (-h, cpu, memMB, gpu), or add"
                " nodes that have it"
            )
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


__all__ = ["pod_pending_reason"]
