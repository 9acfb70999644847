"""``KubeJobs``: what the Kubernetes scheduler and its parts (logs, arrays) share — the
client, paged list reads, and a job's pods read back as roles — so each part calls real
methods, not stubs."""

from __future__ import annotations

import json
from typing import Any

from torchx_nb.schedulers.api import Scheduler
from torchx_nb.schedulers.kubernetes.client import KubernetesError, _Kube, call
from torchx_nb.schedulers.kubernetes.constants import (
    LABEL_REPLICA_ID,
    LABEL_ROLE_NAME,
    POD_STATES,
    VOLCANO,
)
from torchx_nb.schedulers.kubernetes.describe import _epoch, _index_of
from torchx_nb.schedulers.kubernetes.options import KubernetesOpts
from torchx_nb.schedulers.kubernetes.pending import pod_pending_reason
from torchx_nb.specs.api import NONE, AppState, ReplicaStatus, Role, RoleStatus, is_terminal
from torchx_nb.specs.builders import role_of_command


class KubeJobs(Scheduler[KubernetesOpts]):
    """The base of ``KubernetesScheduler`` and of its parts."""

    kube: _Kube

    def __init__(self, backend: str, session_name: str) -> None:
        super().__init__(backend, session_name)
        #: namespaces without Volcano's CRD: their Volcano jobs are not asked for again
        self._no_volcano: set[str] = set()

    def _pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._in(namespace, "pods", self.kube.core.list_namespaced_pod, selector)

    def _jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._in(namespace, "jobs", self.kube.batch.list_namespaced_job, selector)

    def _in(self, namespace: str, kind: str, fn: Any, selector: str) -> list[dict[str, Any]]:
        """Every ``kind`` of ``namespace`` that ``selector`` picks (``fn`` lists them)."""
        return self._list(f"cannot list the {kind} of {namespace}", fn, namespace, selector)

    def _list(
        self, what: str, fn: Any, *args: Any, selector: str = "label_selector"
    ) -> list[dict[str, Any]]:
        """Every page of a list call (``limit``/``continue``), as plain dicts; the last of
        ``args`` is the ``selector`` (labels, or fields)."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {
                selector: args[-1],
                "limit": 500,
                "_preload_content": False,
            }
            if token:
                kwargs["_continue"] = token
            resp = call(what, fn, *args[:-1], **kwargs)
            body = json.loads(resp.data)
            items.extend(body.get("items", []))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _vcjobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        if namespace in self._no_volcano:
            return []
        try:
            return self._list(
                f"cannot list the Volcano jobs of {namespace}",
                self.kube.custom.list_namespaced_custom_object,
                *VOLCANO[:2],
                namespace,
                VOLCANO[2],
                selector,
            )
        except KubernetesError as e:
            if "(HTTP 404)" in str(e):  # no Volcano CRD on this cluster
                self._no_volcano.add(namespace)
                return []
            raise

    def _roles(
        self, job: dict[str, Any], pods: list[dict[str, Any]], volcano: bool, state: AppState
    ) -> tuple[list[Role], list[RoleStatus]]:
        templates: list[tuple[str, int, dict[str, Any]]] = []
        if volcano:
            for task in job["spec"].get("tasks", []):
                labels = task["template"]["metadata"].get("labels") or {}
                templates.append(
                    (
                        labels.get(LABEL_ROLE_NAME, task["name"]),
                        int(labels.get(LABEL_REPLICA_ID, 0)),
                        task["template"],
                    )
                )
        else:
            template = job["spec"]["template"]
            labels = template["metadata"].get("labels") or {}
            for i in range(int(job["spec"].get("completions") or 1)):
                templates.append((labels.get(LABEL_ROLE_NAME, "node"), i, template))
        roles: dict[str, Role] = {}
        statuses: dict[str, list[ReplicaStatus]] = {}
        latest: dict[tuple[str, int], dict[str, Any]] = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            key = (labels.get(LABEL_ROLE_NAME, ""), _index_of(pod))
            have = latest.get(key)
            if have is None or pod["metadata"].get("creationTimestamp", "") >= have["metadata"].get(
                "creationTimestamp", ""
            ):
                latest[key] = pod
        default = AppState.PENDING if not is_terminal(state) else state
        for role_name, idx, template in templates:
            c = template["spec"]["containers"][0]
            if role_name not in roles:
                env = {e["name"]: e.get("value", "") for e in c.get("env", []) if "value" in e}
                roles[role_name] = role_of_command(
                    role_name, c.get("image", ""), c.get("command"), env=env
                )
            roles[role_name].num_replicas += 1
            current = latest.get((role_name, idx))
            rstate, host, addr, exit_code, why = default, "(no pod yet)", None, None, ""
            finished: float | None = None
            ending = next_step = ""
            if current is not None:
                pstatus = current.get("status") or {}
                rstate = POD_STATES.get(pstatus.get("phase", "Pending"), AppState.UNKNOWN)
                host = current["metadata"]["name"]  # what kubectl logs/describe take
                addr = pstatus.get("podIP")
                for cs in pstatus.get("containerStatuses") or []:
                    term = (cs.get("state") or {}).get("terminated")
                    if term:
                        exit_code = term.get("exitCode")
                        why = term.get("reason", "") or term.get("message", "")
                        finished = _epoch(term.get("finishedAt"))
                if pstatus.get("reason") == "DeadlineExceeded":
                    ending, next_step = deadline_words(current.get("spec") or {}, "pod")
                    why = "DeadlineExceeded"
            rep = ReplicaStatus(
                idx,
                rstate,
                role_name,
                host,
                hostaddr=addr,
                exit_code=exit_code,
                oom=why == "OOMKilled" and rstate == AppState.FAILED,
                ended=finished,
                ending=ending,
                next_step=next_step,
            )
            if rstate == AppState.FAILED:
                rep.structured_error_msg = f"FAILED (exit code {exit_code})" + (
                    f": {why}" if why else ""
                )
            elif rstate == AppState.PENDING and current is not None:
                rep.structured_error_msg = pod_pending_reason(current) or NONE
            statuses.setdefault(role_name, []).append(rep)
        return list(roles.values()), [RoleStatus(n, reps) for n, reps in statuses.items()]


def deadline_words(spec: dict[str, Any], what: str) -> tuple[str, str]:
    """A card's words for a pod (or Job) stopped at its ``activeDeadlineSeconds``."""
    from torchx_nb.specs.durations import fmt_duration

    seconds = spec.get("activeDeadlineSeconds")
    said = f" of {fmt_duration(float(seconds))}" if seconds else ""
    return (
        f"was stopped at its time limit{said} (the {what}'s activeDeadlineSeconds)",
        "the limit is set on the pods by the cluster's policy (torchx_nb sets none): ask its"
        " admins to raise it, or split the work into shorter jobs",
    )
