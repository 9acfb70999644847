"""kubernetes: TorchX's Volcano request and our Indexed Job, and the real ``kubernetes`` client
against the loopback API server (tests/infra/kube.py), whose controller runs each pod's
container in our dockerd."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_error, shell_app, wait_for
from tests.infra.dockerd import free_port, host_python_mounts
from tests.infra.kube import KubeFake
from torchx_nb import specs
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.kubernetes import KubernetesError, KubernetesScheduler, parse_app_id
from torchx_nb.specs import AppState
from torchx_nb.specs.log_line import Stream


def app(n: int = 2, **kw: Any) -> specs.AppDef:
    return specs.AppDef(
        "Train.Job",
        roles=[
            specs.Role(
                "trainer",
                "img:1",
                entrypoint="bash",
                args=["-c", f"echo {specs.macros.replica_id}"],
                num_replicas=n,
                resource=kw.get("resource", specs.Resource(cpu=2, gpu=1, memMB=4096)),
                env={
                    "RANK0": specs.macros.rank0_env,
                    "IDX": specs.macros.replica_id,
                    "API_TOKEN": "s3cr3t",
                },
                port_map={"c10d": 29500},
                max_retries=kw.get("max_retries", 0),
                mounts=kw.get("mounts", []),
            )
        ],
    )


def dryrun(a: specs.AppDef, **cfg: Any) -> Any:
    return KubernetesScheduler("torchx").submit_dryrun(a, cfg)


def test_volcano_request_is_torchx_s() -> None:
    mounts = specs.parse_mounts(
        [
            "type=bind",
            "src=/data",
            "dst=/data",
            "readonly",
            "type=volume",
            "src=my-pvc",
            "dst=/ckpt",
            "type=device",
            "src=/dev/fuse",
        ]
    )
    info = dryrun(
        app(max_retries=2, mounts=mounts, resource=specs.named_resources["aws_p4d.24xlarge"]),
        queue="research",
        priority_class="high",
        service_account="trainer",
        image_pull_secrets=["regcred"],
        node_selector={"pool": "a100"},
        tolerations=["nvidia.com/gpu:NoSchedule", "team=ml"],
    )
    res = info.request.resource
    assert res["apiVersion"] == "batch.volcano.sh/v1alpha1" and res["kind"] == "Job"
    spec = res["spec"]
    assert spec["schedulerName"] == "volcano" and spec["queue"] == "research"
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}
    assert spec["maxRetry"] == 2 and spec["priorityClassName"] == "high"
    assert [t["name"] for t in spec["tasks"]] == ["trainer-0", "trainer-1"]
    t0, t1 = spec["tasks"]
    assert t0["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob"},
    ]
    pod = t0["template"]
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    labels = pod["metadata"]["labels"]
    assert labels["torchx.pytorch.org/replica-id"] == "0"
    assert labels["app.kubernetes.io/managed-by"] == "torchx.pytorch.org"
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["RANK0"] == "TORCHX_RANK0_HOST" and env["TORCHX_RANK0_HOST"] == "localhost"
    env1 = {e["name"]: e["value"] for e in t1["template"]["spec"]["containers"][0]["env"]}
    assert env1["RANK0"] == "VC_TRAINER_0_HOSTS" and env1["IDX"] == "1"
    assert "TORCHX_RANK0_HOST" not in env1
    assert c["command"] == ["bash", "-c", "echo 0"]
    assert c["resources"]["limits"]["cpu"] == "96000m"
    assert c["resources"]["requests"]["cpu"] == "95900m"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "4"
    assert c["ports"] == [{"name": "c10d", "containerPort": 29500}]
    assert c["securityContext"] == {"privileged": True}
    assert [m["mountPath"] for m in c["volumeMounts"]][:4] == [
        "/dev/shm",
        "/data",
        "/ckpt",
        "/dev/fuse",
    ]
    volumes = pod["spec"]["volumes"]
    assert volumes[0] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    assert volumes[2]["persistentVolumeClaim"] == {"claimName": "my-pvc"}  # as TorchX
    ps = pod["spec"]
    assert ps["nodeSelector"] == {
        "pool": "a100",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
    }
    assert ps["serviceAccountName"] == "trainer" and ps["imagePullSecrets"] == [{"name": "regcred"}]
    assert ps["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "team", "operator": "Equal", "value": "ml"},
    ]
    shown = str(info)
    assert "s3cr3t" not in shown and "apiVersion: batch.volcano.sh/v1alpha1" in shown


def test_indexed_request_has_a_stable_rank0_and_real_replica_ids() -> None:
    req = dryrun(app(max_retries=1), api="indexed").request
    job, svc = req.resource, req.service
    assert job["apiVersion"] == "batch/v1" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert job["spec"]["backoffLimit"] == 2
    name = job["metadata"]["name"]
    pod = job["spec"]["template"]
    assert pod["spec"]["subdomain"] == name and pod["spec"]["restartPolicy"] == "Never"
    c = pod["spec"]["containers"][0]
    assert c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["IDX"] == "$(TORCHX_REPLICA_ID)" and env["TORCHX_RANK0_HOST"] == f"{name}-0.{name}"
    assert c["command"] == ["bash", "-c", "echo $(TORCHX_REPLICA_ID)"]
    assert svc["spec"] == {
        "clusterIP": "None",
        "selector": {"app.kubernetes.io/instance": name},
        "publishNotReadyAddresses": True,
    }


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({}, "Volcano jobs need a queue: pass -cfg queue=NAME"),
        ({"api": "yarn"}, "api 'yarn': use volcano or indexed"),
        ({"queue": "q", "namespace": "Bad_NS"}, "is not a namespace name"),
        ({"queue": "q", "tolerations": ["a b"]}, "toleration 'a b'"),
    ],
)
def test_bad_options_are_one_line(cfg: dict[str, Any], message: str) -> None:
    sched = KubernetesScheduler("torchx")
    with pytest.raises(specs.InvalidRunConfigException, match=message):
        sched._pre_build_validate(app(), "kubernetes", sched.resolve_opts(cfg))


def test_app_ids_are_checked() -> None:
    assert parse_app_id("default:job-1") == ("default", "job-1")
    for bad in ("job", "default:../x", "ns:Job", ":x"):
        with pytest.raises(ValueError, match="not a kubernetes app id"):
            parse_app_id(bad)


DDP_CELL = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item()}")
dist.destroy_process_group()
"""


@pytest.mark.parametrize("api", ["volcano", "indexed"])
def test_two_replica_ddp_cell_runs(
    api: str, kube_env: KubeFake, python_in_registry: str, registry: Any, tmp_path: Path
) -> None:
    mounts, path = host_python_mounts()
    a = cell(
        source=DDP_CELL,
        image=python_in_registry,
        memMB=512,
        j="2x1",
        rdzv_port=free_port(),  # host networking: another test run may use the default
        mounts=mounts,
        env={"PATH": path, "GLOO_SOCKET_IFNAME": "lo", "LOGLEVEL": "WARNING"},
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = {
        "api": api,
        "queue": "default",
        "image_repo": f"{registry.host}/k8s/jobs",
        "builder": "registry",
        "quiet": True,
    }
    with get_runner() as runner:
        handle = runner.run(a, "kubernetes", cfg, workspace=str(ws))
        assert handle.startswith("kubernetes://torchx/default:cell-")
        status = runner.wait(handle, wait_interval=0.5, timeout=180)
        logs = ["".join(runner.log_lines(handle, "cell", k)) for k in (0, 1)]
        assert status is not None and status.state == AppState.SUCCEEDED, (status, logs)
        assert [r.state for r in status.roles[0].replicas] == [AppState.SUCCEEDED] * 2
        joined = "".join(logs)
        assert "rank 0 of 2 sum 3.0" in joined and "rank 1 of 2 sum 3.0" in joined


def test_failure_retry_cancel_list_and_logs(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    sched = KubernetesScheduler("torchx")
    bb = base_images["busybox"]

    failing = sched.submit(shell_app("echo out; echo err >&2; exit 3", bb), {"queue": "default"})
    wait_for(lambda: sched.describe(failing).state == AppState.FAILED, 60)  # type: ignore[union-attr]
    desc = sched.describe(failing)
    assert desc is not None and desc.msg == "r-0: FAILED (exit code 3): Error"
    assert sorted(sched.log_iter(failing, "r")) == ["err\n", "out\n"]
    assert list(sched.log_iter(failing, "r", regex="^o")) == ["out\n"]
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    earlier = datetime.now(timezone.utc) - timedelta(hours=1)
    assert list(sched.log_iter(failing, "r", since=later)) == []
    assert list(sched.log_iter(failing, "r", until=earlier)) == []
    assert sorted(sched.log_iter(failing, "r", since=earlier, until=later)) == ["err\n", "out\n"]
    from torchx_nb.specs.log_line import LogLine

    # each line keeps the time the API server stamped on it (timestamps=true)
    stamps = [LogLine.time_of(line) for line in sched.log_iter(failing, "r")]
    assert all(t is not None and earlier.timestamp() < t < later.timestamp() for t in stamps)
    with pytest.raises(ValueError, match="one combined log"):
        sched.log_iter(failing, "r", streams=Stream.STDERR)

    indexed_fail = sched.submit(shell_app("exit 4", bb, retries=1), {"api": "indexed"})
    wait_for(lambda: sched.describe(indexed_fail).state == AppState.FAILED, 60)  # type: ignore[union-attr]
    d = sched.describe(indexed_fail)
    assert d is not None and d.num_restarts == 2  # the first try and the one retry both failed
    assert "exit code 4" in d.msg

    sleeper = sched.submit(shell_app("echo started; sleep 120", bb), {"api": "indexed"})
    wait_for(lambda: sched.describe(sleeper).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
    tail = iter(sched.log_iter(sleeper, "r", should_tail=True))
    assert next(tail) == "started\n"
    sched.cancel(sleeper)
    # the job and its pods are deleted; describe (here or in another process) says CANCELLED
    wait_for(lambda: not list(kube_env.pods_of("default", parse_app_id(sleeper)[1])), 30)
    wait_for(lambda: ("job", "default", parse_app_id(sleeper)[1]) not in kube_env.objects, 30)
    assert sched.describe(sleeper).state == AppState.CANCELLED  # type: ignore[union-attr]
    assert KubernetesScheduler("torchx").describe(sleeper).state == AppState.CANCELLED  # type: ignore[union-attr]
    assert list(tail) == []
    assert not list(kube_env.pods_of("default", parse_app_id(sleeper)[1]))

    listed = {a.app_id: a.state for a in sched.list()}
    assert listed[failing] == AppState.FAILED and listed[indexed_fail] == AppState.FAILED
    assert sleeper not in listed  # list shows what the API has
    assert sched.describe("default:no-such-job") is None


def test_describe_many_is_one_list_per_kind_and_namespace(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    sched = KubernetesScheduler("torchx")
    a = specs.AppDef(
        "quick",
        roles=[
            specs.Role(
                "r", base_images["busybox"], entrypoint="true", resource=specs.Resource(1, 0, 64)
            )
        ],
    )
    ids = [sched.submit(a, {"api": "indexed"}) for _ in range(3)]
    ids += [sched.submit(a, {"queue": "default"}) for _ in range(2)]
    wait_for(
        lambda: all(d and d.state == AppState.SUCCEEDED for d in sched.describe_many(ids).values()),
        60,
    )
    before = len(kube_env.requests)
    sched.describe_many(ids)
    calls = sorted(kube_env.requests[before:])
    assert calls == [
        "GET /api/v1/namespaces/default/pods",
        "GET /apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs",
        "GET /apis/batch/v1/namespaces/default/jobs",
    ]


def test_clear_errors_through_the_cli(
    kube_env: KubeFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def error_line(*cfg: str) -> str:
        return cli_error(
            "run",
            "-s",
            "kubernetes",
            "--workspace",
            "",
            *cfg,
            "utils.echo",
            "--image",
            "img",
            timeout=120,
        )

    assert error_line("-cfg", "queue=nope") == (
        "torchx-nb: error: no Volcano queue 'nope' (or no Volcano on this cluster): pick one from"
        " `kubectl get queues`, or pass -cfg api=indexed"
    )
    assert error_line("-cfg", "api=indexed,namespace=ghost") == (
        "torchx-nb: error: namespace 'ghost' does not exist: create it (kubectl create namespace"
        " ghost) or pass -cfg namespace=..."
    )
    kube_env.forbidden.add(("create", "job"))
    try:
        line = error_line("-cfg", "api=indexed")
    finally:
        kube_env.forbidden.discard(("create", "job"))
    assert line.startswith("torchx-nb: error: cannot create default/echo-")
    assert line.endswith(
        ': forbidden: jobs.batch is forbidden: User "tester" cannot create resource "jobs" in the'
        ' namespace "default"'
    )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert error_line("-cfg", "api=indexed").startswith(
        "torchx-nb: error: no Kubernetes credentials: no kubeconfig ("
    )
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(
        kube_env.kubeconfig.read_text().replace(kube_env.url, f"http://127.0.0.1:{free_port()}")
    )
    monkeypatch.setenv("KUBECONFIG", str(dead))
    assert "cannot reach the Kubernetes API server" in error_line("-cfg", "api=indexed")


def test_an_unknown_app_and_a_refused_token(
    kube_env: KubeFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad-kubeconfig"
    bad.write_text(kube_env.kubeconfig.read_text().replace(kube_env.token, "wrong"))
    monkeypatch.setenv("KUBECONFIG", str(bad))
    with pytest.raises(KubernetesError, match="the API server refused the credentials"):
        KubernetesScheduler("torchx").describe("default:x")


def s3_cell(source: str, image: str, aws_env: Any) -> specs.AppDef:
    """A cell whose pod uploads to moto's S3 with boto3 lent by this machine's Python
    (host-path volumes)."""
    mounts, path = host_python_mounts()
    return cell(
        source=source, image=image, memMB=256, mounts=mounts, env={"PATH": path, **aws_env.env}
    )


def test_cell_results_and_outputs_come_back_through_an_object_store(
    kube_env: KubeFake, aws_env: Any, python_in_registry: str, registry: Any, tmp_path: Path
) -> None:
    """``-cfg output_path=s3://…`` on Kubernetes: the pod uploads its output folder (moto's
    S3, boto3 lent through host-path volumes)."""
    from tests.result_checks import RESULT_CELL, assert_round_trip, result_workspace

    aws_env.client("s3").create_bucket(
        Bucket="k8s-results", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    ws = result_workspace(tmp_path)
    cfg = {
        "queue": "default",
        "image_repo": f"{registry.host}/k8s/results",
        "builder": "registry",
        "quiet": True,
        "output_path": "s3://k8s-results/runs",
    }
    a = s3_cell(RESULT_CELL, python_in_registry, aws_env)
    with get_runner() as runner:
        handle = runner.run(a, "kubernetes", cfg, workspace=str(ws))
        assert_round_trip(runner, handle, tmp_path / "dl")
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.outputs and rec.outputs.startswith("s3://k8s-results/runs/")


def test_an_array_is_one_indexed_job_of_one_replica_trials() -> None:
    """A sweep under api=indexed: one Job, a completion index per trial, each trial replica 0
    of its own run; indexes fail on their own, a trial's cancel (exit 170) fails its index for
    good, and an evicted pod is ignored (its trial runs again)."""
    from torchx_nb.schedulers.kubernetes import parse_trial_id

    sched = KubernetesScheduler("torchx")
    one = app(n=1, max_retries=2)
    indexed, volcano = sched.resolve_opts({"api": "indexed"}), sched.resolve_opts({"queue": "q"})
    assert sched.can_array(one, indexed)
    assert not sched.can_array(one, volcano)  # Volcano: a job per trial
    assert not sched.can_array(app(n=2), indexed)
    info = sched.array_request(dryrun(one, api="indexed"), 4, None)
    job = info.request.resource
    assert info.request.service is None and job["kind"] == "Job"
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == (4, 4, 2)
    assert "backoffLimit" not in spec
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [170]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["sh", "-c"]  # the trial's watcher (its cancel mark)
    assert container["command"][3:] == [
        "torchx-nb-trial",
        "bash",
        "-c",
        "echo $(TORCHX_REPLICA_ID)",
    ]
    env = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["TORCHX_REPLICA_ID"] == "0" and "TORCHX_RANK0_HOST" not in env
    assert "subdomain" not in spec["template"]["spec"]
    assert sched.array_index_env == "JOB_COMPLETION_INDEX"
    assert sched.trial_ids("ns:job", 2) == ["ns:job:0", "ns:job:1"]
    assert parse_trial_id("ns:job:12") == ("ns", "job", 12)
    assert parse_trial_id("ns:job") == ("ns", "job", None)
    for bad in ("ns:job:1:2", "ns:job:-1", "ns:Job:1", "ns:job:1234567"):
        with pytest.raises(ValueError, match="not a kubernetes app id"):
            parse_trial_id(bad)


def test_a_sweep_is_one_indexed_job_whose_trials_end_and_cancel_on_their_own(
    kube_env: KubeFake, aws_env: Any, python_in_registry: str, registry: Any, tmp_path: Path
) -> None:
    """-cfg api=indexed: one Indexed Job holds every trial; each has its own state, log and
    result (uploaded to moto's S3); a trial that raises fails alone, cancelling one trial
    marks its pod (its watcher ends it with exit 170) and leaves the others running to their
    end, and Cancel all suspends the
    Job once (the ended trials keep their end)."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    aws_env.client("s3").create_bucket(
        Bucket="k8s-sweeps", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    source = (
        "import os, time\n"
        "print('trial lr', os.environ['TORCHX_PARAM_LR'], flush=True)\n"
        "if lr > 1:\n"
        "    time.sleep(600)\n"
        "if lr > 0.5:\n"
        "    raise ValueError('lr too high')\n"
        "lr * 10\n"
    )
    cfg = [
        f"api=indexed,image_repo={registry.host}/k8s/sweeps,builder=registry,quiet=True",
        "output_path=s3://k8s-sweeps/runs",
    ]
    a = s3_cell(source, python_in_registry, aws_env)
    before = {k for k in kube_env.objects if k[0] == "job"}
    asked_before = len(kube_env.requests)  # the loopback server serves the whole session
    with get_runner() as runner:
        request = SweepRequest(
            RunRequest(app=a, scheduler="kubernetes", cfg=cfg, workspace=str(ws)),
            {"lr": [0.1, 0.2, 0.9, 5, 9]},
        )
        sw = start(runner, request)
        assert sw.array
        ids = [h.rsplit("/", 1)[1] for h in sw.handles]  # type: ignore[union-attr]
        job_id = ids[0].rsplit(":", 1)[0]
        assert ids == [f"{job_id}:{i}" for i in range(5)]
        slow = sw.handles[3]
        assert slow is not None
        wait_for(lambda: "trial lr 5" in "".join(runner.log_lines(slow, "cell", 0)), 120, 0.5)
        runner.cancel(slow)

        def ended(i: int) -> bool:
            status = runner.status(sw.handles[i])  # type: ignore[arg-type]
            return status is not None and status.state.name in ("SUCCEEDED", "FAILED", "CANCELLED")

        wait_for(lambda: all(ended(i) for i in range(4)), 180, 0.5)
        # the cancelled trial's watcher ends its pod within a few seconds (exit 170)
        job_key = ("job", *parse_app_id(job_id))
        wait_for(lambda: kube_env.objects[job_key]["status"]["failedIndexes"] == "2,3", 60, 0.5)
        last = runner.status(sw.handles[4])  # type: ignore[arg-type]
        assert last is not None and last.state == AppState.RUNNING
        sent = len(kube_env.requests)
        sw.cancel()
        during = kube_env.requests[sent:]
        assert [r for r in during if not r.startswith("GET ")] == [
            f"PATCH /apis/batch/v1/namespaces/default/jobs/{job_id.split(':')[1]}"
        ], during
        statuses = sw.wait(timeout=180)
        assert [s.state if s else None for s in statuses] == [
            AppState.SUCCEEDED,
            AppState.SUCCEEDED,
            AppState.FAILED,
            AppState.CANCELLED,
            AppState.CANCELLED,
        ], statuses
        frame = sw.results()
        assert list(frame["result"][:2]) == [1.0, 2.0]
        assert frame["error"][2] == "raised ValueError: lr too high"
        # a cancel that read the trial running just before it failed (or TorchX's own
        # Scheduler.cancel of an ended trial) leaves it as it ended: it read CANCELLED here
        from torchx_nb.schedulers.kubernetes import create_scheduler as kube_scheduler

        kube_scheduler("torchx")._cancel_existing(ids[2])
        again = runner.status(sw.handles[2])  # type: ignore[arg-type]
        assert again is not None and again.state == AppState.FAILED, again
        assert "trial lr 0.2" in "".join(runner.log_lines(sw.handles[1], "cell", 0))  # type: ignore[arg-type]
    namespace, name = parse_app_id(job_id)
    jobs = {k for k in kube_env.objects if k[0] == "job"} - before
    assert jobs == {("job", namespace, name)}  # one Job holds the four trials
    status = kube_env.objects[("job", namespace, name)]["status"]
    assert (status["completedIndexes"], status["failedIndexes"]) == ("0,1", "2,3")
    asked = kube_env.requests[asked_before:]
    assert any(r.startswith("PATCH /api/v1/namespaces/default/pods/") for r in asked)
    assert not any(r.endswith("/eviction") for r in asked)


def test_a_sweep_runs_one_job_per_trial(kube_env: KubeFake, base_images: dict[str, str]) -> None:
    """Kubernetes under Volcano: one job per trial (under --max-parallel), each trial's value
    in its arguments and in $TORCHX_PARAM_<NAME>."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    request = SweepRequest(
        RunRequest(
            component="utils.sh",
            component_args=["--", "sh", "-c", 'echo "n=${n} env=$TORCHX_PARAM_N"'],
            scheduler="kubernetes",
            cfg=["queue=default"],
            image=base_images["busybox"],
            workspace="",
        ),
        ["n=1,2,3"],
        max_parallel=2,
    )
    with get_runner() as runner:
        sw = start(runner, request)
        statuses = sw.wait(timeout=120)
        assert [s.state if s else None for s in statuses] == [AppState.SUCCEEDED] * 3
        logs = ["".join(runner.log_lines(h, "sh", 0)) for h in sw.handles]  # type: ignore[arg-type]
        assert logs == [f"n={n} env={n}\n" for n in (1, 2, 3)]


def test_torchx_compatible_request_details() -> None:
    """Devices only in the limits (no hostPath of device files, no privileged pod); a REPLICA
    role gets no job-level restart; role names lose their invalid characters as in TorchX; no
    queue is one line from the dry run itself; InvalidRunConfigException is a ValueError."""
    efa = specs.Resource(cpu=2, gpu=0, memMB=1024, devices={"vpc.amazonaws.com/efa": 2})
    a = app(resource=efa, max_retries=1)
    a.roles[0].name = "worker_Pool"
    a.roles[0].retry_policy = specs.RetryPolicy.REPLICA
    spec = dryrun(a, queue="q").request.resource["spec"]
    t0, t1 = spec["tasks"]
    assert [t0["name"], t1["name"]] == ["workerpool-0", "workerpool-1"]
    assert t0["policies"] == [] and t0["maxRetry"] == 1
    c = t0["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "2"
    assert "securityContext" not in c
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/dev/shm"]
    env1 = {e["name"]: e["value"] for e in t1["template"]["spec"]["containers"][0]["env"]}
    assert env1["RANK0"] == "VC_WORKERPOOL_0_HOSTS"
    with pytest.raises(ValueError, match="Volcano jobs need a queue: pass -cfg queue=NAME"):
        dryrun(app())


def test_a_local_image_id_is_pushed_to_image_repo(
    kube_env: KubeFake, docker_env: Any, base_images: dict[str, str], registry: Any
) -> None:
    """As TorchX: a role image ``sha256:…`` (a local build) becomes ``IMAGE_REPO:HASH``, is
    pushed there at submit, and the pod runs it; without image_repo, one line."""
    import io

    client = docker_env.client()
    image_id = client.images.build(
        fileobj=io.BytesIO(
            f"FROM {base_images['busybox']}\nRUN echo built-locally > /marker\n".encode()
        ),
        rm=True,
    )[0].id
    assert image_id.startswith("sha256:")
    a = shell_app("cat /marker", image_id)
    with pytest.raises(KeyError, match="runs the local image sha256:.* pass -cfg image_repo"):
        dryrun(a, queue="default")
    repo = f"{registry.host}/k8s/local"
    info = dryrun(a, queue="default", image_repo=repo)
    digest = image_id.removeprefix("sha256:")
    assert info.request.images_to_push == {image_id: (repo, digest)}
    pod = info.request.resource["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert pod["image"] == f"{repo}:{digest}"
    sched = KubernetesScheduler("torchx")
    app_id = sched.schedule(info)
    wait_for(lambda: sched.describe(app_id).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
    assert list(sched.log_iter(app_id, "r")) == ["built-locally\n"]


def test_a_local_image_without_image_repo_is_a_key_error_as_in_torchx() -> None:
    """TorchX raises KeyError there: ``except KeyError`` still catches ours, which is also an
    InvalidRunConfigException naming the option, and reads as one unquoted line."""
    from torchx_nb.schedulers.kubernetes import local_images
    from torchx_nb.specs.api import InvalidRunConfigException

    app = shell_app("true", "sha256:" + "ab" * 32)
    with pytest.raises(KeyError) as info:
        local_images(app, None)
    assert isinstance(info.value, InvalidRunConfigException) and info.value.cfg_key == "image_repo"
    assert str(info.value).startswith("role 'r' runs the local image sha256:abab")
    assert str(info.value).endswith("pass -cfg image_repo=HOST/REPO to push it there")


def test_why_a_pod_waits_is_said_with_the_next_step(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    """An image nobody can pull (a registry address on loopback where nothing listens) and a
    pod asking for a GPU the cluster's one node lacks: the scheduler's and the kubelet's
    reasons, in words, for the job and its replica."""
    sched = KubernetesScheduler("torchx")
    missing = "127.0.0.1:1/torchx-nb/missing:1"
    pulled = sched.submit(shell_app("true", missing), {"api": "indexed"})

    def said(app_id: str, start: str) -> str | None:
        desc = sched.describe(app_id)
        msg = desc.msg if desc is not None and desc.state == AppState.PENDING else ""
        return msg if msg.startswith(start) else None

    msg = wait_for(lambda: said(pulled, "pending (ImagePullBackOff)"), 30)
    assert msg.startswith(  # type: ignore[union-attr]
        f"pending (ImagePullBackOff): cannot pull the image {missing}: failed to pull"
    )
    assert msg.endswith(  # type: ignore[union-attr]
        "; check its name and tag, and that the cluster may pull from its registry"
        " (imagePullSecrets)"
    )
    gpu = shell_app("true", base_images["busybox"])
    gpu.roles[0].resource = specs.Resource(cpu=1, gpu=1, memMB=64)
    unschedulable = sched.submit(gpu, {"api": "indexed"})
    msg = wait_for(lambda: said(unschedulable, "pending (Unschedulable)"), 30)
    assert msg == (
        "pending (Unschedulable): 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        " preemption: 0/1 nodes are available: 1 No preemption victims found for incoming"
        " pod.; ask for less (-h, cpu, memMB, gpu), or add nodes that have it"
    )
    replica = sched.describe(unschedulable).roles_statuses[0].replicas[0]  # type: ignore[union-attr]
    assert replica.structured_error_msg == msg
    for app_id in (pulled, unschedulable):
        sched.cancel(app_id)


def test_a_pod_over_its_memory_limit_is_oomkilled(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    """The pod's memory limit is enforced (the loopback controller gives it to Docker as the
    kubelet gives it to the cgroup): the terminated reason OOMKilled marks the replica and
    its failure card."""
    app = shell_app(
        "python3 -c 'x = bytearray(400 * 1024 * 1024)'", base_images["python"], mem_mb=64
    )
    with get_runner() as runner:
        handle = runner.run(app, "kubernetes", {"api": "indexed"})
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.FAILED, status
        (replica,) = status.roles[0].replicas
        assert replica.oom, replica
        (card,) = runner.failure_cards(handle, status)
        assert card.headline() == "r/0 ran out of memory (exit code 137, SIGKILL)"


def test_a_volcano_gang_that_cannot_be_scheduled_says_why(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    """Two tasks, one asking for a GPU the cluster lacks: Volcano keeps the whole gang
    Pending, and its PodGroup's Unschedulable condition (found through the pods'
    scheduling.k8s.io/group-name) leads the message, followed by the pod's own reason."""
    sched = KubernetesScheduler("torchx")
    app = shell_app("sleep 30", base_images["busybox"], replicas=2)
    app.roles[0].resource = specs.Resource(cpu=1, gpu=1, memMB=64)
    app_id = sched.submit(app, {"queue": "default"})
    try:

        def said() -> str | None:
            desc = sched.describe(app_id)
            msg = desc.msg if desc is not None and desc.state == AppState.PENDING else ""
            return msg if msg.startswith("pending (gang") else None

        msg = wait_for(said, 30)
        assert msg == (  # type: ignore[comparison-overlap]
            "pending (gang unschedulable): 2/2 tasks in gang unschedulable: pod group is not"
            " ready, 2 Pending, 2 minAvailable; Pending: 2 Unschedulable; (Unschedulable):"
            " 0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are"
            " available: 1 No preemption victims found for incoming pod.; ask for less (-h,"
            " cpu, memMB, gpu), or add nodes that have it"
        ), msg
    finally:
        sched.cancel(app_id)


def test_a_job_whose_pods_a_quota_refuses_says_why_from_its_events(
    kube_env: KubeFake, base_images: dict[str, str], tmp_path: Path
) -> None:
    """A ResourceQuota that refuses every pod leaves the Job with no pod at all: only the
    Job's FailedCreate event says why, and it reaches the status (folded, with its count and
    the next step), in Python and in ``torchx-nb status``; once the quota is raised the job
    runs."""
    from tests.conftest import cli

    kube_env.namespaces.add("capped")
    kube_env.memory_quota["capped"] = 32 * 2**20
    try:
        app = shell_app("sleep 1", base_images["busybox"], mem_mb=64)
        sched = KubernetesScheduler("torchx")
        app_id = sched.submit(app, {"api": "indexed", "namespace": "capped"})

        def said(app_id: str = app_id) -> str | None:
            desc = sched.describe(app_id)
            msg = desc.msg if desc is not None and desc.state == AppState.PENDING else ""
            return msg if " (x" in msg else None

        msg = wait_for(said, 30)
        assert msg is not None and msg.startswith("pending (FailedCreate): Error creating: pods"), (
            msg
        )
        assert "is forbidden: exceeded quota: compute, requested: limits.memory=64M," in msg
        assert msg.endswith(
            "; ask for less (-h, cpu, memMB, gpu), or ask for a larger ResourceQuota in the"
            " namespace (kubectl describe quota)"
        ), msg
        handle = f"kubernetes://torchx/{app_id}"
        code, out, err = cli("status", handle, env={"KUBECONFIG": str(kube_env.kubeconfig)})
        assert code == 0, err
        assert "pending (FailedCreate): Error creating: pods" in out, out
        assert "exceeded quota" in out, out

        kube_env.memory_quota["capped"] = 2**30  # raised: the pod is made and runs
        wait_for(
            lambda: (d := sched.describe(app_id)) is not None and d.state == AppState.SUCCEEDED,
            60,
        )
        sched.cancel(app_id)
    finally:
        kube_env.memory_quota.pop("capped", None)


def test_stale_warnings_do_not_explain_a_job_that_moved_on() -> None:
    """The Job's FailedCreate counts only while it is newer than the job's newest pod, and a
    FailedScheduling only while its pod is still unscheduled; other objects' warnings never
    count, and Normal events are not reasons."""
    from torchx_nb.schedulers.kubernetes.pending import event_pending_reason

    def event(name: str, reason: str, when: str, type_: str = "Warning") -> dict[str, Any]:
        return {
            "type": type_,
            "reason": reason,
            "message": f"{reason} \n  said",
            "involvedObject": {"name": name},
            "lastTimestamp": when,
        }

    def pod(name: str, created: str, scheduled: bool) -> dict[str, Any]:
        cond = {"type": "PodScheduled", "status": "True" if scheduled else "False"}
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": "Pending", "conditions": [cond]},
        }

    create = event("j", "FailedCreate", "2026-01-01T00:00:05Z")
    assert event_pending_reason([create], "j", []) == "pending (FailedCreate): FailedCreate said"
    later = [pod("j-0", "2026-01-01T00:00:09Z", scheduled=True)]
    assert event_pending_reason([create], "j", later) is None
    sched = event("j-0", "FailedScheduling", "2026-01-01T00:00:10Z")
    assert event_pending_reason([create, sched], "j", later) is None
    unscheduled = [pod("j-0", "2026-01-01T00:00:09Z", scheduled=False)]
    assert event_pending_reason([create, sched], "j", unscheduled) == (
        "pending (FailedScheduling): FailedScheduling said"
    )
    mount = event("j-0", "FailedMount", "2026-01-01T00:00:11Z") | {"count": 4}
    assert event_pending_reason([sched, mount], "j", later) == (
        "pending (FailedMount): FailedMount said (x4); check the mounts' volumes, claims and"
        " secrets exist in the namespace"
    )
    others = [event("k", "FailedCreate", "2026-01-01T00:00:12Z"), create | {"type": "Normal"}]
    assert event_pending_reason(others, "j", []) is None


def test_a_cancelled_job_says_who_cancelled_it(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    """``torchx-nb cancel`` deletes the Job and its pods and leaves who asked in its cancel
    mark: the status, while it is deleted and once it is gone (another process), says who."""
    import getpass
    import re

    from tests.conftest import cli

    sched = KubernetesScheduler("torchx")
    sleeper = sched.submit(shell_app("sleep 120", base_images["busybox"]), {"api": "indexed"})
    wait_for(lambda: sched.describe(sleeper).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
    handle = f"kubernetes://torchx/{sleeper}"
    code, _, err = cli("cancel", handle)
    assert code == 0, err
    wait_for(lambda: ("job", "default", parse_app_id(sleeper)[1]) not in kube_env.objects, 30)
    gone = KubernetesScheduler("torchx").describe(sleeper)
    assert gone is not None and gone.state == AppState.CANCELLED
    who = rf"{getpass.getuser()} with torchx-nb cancel \(pid \d+\)"
    assert re.fullmatch(rf"it was cancelled by {who}: its Job and pods were deleted", gone.msg)
    code, out, err = cli("status", handle)
    assert code == 0, err
    assert "State: CANCELLED" in out and re.search(rf"cancelled by {who}", out), out


def test_a_job_being_deleted_says_whether_we_cancelled_it(isolated: Path) -> None:
    """A Job with a deletionTimestamp (the loopback server drops it within 0.1 s, too fast to
    catch live): ours says who cancelled it, one without our cancel mark that it is being
    deleted outside torchx_nb."""
    from torchx_nb.schedulers.kubernetes.scheduler import _deleted_by
    from torchx_nb.schedulers.outputs import mark_cancelled

    assert _deleted_by("default:theirs-1") == (
        "its Job is being deleted outside torchx_nb (kubectl delete, or its owner)"
    )
    mark_cancelled("kubernetes", "default:ours-1", "alice with torchx-nb cancel (pid 7)")
    assert _deleted_by("default:ours-1") == (
        "it was cancelled by alice with torchx-nb cancel (pid 7): its Job and pods are being"
        " deleted"
    )


def test_a_job_that_ended_keeps_its_end_while_it_is_deleted(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    """A Job that succeeded, and one that failed with exit 3, are deleted outside torchx_nb
    (kubectl delete, a cleanup policy): seen while being deleted (the loopback server's own
    answer, with the deletionTimestamp the API server sets) they are still SUCCEEDED and
    FAILED (exit code 3) — they were CANCELLED, 'being deleted outside torchx_nb', though
    deleting them stopped nothing."""

    class SeenWhileDeleted(KubernetesScheduler):
        def _jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
            jobs = super()._jobs(namespace, selector)
            for job in jobs:
                job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            return jobs

    sched = KubernetesScheduler("torchx")
    bb = base_images["busybox"]
    ok = sched.submit(shell_app("true", bb), {"api": "indexed"})
    bad = sched.submit(shell_app("exit 3", bb), {"api": "indexed"})
    running = sched.submit(shell_app("sleep 120", bb), {"api": "indexed"})
    wait_for(lambda: sched.describe(ok).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
    wait_for(lambda: sched.describe(bad).state == AppState.FAILED, 60)  # type: ignore[union-attr]
    wait_for(lambda: sched.describe(running).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
    deleting = SeenWhileDeleted("torchx")
    try:
        done = deleting.describe(ok)
        failed = deleting.describe(bad)
        stopped = deleting.describe(running)
    finally:
        sched.cancel(running)
    assert done is not None and done.state == AppState.SUCCEEDED, done
    assert failed is not None and failed.state == AppState.FAILED, failed
    assert "exit code 3" in failed.msg and "deleted" not in failed.msg, failed.msg
    assert stopped is not None and stopped.state == AppState.CANCELLED
    assert (
        stopped.msg == "its Job is being deleted outside torchx_nb (kubectl delete, or its owner)"
    )
