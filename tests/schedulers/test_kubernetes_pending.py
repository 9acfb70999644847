"""Kubernetes' next step fits what the scheduler said: a taint wants a toleration, a node
selector wants labels, a scheduling gate its controller, an unbound claim the claim; only too
few resources want a smaller ask. Against the loopback API server, whose controller answers as
kube-scheduler does for its one node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import shell_app, wait_for
from tests.infra.kube import KubeFake
from torchx_nb import specs
from torchx_nb.schedulers.kubernetes import KubernetesScheduler
from torchx_nb.specs.api import AppState


@pytest.fixture
def node(kube_env: KubeFake) -> Iterator[KubeFake]:
    """The loopback cluster's node, put back as it was after the test."""
    yield kube_env
    kube_env.node_taints = []
    kube_env.unbound_claims = set()
    kube_env.scheduling_gates = []


def _pending_msg(sched: KubernetesScheduler, app_id: str) -> str:
    def said() -> str | None:
        desc = sched.describe(app_id)
        ok = desc is not None and desc.state == AppState.PENDING and "pending (" in desc.msg
        return desc.msg if ok else None  # type: ignore[union-attr]

    return wait_for(said, 30)  # type: ignore[return-value]


def test_each_unschedulable_cause_gets_its_own_next_step(
    node: KubeFake, base_images: dict[str, str]
) -> None:
    sched = KubernetesScheduler("torchx")
    image = base_images["busybox"]
    started: list[str] = []
    try:
        node.node_taints = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
        started.append(sched.submit(shell_app("true", image), {"api": "indexed"}))
        msg = _pending_msg(sched, started[-1])
        assert msg.startswith(
            "pending (Unschedulable): 0/1 nodes are available: 1 node(s) had untolerated taint"
            " {dedicated: ml}."
        )
        assert msg.endswith(
            "; tolerate the taint {dedicated: ml} with -cfg tolerations=dedicated=ml:NoSchedule"
            " (its effect: `kubectl describe node`), or run where no such taint is"
        )
        assert "ask for less" not in msg
        # the toleration it names is the one that lets it run
        tolerated = sched.submit(
            shell_app("true", image), {"api": "indexed", "tolerations": ["dedicated=ml:NoSchedule"]}
        )
        started.append(tolerated)
        wait_for(lambda: sched.describe(tolerated).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
        node.node_taints = []

        started.append(
            sched.submit(
                shell_app("true", image), {"api": "indexed", "node_selector": {"pool": "a100"}}
            )
        )
        msg = _pending_msg(sched, started[-1])
        assert msg.endswith(
            "; no node has the labels the pod selects (pool=a100): change -cfg node_selector"
            " (or the instance type), or label nodes (`kubectl get nodes --show-labels`)"
        ), msg

        node.unbound_claims = {"datasets"}
        app = shell_app("true", image)
        app.roles[0].mounts = [specs.VolumeMount(src="datasets", dst_path="/data")]
        started.append(sched.submit(app, {"api": "indexed"}))
        msg = _pending_msg(sched, started[-1])
        assert msg.endswith(
            "; the claim datasets is not bound: create it, or check its StorageClass can"
            " provision it (`kubectl describe pvc`)"
        ), msg
        node.unbound_claims = set()

        node.scheduling_gates = ["kueue.x-k8s.io/admission"]
        started.append(sched.submit(shell_app("true", image), {"api": "indexed"}))
        msg = _pending_msg(sched, started[-1])
        assert msg == (
            "pending (SchedulingGated): Scheduling is blocked due to non-empty scheduling gates;"
            " it waits for its scheduling gates (kueue.x-k8s.io/admission) to be removed by the"
            " controller that set them (a queue such as Kueue admits it when there is room)"
        )
    finally:
        for app_id in started:
            sched.cancel(app_id)
