"""A cell sweep as one Indexed Job: each trial a completion index, cancelled by a mark."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from torchx_nb.schedulers.abilities import (
    SubmitsArrays,
)
from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.cancellers import cancelled_by, canceller, clean_who
from torchx_nb.schedulers.kubernetes.base import KubeJobs
from torchx_nb.schedulers.kubernetes.client import (
    KubernetesError,
    call,
)
from torchx_nb.schedulers.kubernetes.constants import (
    INDEX_LABEL,
    LABEL_INSTANCE,
)
from torchx_nb.schedulers.kubernetes.describe import (
    CANCEL_ANNOTATION,
    CANCELLED_EXIT,
    _ArrayState,
    _epoch,
    _latest,
    array_job,
    cancel_index_key,
)
from torchx_nb.schedulers.kubernetes.options import KubernetesOpts
from torchx_nb.schedulers.kubernetes.request import (
    KubernetesJob,
    _fmt,
    parse_app_id,
    parse_trial_id,
)
from torchx_nb.schedulers.kubernetes.spot import preemptions
from torchx_nb.schedulers.outputs import (
    cancel_mark,
    mark_cancelled,
    marked_ending,
)
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    is_terminal,
)


class KubeArrays(SubmitsArrays, KubeJobs):
    """A cell sweep as one Indexed Job: each trial a completion index, cancelled by a record on
    the Job (which describe reads) and a mark (a pod annotation its watcher ends the pod on
    with exit 170), not by eviction."""

    def can_array(self, app: AppDef, cfg: KubernetesOpts) -> bool:
        """Indexed Jobs only: a Volcano job has no way to stop one of its tasks, so under
        ``api=volcano`` each trial is a job of its own, in the queue the user chose."""
        return super().can_array(app, cfg) and cfg.api == "indexed"

    def array_request(
        self, info: AppDryRunInfo[KubernetesJob], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[KubernetesJob]:
        """One Indexed Job of ``size`` completion indexes (``array_job``), no Service: a
        trial has one replica and needs no rendezvous name."""
        req = info.request
        if req.api != "indexed":
            raise KubernetesError("a sweep is one Indexed Job only with -cfg api=indexed")
        job = array_job(req.resource, size)
        return AppDryRunInfo(dataclasses.replace(req, resource=job, service=None), _fmt)

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """``NAMESPACE:NAME:INDEX``: the completion indexes of the Indexed Job."""
        return [f"{app_id}:{i}" for i in range(size)]

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """Suspend the Indexed Job (``spec.suspend``): the Job controller deletes its running
        pods and starts no more, and indexes that ended keep their end (the Job and its record
        stay, where deleting it would lose them)."""
        namespace, name = parse_app_id(array_id)
        ended = self._ended(self._read_job(namespace, name))
        for trial_id in trial_ids:  # a trial that has ended stays as it ended
            if parse_trial_id(trial_id)[2] not in ended:
                mark_cancelled("kubernetes", trial_id)
        call(
            f"cannot suspend {array_id}",
            self.kube.batch.patch_namespaced_job,
            name,
            namespace,
            {"spec": {"suspend": True}},
        )
        return True

    def _trial_response(self, app_id: str, index: int, array: _ArrayState) -> DescribeAppResponse:
        """Completion index ``index`` of a sweep's Indexed Job, read as a run of its own: the
        Job's cancel record, then its completed and failed indexes decide its end, its latest
        pod what it does now."""
        job = array.job
        mine = array.pods.get(index, [])
        pod = _latest(mine)
        phase = ((pod or {}).get("status") or {}).get("phase", "Pending")
        if index in array.cancelled:  # the Job's record: whatever its pods did since
            said = marked_ending("kubernetes", app_id)
            state, msg = (
                AppState.CANCELLED,
                f"it {said or cancelled_by(clean_who(array.cancelled[index]))}",
            )
        elif index in array.completed:
            state, msg = AppState.SUCCEEDED, ""
        elif index in array.failed:
            state, msg = AppState.FAILED, ""
            if cancel_mark("kubernetes", app_id).exists():
                state, msg = AppState.CANCELLED, f"it {marked_ending('kubernetes', app_id)}"
            elif CANCELLED_EXIT in _exit_codes(pod):  # cancelled from another machine
                state, msg = AppState.CANCELLED, "cancelled: its pod carries the cancel mark"
        elif job["metadata"].get("deletionTimestamp"):
            state, msg = AppState.CANCELLED, "deleted"
        elif job["spec"].get("suspend"):
            state, msg = AppState.CANCELLED, "cancelled with its sweep's Job (suspended)"
        else:
            state, msg = (AppState.RUNNING if phase == "Running" else AppState.PENDING), ""
        as_one = {**job, "spec": {**job["spec"], "completions": 1}}
        relabelled = [
            {
                **p,
                "metadata": {
                    **p["metadata"],
                    "labels": {**(p["metadata"].get("labels") or {}), INDEX_LABEL: "0"},
                },
            }
            for p in ([pod] if pod else [])
        ]
        roles, statuses = self._roles(as_one, relabelled, False, state)
        failed = [
            r.structured_error_msg for s in statuses for r in s.replicas if r.structured_error_msg
        ]
        pstatus = (pod or {}).get("status") or {}
        ended = None
        if is_terminal(state):
            for cs in pstatus.get("containerStatuses") or []:
                ended = _epoch(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max(len(mine) - 1, 0),
            msg=msg or ("; ".join(failed) if state == AppState.FAILED else ""),
            roles=roles,
            roles_statuses=statuses,
            metadata=dict(job["metadata"].get("labels") or {}),
            started=_epoch(pstatus.get("startTime")),
            ended=ended,
            preemptions=preemptions(app_id.rsplit(":", 1)[0], mine, index),
        )

    def _cancel_trial(
        self, namespace: str, name: str, index: int, trial_id: str, wait: float = 30.0
    ) -> None:
        """Record trial ``index`` cancelled on its Job (``cancel_index_key``: every later
        describe reads it CANCELLED, whatever its pods do, and marks or deletes any pod of the
        index it meets, a replacement too), then mark its pods (``_stop_cancelled``). No
        eviction, which is a preemption and runs the trial again. A trial that has ended is
        left as it ended. Until a pod of the index carries the mark or the index ends, this
        waits for one (a trial cancelled just after the submit, or between an evicted pod and
        its replacement), ``wait`` seconds at most: the Job's record keeps the cancel after.
        The local mark (``trial_id``'s: who cancelled) is left only on a trial not ended."""
        import time

        job = self._read_job(namespace, name)
        if index in self._ended(job):
            return
        who = canceller()  # one word for both records
        mark_cancelled("kubernetes", trial_id, who)  # for this machine's describe
        call(
            f"cannot record trial {index} of {namespace}:{name} cancelled",
            self.kube.batch.patch_namespaced_job,
            name,
            namespace,
            {"metadata": {"annotations": {cancel_index_key(index): who}}},
            _preload_content=False,  # the Job it answers is not needed
        )
        selector = f"{LABEL_INSTANCE}={name},{INDEX_LABEL}={index}"
        deadline = time.monotonic() + wait
        while not self._stop_cancelled(namespace, self._pods(namespace, selector)):
            if time.monotonic() > deadline or index in self._ended(self._read_job(namespace, name)):
                return
            time.sleep(0.5)

    def _read_job(self, namespace: str, name: str) -> dict[str, Any]:
        resp = call(
            f"cannot read {namespace}:{name}",
            self.kube.batch.read_namespaced_job,
            name,
            namespace,
            _preload_content=False,
        )
        return dict(json.loads(resp.data))

    @staticmethod
    def _ended(job: dict[str, Any]) -> set[int]:
        """The indexes of the Indexed Job ``job`` that have ended, either way."""
        array = _ArrayState.of(job, [])
        return array.completed | array.failed

    def _stop_cancelled(self, namespace: str, pods: list[dict[str, Any]]) -> bool:
        """Stop the live ``pods`` of a cancelled index: one that has no node (unschedulable,
        waiting for capacity) is deleted, so it neither waits nor starts (its index then fails
        or makes a new pod, which the next look deletes too); one that has a node is marked
        (the annotation its watcher ends it on with exit 170, before its program starts if it
        has not yet). True once a live pod not being deleted carries the mark."""
        marked = False
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status") or {}
            if status.get("phase") not in ("Pending", "Running"):
                continue
            pod_name = meta["name"]
            if status.get("phase") == "Pending" and _unscheduled(pod):
                if not meta.get("deletionTimestamp"):
                    call(
                        f"cannot delete pod {pod_name} of a cancelled trial",
                        self.kube.core.delete_namespaced_pod,
                        pod_name,
                        namespace,
                        grace_period_seconds=0,
                        _preload_content=False,
                    )
                continue
            if CANCEL_ANNOTATION not in (meta.get("annotations") or {}):
                call(
                    f"cannot mark pod {pod_name} cancelled",
                    self.kube.core.patch_namespaced_pod,
                    pod_name,
                    namespace,
                    {"metadata": {"annotations": {CANCEL_ANNOTATION: "true"}}},
                    _preload_content=False,  # the pod it answers is not needed
                )
            marked = marked or not meta.get("deletionTimestamp")
        return marked

    def _stop_cancelled_trials(self, namespace: str, array: _ArrayState) -> None:
        """What a describe does for the trials the Job records cancelled that have not ended:
        their live pods are stopped (``_stop_cancelled``) — a replacement pod made after the
        cancel, too. Best effort: a call that fails leaves the state as read."""
        for index in set(array.cancelled) - array.completed - array.failed:
            with contextlib.suppress(KubernetesError):
                self._stop_cancelled(namespace, array.pods.get(index, []))


def _unscheduled(pod: dict[str, Any]) -> bool:
    """Whether ``pod`` waits for a node (the scheduler's ``PodScheduled=False``)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _exit_codes(pod: dict[str, Any] | None) -> list[int]:
    """The exit codes of ``pod``'s containers that have ended."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return [
        int(code)
        for cs in statuses
        if (code := ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")) is not None
    ]
