"""``torchx-nb preempt`` on Kubernetes: an eviction through the Eviction API, with the grace."""

from __future__ import annotations

import time

from torchx_nb.schedulers.abilities import Preemptible
from torchx_nb.schedulers.kubernetes.base import KubeJobs
from torchx_nb.schedulers.kubernetes.client import call
from torchx_nb.schedulers.kubernetes.constants import INDEX_LABEL, LABEL_INSTANCE
from torchx_nb.schedulers.kubernetes.describe import _index_of
from torchx_nb.schedulers.kubernetes.request import parse_trial_id
from torchx_nb.schedulers.kubernetes.spot import (
    TORCHX_NB_WHY,
    load_record,
    record_path,
    save_record,
)
from torchx_nb.specs.exceptions import NotPreemptible


class KubePreempts(Preemptible, KubeJobs):
    """``preempt``: evict the job's running pods through the Eviction API, as a node drain or a
    spot reclaim does (the ``DisruptionTarget`` condition, SIGTERM, ``grace`` seconds, the
    kill); the Job controller makes new pods for their indexes and spends no retry."""

    #: a pod's terminationGracePeriodSeconds by default
    preempt_grace = 30.0

    def preempt(self, app_id: str, grace: float | None = None) -> None:
        namespace, name, index = parse_trial_id(app_id)
        if self._vcjobs(namespace, f"{LABEL_INSTANCE}={name}"):
            raise NotPreemptible(
                f"{app_id} is a Volcano job, which restarts on an eviction and spends one of its"
                " maxRetry: run it with -cfg api=indexed to try its preemption"
            )
        selector = f"{LABEL_INSTANCE}={name}"
        if index is not None:
            selector += f",{INDEX_LABEL}={index}"
        running = [
            p
            for p in self._pods(namespace, selector)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        if not running:
            raise NotPreemptible(
                f"{app_id} has no running pod: only a running job can be preempted"
            )
        seconds = int(self.preempt_grace if grace is None else grace)
        # kept as preemptions now: a pod that ends at once on its SIGTERM leaves the API before
        # any describe could see its DisruptionTarget condition
        path = record_path("preemptions", f"{namespace}:{name}")
        kept = load_record(path)
        now = time.time()
        for pod in running:
            kept[pod["metadata"]["name"]] = {
                "at": now,
                "why": TORCHX_NB_WHY,
                "index": _index_of(pod),
            }
        save_record(path, kept)
        for i, pod in enumerate(running):
            pod_name = pod["metadata"]["name"]
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod_name, "namespace": namespace},
                "deleteOptions": {"gracePeriodSeconds": seconds},
            }
            try:
                call(
                    f"cannot evict pod {pod_name}",
                    self.kube.core.create_namespaced_pod_eviction,
                    pod_name,
                    namespace,
                    eviction,
                )
            except Exception as e:
                # the pods evicted already stay preempted; this one and the rest were not
                for spared in running[i:]:
                    kept.pop(spared["metadata"]["name"], None)
                save_record(path, kept)
                raise NotPreemptible(f"{app_id} cannot be preempted: {e}") from None
