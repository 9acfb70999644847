"""Cancelling one trial of a Kubernetes sweep (an Indexed Job) is durable (#50): the Job records
the cancelled index, so a cancel that lands between an evicted or failed pod and its
replacement, or on a pod that never gets a node, still ends the trial CANCELLED and stops
whatever pod the index makes next — with the real ``kubernetes`` client against the loopback
API server (tests/infra/kube.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.infra.kube import KubeFake
from tests.schedulers.test_kubernetes_spot import counted_app
from torchx_nb.schedulers.kubernetes import KubernetesScheduler, parse_app_id
from torchx_nb.specs import AppState

INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def kube(kube_env: KubeFake) -> Iterator[KubeFake]:
    """The loopback cluster, its controller running and its node untainted after the test."""
    yield kube_env
    kube_env.held.clear()
    kube_env.node_taints = []


def _pods(kube: KubeFake, name: str, index: int) -> list[dict[str, Any]]:
    return [
        p for p in kube.pods_of("default", name) if p["metadata"]["labels"][INDEX] == str(index)
    ]


def _state(sched: KubernetesScheduler, trial: str) -> AppState | None:
    resp = sched.describe(trial)
    return None if resp is None else resp.state


def test_a_cancel_between_a_failed_pod_and_its_replacement_stops_the_replacement(
    kube: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The trial's first pod fails (a retry is left) and the Job controller is slow to make the
    next: the cancel found no live pod and returned, and the replacement ran the trial (read
    RUNNING, then SUCCEEDED) before this change."""
    sched = KubernetesScheduler("torchx")
    app = counted_app(
        tmp_path,
        "if [ $n -eq 1 ]; then sleep 1; exit 1; fi; sleep 20; echo done > /state/done",
        retries=1,
    )
    app.roles[0].image = base_images["busybox"]
    info = sched.submit_dryrun(app, {"api": "indexed"})
    job_id = sched.schedule(sched.array_request(info, 1, None))
    (trial,) = sched.trial_ids(job_id, 1)
    _, name = parse_app_id(job_id)
    wait_for(lambda: (tmp_path / "run-0").exists(), 60)
    kube.held.set()  # no replacement yet
    wait_for(lambda: [p["status"]["phase"] for p in _pods(kube, name, 0)] == ["Failed"], 30)
    cancel = threading.Thread(target=sched.cancel, args=(trial,))
    cancel.start()
    wait_for(lambda: _state(sched, trial) == AppState.CANCELLED, 10)
    kube.held.clear()  # the replacement comes now
    cancel.join(40)
    wait_for(lambda: (tmp_path / "run-0").read_text() == "2\n", 30)
    status = kube.objects[("job", "default", name)]["status"]
    wait_for(lambda: status.get("failedIndexes") == "0", 30)
    resp = sched.describe(trial)
    assert resp is not None and resp.state == AppState.CANCELLED
    assert resp.msg.startswith("it was cancelled by "), resp.msg
    assert resp.roles_statuses[0].replicas[0].exit_code == 170
    assert not (tmp_path / "done").exists()


def test_a_pending_trial_is_cancelled_alone_and_its_pod_deleted(
    kube: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """Both trials wait for a node (an untolerated taint): cancelling trial 0 read PENDING for
    as long as its pod waited before this change; now it is CANCELLED at once, its pod is
    deleted (its index fails), and trial 1 still waits."""
    sched = KubernetesScheduler("torchx")
    app = counted_app(tmp_path, "true")
    app.roles[0].image = base_images["busybox"]
    kube.node_taints = [{"key": "spot-capacity", "value": "none", "effect": "NoSchedule"}]
    info = sched.submit_dryrun(app, {"api": "indexed"})
    job_id = sched.schedule(sched.array_request(info, 2, None))
    first, second = sched.trial_ids(job_id, 2)
    _, name = parse_app_id(job_id)
    wait_for(lambda: _pods(kube, name, 0) and _pods(kube, name, 1), 30)
    sched.cancel(first)
    resp = sched.describe(first)
    assert resp is not None and resp.state == AppState.CANCELLED, resp
    assert resp.msg.startswith("it was cancelled by "), resp.msg
    status = kube.objects[("job", "default", name)]["status"]
    wait_for(lambda: status.get("failedIndexes") == "0", 30)
    assert ("pod", "default", _pods(kube, name, 0)[0]["metadata"]["name"]) not in kube.objects
    assert _state(sched, first) == AppState.CANCELLED
    assert _state(sched, second) == AppState.PENDING
    assert not (tmp_path / "run-0").exists()
    sched.cancel(job_id)


def test_a_trial_whose_program_exits_0_on_sigterm_ends_cancelled(
    kube: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """A program that ends cleanly on SIGTERM: the cancelled trial's index completed and it
    read SUCCEEDED before this change; its pod now ends with 170 (FailIndex)."""
    sched = KubernetesScheduler("torchx")
    app = counted_app(tmp_path, 'trap "exit 0" TERM; sleep 60 & wait')
    app.roles[0].image = base_images["busybox"]
    info = sched.submit_dryrun(app, {"api": "indexed"})
    job_id = sched.schedule(sched.array_request(info, 1, None))
    (trial,) = sched.trial_ids(job_id, 1)
    _, name = parse_app_id(job_id)
    wait_for(lambda: (tmp_path / "run-0").exists(), 60)
    sched.cancel(trial)
    status = kube.objects[("job", "default", name)]["status"]
    wait_for(lambda: status.get("failedIndexes") == "0", 30)
    resp = sched.describe(trial)
    assert resp is not None and resp.state == AppState.CANCELLED, resp
    assert resp.roles_statuses[0].replicas[0].exit_code == 170
    assert status.get("completedIndexes") == ""
