"""kubernetes on spot nodes: the ``spot`` option, a Job's ``podFailurePolicy`` that keeps an
evicted or reclaimed pod out of ``backoffLimit``, the preemptions describe lists, the limit,
``torchx-nb preempt`` (an eviction through the Eviction API) and a sweep trial's cancel by a mark
of its own — with the real ``kubernetes`` client against the loopback API server
(tests/infra/kube.py), whose controller honours ``podFailurePolicy`` as the Job controller
does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, cli_error, wait_for
from tests.infra.kube import KubeFake
from torchx_nb import specs
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.kubernetes import KubernetesScheduler, parse_app_id
from torchx_nb.specs import AppState
from torchx_nb.specs.exceptions import NotPreemptible

# each run counts itself in a file of the shared folder (per completion index); the runs named
# by HOLD wait for their preemption (SIGTERM ignored: the pod is killed at the end of its grace)
COUNTED = 'f=/state/run-$JOB_COMPLETION_INDEX; n=$(cat $f 2>/dev/null || echo 0); n=$((n+1)); echo $n > $f; echo "run $n"; '


def counted_app(state: Path, script: str, retries: int = 0) -> specs.AppDef:
    """One replica of ``sh -c COUNTED + script`` with ``state`` mounted at /state."""
    return specs.AppDef(
        "spotty",
        roles=[
            specs.Role(
                "r",
                "",
                entrypoint="sh",
                args=["-c", COUNTED + script],
                max_retries=retries,
                resource=specs.Resource(1, 0, 64),
                mounts=[specs.BindMount(str(state), "/state")],
            )
        ],
    )


def test_spot_selects_each_cloud_s_spot_nodes_and_the_dry_run_says_so() -> None:
    sched = KubernetesScheduler("torchx")
    one = counted_app(Path("/tmp"), "true")
    gke = sched.submit_dryrun(one, {"api": "indexed", "spot": "gke"})
    pod = gke.request.resource["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert pod["tolerations"] == [
        {
            "key": "cloud.google.com/gke-spot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        }
    ]
    assert str(gke).splitlines()[0] == (
        "# spot: on nodes labelled cloud.google.com/gke-spot=true, their spot taints tolerated;"
        " an evicted or reclaimed pod never spends max_retries (podFailurePolicy: Ignore on"
        " DisruptionTarget)"
    )
    eks = sched.submit_dryrun(one, {"queue": "q", "spot": "eks", "tolerations": ["a:NoSchedule"]})
    task = eks.request.resource["spec"]["tasks"][0]["template"]["spec"]
    assert task["nodeSelector"] == {"eks.amazonaws.com/capacityType": "SPOT"}
    assert task["tolerations"] == [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]
    assert "spends one of its maxRetry (api=indexed spends none)" in str(eks).splitlines()[0]
    aks = sched.submit_dryrun(one, {"api": "indexed", "spot": "aks"}).request.resource
    aks_pod = aks["spec"]["template"]["spec"]
    assert aks_pod["nodeSelector"] == {"kubernetes.azure.com/scalesetpriority": "spot"}
    assert aks_pod["tolerations"][0]["key"] == "kubernetes.azure.com/scalesetpriority"
    anyone = sched.submit_dryrun(one, {"api": "indexed", "spot": "True"}).request.resource
    any_pod = anyone["spec"]["template"]["spec"]
    terms = any_pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchExpressions"][0]["key"] for t in terms["nodeSelectorTerms"]] == [
        "cloud.google.com/gke-spot",
        "eks.amazonaws.com/capacityType",
        "kubernetes.azure.com/scalesetpriority",
    ]
    assert len(any_pod["tolerations"]) == 2 and any_pod["nodeSelector"] == {}
    plain = sched.submit_dryrun(one, {"api": "indexed"})
    spec = plain.request.resource["spec"]
    assert spec["podFailurePolicy"] == {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    assert spec["template"]["spec"]["restartPolicy"] == "Never"  # what Ignore requires
    assert not str(plain).startswith("#") and "affinity" not in str(plain)


def test_bad_spot_values_are_one_line_before_anything_is_sent(kube_env: KubeFake) -> None:
    before = len(kube_env.requests)

    def line(cfg: str) -> str:
        return cli_error(
            "run", "-s", "kubernetes", "--workspace", "", "-cfg", cfg, "utils.echo", "--image", "i"
        )

    assert line("api=indexed,spot=gcp") == (
        "torchx-nb: error: spot 'gcp': use gke, eks or aks (that cloud's spot nodes), or true"
        " (any of them); for other spot nodes give their label and taint as -cfg node_selector"
        " and tolerations"
    )
    assert line("api=indexed,spot=gke,node_selector=cloud.google.com/gke-spot:false") == (
        "torchx-nb: error: spot=gke selects cloud.google.com/gke-spot=true, and node_selector"
        " says cloud.google.com/gke-spot=false: give only one of them"
    )
    assert len(kube_env.requests) == before


def test_a_pod_on_a_spot_node_runs_and_one_elsewhere_waits(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The loopback node has no spot label: spot=true waits, saying so; labelled, it runs."""
    sched = KubernetesScheduler("torchx")
    app = counted_app(tmp_path, "true")
    app.roles[0].image = base_images["busybox"]
    waiting = sched.submit(app, {"api": "indexed", "spot": "true"})
    wait_for(lambda: "didn't match Pod's node affinity" in sched.describe(waiting).msg, 30)  # type: ignore[union-attr]
    kube_env.node_labels["eks.amazonaws.com/capacityType"] = "SPOT"
    try:
        ran = sched.submit(app, {"api": "indexed", "spot": "eks"})
        wait_for(lambda: sched.describe(ran).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
    finally:
        del kube_env.node_labels["eks.amazonaws.com/capacityType"]
    sched.cancel(waiting)


def test_an_evicted_pod_runs_again_and_spends_no_retry_while_a_failure_does(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """Run 1 is evicted (as a drain or a spot reclaim does, through the Eviction API), run 2
    fails by itself (exit 3), run 3 succeeds: with max_retries=1 the Job SUCCEEDS, one
    failure spent and the eviction listed as a preemption. (Without the Ignore rule the
    eviction spent the one retry and the failure ended the Job FAILED.)"""
    from kubernetes import client, config

    sched = KubernetesScheduler("torchx")
    app = counted_app(
        tmp_path,
        "case $n in 1) trap '' TERM; sleep 120;; 2) exit 3;; esac; echo done",
        retries=1,
    )
    app.roles[0].image = base_images["busybox"]
    app_id = sched.submit(app, {"api": "indexed"})
    namespace, name = parse_app_id(app_id)
    wait_for(lambda: (tmp_path / "run-0").exists(), 60)
    (pod,) = [p for p in kube_env.pods_of(namespace, name)]
    api = client.CoreV1Api(config.new_client_from_config(str(kube_env.kubeconfig)))
    api.create_namespaced_pod_eviction(
        pod["metadata"]["name"],
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod["metadata"]["name"], "namespace": namespace},
            # the pod ignores SIGTERM: it stays in the API for the grace, the window in which a
            # describe sees it (an evicted pod gone between two polls is not seen: docs); 3 s
            # was missed once under a loaded CI machine's slower describes
            "deleteOptions": {"gracePeriodSeconds": 10},
        },
    )
    seen = wait_for(lambda: (d := sched.describe(app_id)) and d.preemptions and d, 30, 0.2)
    (p,) = seen.preemptions  # type: ignore[attr-defined]
    assert p.why == "evicted (its node drained or reclaimed)"
    wait_for(lambda: sched.describe(app_id).state == AppState.SUCCEEDED, 90)  # type: ignore[union-attr]
    end = sched.describe(app_id)
    assert end is not None and end.num_restarts == 1  # the program's one failure, not the eviction
    assert (tmp_path / "run-0").read_text() == "3\n"
    (p,) = end.preemptions  # kept once seen: the evicted pod has left the API
    assert p.resumed_at is not None and p.resumed_at >= p.at
    assert kube_env.objects[("job", namespace, name)]["status"]["failed"] == 1
    assert not any(pod["metadata"]["name"] == q["metadata"]["name"] for q in _api_pods(kube_env))


def _api_pods(kube: KubeFake) -> list[dict[str, Any]]:
    return [o for (k, _, _), o in list(kube.objects.items()) if k == "pod"]


def test_preempt_evicts_through_the_eviction_api_and_status_tells_it(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """``torchx-nb preempt`` on Kubernetes: an eviction with the grace; the job runs again and
    SUCCEEDS, status says one preemption and no failure; a job not running is one line."""
    app = counted_app(tmp_path, "if [ $n -eq 1 ]; then sleep 120; fi; echo resumed")
    app.roles[0].image = base_images["busybox"]
    with get_runner() as runner:
        handle = runner.run(app, "kubernetes", {"api": "indexed"}, workspace="")
    wait_for(lambda: (tmp_path / "run-0").exists(), 60)
    code, _, err = cli("preempt", handle, "--grace", "4", timeout=60)
    assert (code, err.strip()) == (
        0,
        f"torchx-nb: preempted {handle}: it gets SIGTERM, then runs again as its backend runs"
        " a preempted job",
    )
    ns, name = parse_app_id(handle.rsplit("/", 1)[1])
    assert [(e[0], e[2]) for e in kube_env.evictions if e[1].startswith(name)] == [(ns, 4)]
    with get_runner() as runner:
        status = runner.wait(handle, wait_interval=0.5, timeout=90)
        assert status is not None and status.state == AppState.SUCCEEDED, status
    code, out, _ = cli("status", handle, timeout=60)
    lines = out.splitlines()
    assert "Attempts: 2 (1 preemption, 0 failures)" in lines, out
    assert any(
        line.startswith("  preempted at ") and "(torchx-nb preempt), resumed at" in line
        for line in lines
    ), out
    assert cli_error("preempt", handle, timeout=60) == (
        f"torchx-nb: error: {handle} is SUCCEEDED, not running: only a running job can be preempted"
    )


def test_a_volcano_job_is_not_preempted_on_request(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    sched = KubernetesScheduler("torchx")
    app = counted_app(tmp_path, "sleep 60")
    app.roles[0].image = base_images["busybox"]
    app_id = sched.submit(app, {"queue": "default"})
    with pytest.raises(NotPreemptible, match="is a Volcano job, which restarts on an eviction"):
        sched.preempt(app_id, 1)
    sched.cancel(app_id)


def test_past_max_preemptions_the_job_is_stopped_and_fails_with_one_line(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    app = counted_app(tmp_path, "sleep 120")
    app.roles[0].image = base_images["busybox"]
    with get_runner() as runner:
        handle = runner.run(app, "kubernetes", {"api": "indexed", "max_preemptions": 0}, "")
        wait_for(lambda: (tmp_path / "run-0").exists(), 60)
        wait_for(lambda: runner.status(handle).state == AppState.RUNNING, 30)  # type: ignore[union-attr]
        runner.preempt(handle, grace=1)
        status = runner.wait(handle, wait_interval=0.3, timeout=60)
        assert status is not None and status.state == AppState.FAILED, status
        assert status.msg.startswith("preempted 1 times (limit 0): preempted at "), status.msg
        assert "(torchx-nb preempt)" in status.msg
        assert status.msg.endswith(
            "raise the limit with -cfg max_preemptions=N, or run on capacity that is not preempted"
        )
    _, name = parse_app_id(handle.rsplit("/", 1)[1])
    wait_for(lambda: not list(kube_env.pods_of("default", name)), 30)  # stopped: no new pod
    assert ("job", "default", name) not in kube_env.objects


def test_a_cancelled_trial_reads_cancelled_and_a_reclaimed_one_runs_again(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """A sweep's Indexed Job: trial 0 is cancelled (its pod annotated, the watcher ends it with
    exit 170: FailIndex), trial 1 is evicted (DisruptionTarget: ignored) and runs again."""
    sched = KubernetesScheduler("torchx")
    app = counted_app(
        tmp_path,
        'if [ $n -eq 1 ]; then [ "$JOB_COMPLETION_INDEX" = 1 ] && trap "" TERM; sleep 120; fi',
        retries=1,
    )
    app.roles[0].image = base_images["busybox"]
    info = sched.submit_dryrun(app, {"api": "indexed"})
    job_id = sched.schedule(sched.array_request(info, 2, None))
    cancelled, reclaimed = sched.trial_ids(job_id, 2)
    namespace, name = parse_app_id(job_id)
    wait_for(lambda: (tmp_path / "run-0").exists() and (tmp_path / "run-1").exists(), 60)
    before = len(kube_env.requests)
    sched.cancel(cancelled)
    assert [r for r in kube_env.requests[before:] if not r.startswith("GET ")] == [
        f"PATCH /apis/batch/v1/namespaces/{namespace}/jobs/{name}",  # the Job's record
        f"PATCH /api/v1/namespaces/{namespace}/pods/{_pod_of(kube_env, name, 0)}",
    ]
    status = kube_env.objects[("job", namespace, name)]["status"]
    wait_for(lambda: status.get("failedIndexes") == "0", 30)
    gone = sched.describe(cancelled)
    assert gone is not None and gone.msg.startswith("it was cancelled by ") and not gone.preemptions
    assert gone.roles_statuses[0].replicas[0].exit_code == 170
    from torchx_nb.schedulers.outputs import cancel_mark

    cancel_mark("kubernetes", cancelled).unlink()  # as another machine, without our mark
    elsewhere = sched.describe(cancelled)
    assert elsewhere is not None and elsewhere.state == AppState.CANCELLED
    assert elsewhere.msg == gone.msg  # the Job's record says who cancelled it
    sched.preempt(reclaimed, grace=2)
    wait_for(lambda: sched.describe(reclaimed).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
    back = sched.describe(reclaimed)
    assert back is not None and [p.why for p in back.preemptions] == ["torchx-nb preempt"]
    assert (tmp_path / "run-1").read_text() == "2\n" and (tmp_path / "run-0").read_text() == "1\n"
    status = kube_env.objects[("job", namespace, name)]["status"]
    assert (status["completedIndexes"], status["failedIndexes"], status["failed"]) == ("1", "0", 1)


def _pod_of(kube: KubeFake, name: str, index: int) -> str:
    (pod,) = [
        p
        for p in kube.pods_of("default", name)
        if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == str(index)
    ]
    return str(pod["metadata"]["name"])


def test_the_pods_of_a_job_preempted_together_are_one_preemption(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """A two-replica Job preempted: both pods are evicted, and the job was preempted once,
    resumed when both run again."""
    sched = KubernetesScheduler("torchx")
    app = counted_app(tmp_path, "if [ $n -eq 1 ]; then sleep 120; fi")
    app.roles[0].image = base_images["busybox"]
    app.roles[0].num_replicas = 2
    app_id = sched.submit(app, {"api": "indexed"})
    wait_for(lambda: sched.describe(app_id).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
    wait_for(lambda: (tmp_path / "run-0").exists() and (tmp_path / "run-1").exists(), 60)
    sched.preempt(app_id, grace=1)
    _, name = parse_app_id(app_id)
    assert len([e for e in kube_env.evictions if e[1].startswith(name)]) == 2
    wait_for(lambda: sched.describe(app_id).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
    end = sched.describe(app_id)
    assert end is not None and len(end.preemptions) == 1, end.preemptions
    (p,) = end.preemptions
    assert p.resumed_at is not None and p.resumed_at >= p.at and end.num_restarts == 0
