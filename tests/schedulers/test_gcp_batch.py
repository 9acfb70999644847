"""gcp_batch: the request it builds, and the real google-cloud-batch / google-cloud-logging
clients against the loopback GCP Batch + Logging (tests/infra/gcp.py), which runs each task's
container in our dockerd."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, cli_error, shell_app, wait_for
from tests.infra.dockerd import free_port, host_python_mounts
from tests.infra.gcp import GcpFake
from tests.infra.token_proxy import TokenProxy
from torchx_nb import specs
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.gcp_batch import GcpBatchScheduler, GcpError, parse_app_id
from torchx_nb.specs import AppState
from torchx_nb.specs.log_line import Stream

PROJECT = "torchx-test"


def app(n: int = 2, **kw: Any) -> specs.AppDef:
    return specs.AppDef(
        "My_Train.job",
        metadata={"Team": "ML Infra"},
        roles=[
            specs.Role(
                "trainer",
                "img:1",
                entrypoint="bash",
                args=["-c", f"echo rank {specs.macros.replica_id} of $BATCH_TASK_COUNT"],
                num_replicas=n,
                resource=kw.get("resource", specs.Resource(cpu=2, gpu=0, memMB=2048)),
                env={
                    "RANK0": specs.macros.rank0_env,
                    "IDX": specs.macros.replica_id,
                    "API_TOKEN": "s3cr3t-value",
                },
                max_retries=kw.get("max_retries", 2),
                mounts=kw.get("mounts", []),
            )
        ],
    )


def dryrun(a: specs.AppDef, **cfg: Any) -> Any:
    return GcpBatchScheduler("torchx").submit_dryrun(a, {"project": PROJECT, **cfg})


def test_request_keeps_torchx_shape_with_real_replica_ids() -> None:
    from google.cloud import batch_v1

    a = app(n=2)
    a.metadata["torchx_app_name"] = "spoofed"  # metadata cannot hide a job from our list
    info = dryrun(a)
    req = info.request
    assert req.project == PROJECT and req.location == "us-central1"
    assert req.name.startswith("my-train-job-") and len(req.name) <= 63
    job = req.job_def
    assert isinstance(job, batch_v1.Job)
    (group,) = job.task_groups
    assert group.task_count == 2 and group.task_count_per_node == 1 and group.require_hosts_file
    assert [dict(e.variables) for e in group.task_environments] == [
        {"TORCHX_REPLICA_IDX": "0", "IDX": "0"},
        {"TORCHX_REPLICA_IDX": "1", "IDX": "1"},
    ]
    spec = group.task_spec
    assert spec.runnables[0].script.text == "/sbin/iptables -A INPUT -j ACCEPT"
    c = spec.runnables[1].container
    assert c.image_uri == "img:1" and c.entrypoint == ""
    # the index is expanded by /bin/sh before the program runs (GCP Batch uses no shell)
    assert list(c.commands) == [
        "/bin/sh",
        "-c",
        "exec bash -c 'echo rank '\"$BATCH_TASK_INDEX\"' of $BATCH_TASK_COUNT'",
    ]
    assert c.options == "--net host --shm-size=2048m"
    env = dict(spec.environment.variables)
    assert env["RANK0"] == "BATCH_MAIN_NODE_HOSTNAME"
    assert env["TORCHX_ROLE_IDX"] == "0" and env["TORCHX_ROLE_NAME"] == "trainer"
    assert spec.compute_resource.cpu_milli == 2000 and spec.compute_resource.memory_mib == 2048
    assert spec.max_retry_count == 2
    assert job.labels["torchx_version"] and job.labels["torchx_app_name"] == req.name
    assert job.labels["team"] == "ml_infra"
    assert job.logs_policy.destination == batch_v1.LogsPolicy.Destination.CLOUD_LOGGING
    assert not job.allocation_policy.instances
    shown = str(info)
    assert "s3cr3t-value" not in shown and '"API_TOKEN": "****"' in shown
    assert json.loads(shown)["parent"] == f"projects/{PROJECT}/locations/us-central1"
    # what is shown is what is sent: the proto survives a round trip through its JSON
    assert batch_v1.Job.from_json(batch_v1.Job.to_json(job), ignore_unknown_fields=False) == job


def test_machine_types_options_and_mounts() -> None:
    from google.cloud import batch_v1

    Policy = batch_v1.AllocationPolicy
    a3 = dryrun(app(resource=specs.named_resources["gcp_a3-highgpu-8g"])).request.job_def
    (inst,) = a3.allocation_policy.instances
    assert inst.policy.machine_type == "a3-highgpu-8g" and inst.install_gpu_drivers
    torchx_default = dryrun(app(resource=specs.Resource(cpu=8, gpu=4, memMB=1000)))
    assert torchx_default.request.job_def.allocation_policy.instances[0].policy.machine_type == (
        "a2-highgpu-4g"
    )
    l4 = dryrun(app(resource=specs.Resource(cpu=20, gpu=2, memMB=1000)), machine_type="g2-standard")
    assert l4.request.job_def.allocation_policy.instances[0].policy.machine_type == "g2-standard-24"
    with pytest.raises(
        specs.InvalidRunConfigException, match="a3-highgpu machines have 1, 2, 4 or 8 GPUs, not 3"
    ):
        dryrun(app(resource=specs.Resource(cpu=8, gpu=3, memMB=1000)), machine_type="a3-highgpu")
    with pytest.raises(specs.InvalidRunConfigException, match="1, 2, 4, 8 or 16 GPUs, not 5"):
        dryrun(app(resource=specs.Resource(cpu=8, gpu=5, memMB=1000)))
    job = dryrun(
        app(
            mounts=specs.parse_mounts(
                [
                    "type=bind",
                    "src=/data",
                    "dst=/data",
                    "readonly",
                    "type=volume",
                    "src=gs://bucket/ds",
                    "dst=/gcs",
                    "type=volume",
                    "src=nfs://10.0.0.2/export",
                    "dst=/nfs",
                    "type=device",
                    "src=/dev/fuse",
                ]
            )
        ),
        provisioning_model="spot",
        service_account="sa@p.iam.gserviceaccount.com",
        network="projects/p/global/networks/n",
        subnetwork="projects/p/regions/r/subnetworks/s",
        labels={"Cost-Center": "R&D"},
        max_run_duration="1h30m",
        machine_type="n2-standard-8",
    ).request.job_def
    policy = job.allocation_policy
    assert policy.instances[0].policy.provisioning_model == Policy.ProvisioningModel.SPOT
    assert policy.instances[0].policy.machine_type == "n2-standard-8"
    assert policy.service_account.email == "sa@p.iam.gserviceaccount.com"
    assert policy.network.network_interfaces[0].subnetwork.endswith("subnetworks/s")
    assert job.labels["cost-center"] == "r_d"
    spec = job.task_groups[0].task_spec
    assert spec.max_run_duration.seconds == 5400
    assert [v.gcs.remote_path or v.nfs.server for v in spec.volumes] == ["bucket/ds", "10.0.0.2"]
    assert list(spec.runnables[1].container.volumes) == [
        "/data:/data:ro",
        "/mnt/disks/torchx-1:/gcs",
        "/mnt/disks/torchx-2:/nfs",
    ]
    assert "--device=/dev/fuse:/dev/fuse:rwm" in spec.runnables[1].container.options


@pytest.mark.parametrize(
    ("kw", "cfg", "message"),
    [
        ({}, {"max_run_duration": "soon"}, "max_run_duration 'soon' is not a duration"),
        ({}, {"provisioning_model": "cheap"}, "use standard or spot"),
        ({}, {"location": "US Central"}, "is not a GCP location"),
        ({}, {"project": "Bad Project"}, "is not a GCP project id"),
        (
            {"mounts": [specs.BindMount("/a --privileged", "/b")]},
            {},
            "is not an absolute path",
        ),
        (
            {"mounts": [specs.VolumeMount("efs-123", "/b")]},
            {},
            "mounts gs://BUCKET[/PATH] and nfs://SERVER/PATH volumes",
        ),
    ],
)
def test_bad_options_are_refused_before_anything_is_sent(
    kw: dict[str, Any], cfg: dict[str, Any], message: str
) -> None:
    with pytest.raises(specs.InvalidRunConfigException, match=message.replace("[", r"\[")):
        dryrun(app(**kw), **cfg)


def test_several_roles_fail_with_one_line_naming_the_limit() -> None:
    two = app()
    two.roles.append(specs.Role("ps", "img", entrypoint="true", resource=specs.Resource(1, 0, 64)))
    with pytest.raises(specs.InvalidRunConfigException, match="one task group per job.*2 roles"):
        GcpBatchScheduler("torchx")._validate(two, "gcp_batch", {})


def test_app_ids_are_checked() -> None:
    assert parse_app_id("p-1:us-central1:job-x") == ("p-1", "us-central1", "job-x")
    assert parse_app_id("example.com:p-1:europe-west4:j") == (
        "example.com:p-1",
        "europe-west4",
        "j",
    )
    for bad in ("p:us-central1", "p-1:us-central1:../../x", "p-1:us central1:j", "P:us-central1:j"):
        with pytest.raises(ValueError, match="not a gcp_batch app id"):
            parse_app_id(bad)


def test_dryrun_without_project_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    code, stdout, stderr = cli("run", "-s", "gcp_batch", "--dryrun", "utils.echo", "--msg", "hi")
    assert code != 0
    assert stderr.strip().splitlines() == [
        "torchx-nb: error: no GCP project: pass -cfg project=ID, or set GOOGLE_CLOUD_PROJECT"
        " (or run `gcloud config set project ID`)"
    ]
    (tmp_path / "configurations").mkdir()
    (tmp_path / "configurations" / "config_default").write_text("[core]\nproject = from-gcloud\n")
    code, stdout, stderr = cli(
        "run", "-s", "gcp_batch", "--dryrun", "--json", "utils.echo", "--msg", "hi"
    )
    assert code == 0, stderr
    assert '"parent": "projects/from-gcloud/locations/us-central1"' in stdout


# --- against the loopback GCP Batch -------------------------------------------------------

DDP_CELL = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item()} replica",
      os.environ["TORCHX_REPLICA_IDX"], open("data.csv").read().strip())
dist.destroy_process_group()
"""


def test_two_task_ddp_cell_runs_from_artifact_registry(
    gcp_env: GcpFake,
    gar_registry: TokenProxy,
    python_in_registry: str,
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.csv").write_text("from-the-workspace")
    (ws / ".env").write_text("SECRET=never-shipped\n")
    repo = f"{gar_registry.host}/{PROJECT}/jobs"
    cfg = {"image_repo": repo, "builder": "registry", "quiet": True}
    with get_runner() as runner:
        # the image has no torch: this machine's Python is lent through bind mounts (container
        # volumes, as a GCP Batch job would mount a disk)
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
        handle = runner.run(a, "gcp_batch", cfg, workspace=str(ws))
        assert runner.jobstore.get(handle) is not None
        status = runner.wait(handle, wait_interval=0.5, timeout=240)
        logs = ["".join(runner.log_lines(handle, "cell", k)) for k in (0, 1)]
        assert status is not None and status.state == AppState.SUCCEEDED, (status, logs)
        assert [r.state for r in status.roles[0].replicas] == [AppState.SUCCEEDED] * 2
        assert status.ui_url and status.ui_url.startswith(
            "https://console.cloud.google.com/batch/jobsDetail/regions/us-central1/jobs/cell-"
        )
        assert "rank 0 of 2 sum 3.0 replica 0 from-the-workspace" in logs[0] + logs[1]
        assert "rank 1 of 2 sum 3.0 replica 1 from-the-workspace" in logs[0] + logs[1]
    # the push authenticated with a google-auth access token (user oauth2accesstoken)
    assert gar_registry.token_requests


def test_failure_retries_cancel_list_and_logs(
    gcp_env: GcpFake, base_images: dict[str, str]
) -> None:
    sched = GcpBatchScheduler("torchx")
    bb = base_images["busybox"]

    failing = sched.submit(
        shell_app("echo out; echo err >&2; exit 3", bb), {"location": "europe-west4"}
    )
    wait_for(lambda: sched.describe(failing).state == AppState.FAILED, 60)  # type: ignore[union-attr]
    desc = sched.describe(failing)
    assert desc is not None
    assert desc.msg.startswith(
        "r-0: FAILED (exit code 3): Task state is updated from RUNNING to FAILED"
    )
    assert desc.roles_statuses[0].replicas[0].exit_code == 3
    # stdout and stderr are two streams: their relative order is the order they were logged
    assert sorted(sched.log_iter(failing, "r")) == ["err\n", "out\n"]
    assert list(sched.log_iter(failing, "r", streams=Stream.STDOUT)) == ["out\n"]
    assert list(sched.log_iter(failing, "r", streams=Stream.STDERR)) == ["err\n"]
    assert list(sched.log_iter(failing, "r", regex="^e")) == ["err\n"]
    from torchx_nb.specs.log_line import LogLine

    # each line keeps its Cloud Logging entry's time
    stamps = [LogLine.time_of(line) for line in sched.log_iter(failing, "r")]
    assert all(t is not None and abs(time.time() - t) < 600 for t in stamps), stamps
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    earlier = datetime.now(timezone.utc) - timedelta(hours=1)
    assert list(sched.log_iter(failing, "r", since=later)) == []
    assert list(sched.log_iter(failing, "r", until=earlier)) == []
    assert sorted(sched.log_iter(failing, "r", since=earlier, until=later)) == ["err\n", "out\n"]
    with pytest.raises(ValueError, match="has no replica 1"):
        sched.log_iter(failing, "r", k=1)

    flaky = sched.submit(
        shell_app('test "$BATCH_TASK_RETRY_ATTEMPT" = 1 || exit 7; echo second try', bb, retries=1),
        {},
    )
    wait_for(lambda: sched.describe(flaky).state == AppState.SUCCEEDED, 60)  # type: ignore[union-attr]
    assert sched.describe(flaky).num_restarts == 1  # type: ignore[union-attr]

    sleeper = sched.submit(shell_app("echo started; sleep 120", bb, replicas=2), {})
    wait_for(lambda: sched.describe(sleeper).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
    tail = sched.log_iter(sleeper, "r", k=1, should_tail=True)
    assert next(iter(tail)) == "started\n"
    sched.cancel(sleeper)
    wait_for(lambda: sched.describe(sleeper).state == AppState.CANCELLED, 60)  # type: ignore[union-attr]
    assert list(tail) == []  # the tail ends once the job has
    labels = {"torchx-nb-gcp-fake": str(gcp_env.port)}
    running = gcp_env.docker.containers.list(
        filters={"label": [f"{k}={v}" for k, v in labels.items()]}
    )
    assert not [c for c in running if sleeper.rsplit(":", 1)[-1] in str(c.attrs["Config"]["Env"])]

    from google.cloud import batch_v1

    foreign = batch_v1.Job(
        task_groups=[batch_v1.TaskGroup(task_count=1, task_spec=batch_v1.TaskSpec())]
    )
    sched.gcp.batch.create_job(
        parent=f"projects/{PROJECT}/locations/us-central1", job=foreign, job_id="not-ours"
    )
    everywhere = {a.app_id: a.state for a in sched.list()}
    assert {failing, flaky, sleeper} <= set(everywhere)
    assert not [a for a in everywhere if a.endswith(":not-ours")]
    assert everywhere[failing] == AppState.FAILED and everywhere[sleeper] == AppState.CANCELLED
    in_europe = {a.app_id for a in sched.list({"location": "europe-west4"})}
    assert failing in in_europe and flaky not in in_europe
    assert sched.describe(f"{PROJECT}:us-central1:no-such-job") is None


def test_describe_many_is_one_list_per_location(
    gcp_env: GcpFake, base_images: dict[str, str]
) -> None:
    gcp_env.idle_projects.add("idle-project")
    try:
        sched = GcpBatchScheduler("torchx")
        a = specs.AppDef(
            "idle",
            roles=[
                specs.Role(
                    "r",
                    base_images["busybox"],
                    entrypoint="true",
                    resource=specs.Resource(1, 0, 64),
                )
            ],
        )
        ids = [sched.submit(a, {"project": "idle-project"}) for _ in range(5)]
        wait_for(
            lambda: all(
                d and d.state == AppState.RUNNING for d in sched.describe_many(ids).values()
            ),
            30,
        )
        before = dict(gcp_env.requests)
        got = sched.describe_many(ids)
        calls = {
            k: v - before.get(k, 0) for k, v in gcp_env.requests.items() if v != before.get(k, 0)
        }
        assert calls == {"GET jobs": 1}
        assert all(d is not None and d.state == AppState.RUNNING for d in got.values())
        # an API that refuses our filter: the same answer, from the unfiltered list
        gcp_env.strict_filters = True
        assert {k: v.state for k, v in sched.describe_many(ids).items() if v} == {
            i: AppState.RUNNING for i in ids
        }
        for i in ids:
            sched.cancel(i)
    finally:
        gcp_env.strict_filters = False
        gcp_env.idle_projects.discard("idle-project")


def test_transient_errors_are_retried_and_a_lost_reply_loses_no_job(
    gcp_env: GcpFake, base_images: dict[str, str]
) -> None:
    a = specs.AppDef(
        "flaky",
        roles=[
            specs.Role(
                "r", base_images["busybox"], entrypoint="true", resource=specs.Resource(1, 0, 64)
            )
        ],
    )
    with get_runner() as runner:
        gcp_env.fail_next(2, 503)
        h1 = runner.run(a, "gcp_batch", {})
        gcp_env.fail_next(1, 503, after=True)  # created, but the reply is lost
        h2 = runner.run(a, "gcp_batch", {})
        for h in (h1, h2):
            assert runner.jobstore.get(h) is not None
            st = runner.wait(h, wait_interval=0.5, timeout=60)
            assert st is not None and st.state == AppState.SUCCEEDED


def test_clear_errors_through_the_cli(
    gcp_env: GcpFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def error_line(*cfg: str) -> str:
        # no workspace: nothing to build, so the error comes from GCP Batch itself
        return cli_error(
            "run",
            "-s",
            "gcp_batch",
            "--workspace",
            "",
            *cfg,
            "utils.echo",
            "--image",
            "img",
            timeout=120,
        )

    # with a workspace (this folder), an unknown location is found before any image is built
    _, _, stderr = cli(
        "run", "-s", "gcp_batch", "-cfg", "location=mars-north1", "utils.echo", timeout=120
    )
    assert stderr.strip() == (
        "torchx-nb: error: GCP Batch has no location 'mars-north1' in project torchx-test: use one"
        " of asia-southeast1, europe-west4, us-central1, us-east1 (-cfg location=...)"
    )
    gcp_env.denied_projects.add("locked-down")
    line = error_line("-cfg", "project=locked-down")
    assert line.startswith("torchx-nb: error: cannot create the GCP Batch job echo-")
    assert line.endswith(
        ": permission denied: Permission 'batch.jobs.create' denied on 'projects/locked-down';"
        " ask for the Batch Job Editor role (roles/batch.jobsEditor) on the project"
    )
    stranger = tmp_path / "stranger.json"
    from tests.infra.gcp import service_account_key

    stranger.write_text(json.dumps(service_account_key(f"{gcp_env.url}/token", PROJECT)[0]))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(stranger))
    assert "GCP refused the credentials (Request had invalid authentication credentials." in (
        error_line()
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    assert "GOOGLE_APPLICATION_CREDENTIALS" in error_line()
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert error_line() == (
        "torchx-nb: error: cannot find GCP credentials: no GCP credentials; run `gcloud auth"
        " application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service account"
        " key file"
    )


def test_an_unreachable_api_is_one_line(gcp_env: GcpFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_GCP_BATCH_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    sched = GcpBatchScheduler("torchx", retry_timeout=1.0)
    with pytest.raises(GcpError) as err:
        sched.describe(f"{PROJECT}:us-central1:some-job")
    text = str(err.value)
    assert text.startswith(
        f"cannot describe {PROJECT}:us-central1:some-job: cannot reach http://127.0.0.1:"
    )
    assert "\n" not in text


def test_docker_builder_pushes_to_artifact_registry_with_a_google_token(
    gcp_env: GcpFake,
    gar_registry: TokenProxy,
    python_in_registry: str,
    docker_env: Any,
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "note.txt").write_text("built by dockerd")
    before = len(gar_registry.token_requests)
    cfg = {
        "image_repo": f"{gar_registry.host}/{PROJECT}/docker",
        "builder": "docker",
        "quiet": True,
    }
    with get_runner() as runner:
        a = cell(source="print(open('note.txt').read())", image=python_in_registry, memMB=256)
        handle = runner.run(a, "gcp_batch", cfg, workspace=str(ws))
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        assert "".join(runner.log_lines(handle, "cell", 0)) == "built by dockerd\n"
    # dockerd logged in to the registry with the access token we passed along
    assert len(gar_registry.token_requests) > before


def test_list_reads_every_page(gcp_env: GcpFake) -> None:
    gcp_env.idle_projects.add("many-project")
    try:
        sched = GcpBatchScheduler("torchx")
        a = specs.AppDef(
            "many",
            roles=[specs.Role("r", "img", entrypoint="true", resource=specs.Resource(1, 0, 64))],
        )
        ids = {sched.submit(a, {"project": "many-project"}) for _ in range(130)}
        before = gcp_env.requests["GET jobs"]
        listed = {x.app_id for x in sched.list({"project": "many-project"})}
        assert listed == ids
        assert gcp_env.requests["GET jobs"] - before == 2  # pages of 100
        for i in ids:
            sched.cancel(i)
    finally:
        gcp_env.idle_projects.discard("many-project")


def test_cell_results_and_outputs_come_back_through_gcs(
    gcp_env: GcpFake,
    gcs_env: Any,
    gar_registry: TokenProxy,
    python_in_registry: str,
    tmp_path: Path,
) -> None:
    """``-cfg output_path=gs://…``: the task uploads $TORCHX_OUTPUT_DIR with
    google-cloud-storage (this machine's, lent through bind mounts) to the GCS emulator."""
    from tests.result_checks import (
        RAISE_CELL,
        RESULT_CELL,
        assert_raises_remotely,
        assert_round_trip,
        result_workspace,
    )

    gcs_env.bucket("gcp-results")
    ws = result_workspace(tmp_path)
    mounts, path = host_python_mounts()
    cfg = {
        "image_repo": f"{gar_registry.host}/{PROJECT}/results",
        "builder": "registry",
        "quiet": True,
        "output_path": "gs://gcp-results/runs",
    }
    env = {"PATH": path, **gcs_env.env}
    with get_runner() as runner:
        ok = runner.run(
            cell(source=RESULT_CELL, image=python_in_registry, memMB=256, mounts=mounts, env=env),
            "gcp_batch",
            cfg,
            workspace=str(ws),
        )
        bad = runner.run(
            cell(source=RAISE_CELL, image=python_in_registry, memMB=256, mounts=mounts, env=env),
            "gcp_batch",
            cfg,
            workspace=str(ws),
        )
        assert_round_trip(runner, ok, tmp_path / "dl", timeout=240)
        assert_raises_remotely(runner, bad, timeout=240)
        rec = runner.jobstore.get(ok)
        assert rec is not None and rec.outputs and rec.outputs.startswith("gs://gcp-results/runs/")


def test_an_array_is_one_job_with_a_task_count_of_one_replica_trials() -> None:
    """A cell sweep with a gs:// output_path: one task group of N tasks at most max_parallel
    at once, each task replica 0 of its own run, its cell runner told to look for its cancel
    mark; trial ids are PROJECT:LOCATION:JOB:INDEX."""
    from torchx_nb.schedulers.gcp_batch import CANCEL_POLL_ENV, parse_trial_id

    sched = GcpBatchScheduler("torchx")
    one = app(n=1)
    gs = sched.resolve_opts({"project": PROJECT, "output_path": "gs://b/runs"})
    assert sched.can_array(one, gs)
    assert not sched.can_array(one, sched.resolve_opts({"project": PROJECT}))  # no cancel mark
    assert not sched.can_array(app(n=2), gs)
    info = sched.array_request(dryrun(one, output_path="gs://b/runs"), 5, 2)
    group = info.request.job_def.task_groups[0]
    assert (group.task_count, group.parallelism, group.require_hosts_file) == (5, 2, False)
    assert list(group.task_environments) == []
    env = dict(group.task_spec.environment.variables)
    assert env["TORCHX_REPLICA_IDX"] == "0" and env["IDX"] == "0"
    assert env[CANCEL_POLL_ENV] == "5"
    assert env["TORCHX_NB_OUTPUT_URL"] == f"gs://b/runs/{info.request.name}/"
    assert (
        sched.array_request(dryrun(one, output_path="gs://b/r"), 3, None)
        .request.job_def.task_groups[0]
        .parallelism
        == 3
    )
    assert sched.array_index_env == "BATCH_TASK_INDEX" and sched.throttles_arrays
    assert sched.trial_ids("p:us-east1:job-1", 2) == ["p:us-east1:job-1:0", "p:us-east1:job-1:1"]
    assert parse_trial_id("torchx-test:us-east1:job-1:12") == (
        "torchx-test",
        "us-east1",
        "job-1",
        12,
    )
    assert parse_trial_id("example.com:proj:us-east1:job-1:3")[0] == "example.com:proj"
    assert parse_trial_id("example.com:proj:us-east1:job-1")[3] is None
    for bad in ("p1:us-east1:job:x:1", "p1:us-east1:Job:1", "p1:us-east1:1", "p1::job:1"):
        with pytest.raises(ValueError, match="not a gcp_batch app id"):
            parse_trial_id(bad)


def test_a_sweep_is_one_job_whose_trials_end_and_cancel_on_their_own(
    gcp_env: GcpFake,
    gcs_env: Any,
    gar_registry: TokenProxy,
    python_in_registry: str,
    tmp_path: Path,
) -> None:
    """One GCP Batch job holds five trials, two at a time: each has its own state, log and
    result (uploaded to the GCS emulator); a trial that raises fails alone while the others
    run on; a trial cancelled before it started ends at once, a running one within the cell
    runner's look for its mark, and Cancel all is one cancel_job call."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start
    from torchx_nb.sweeps import dryrun as sweep_dryrun

    gcs_env.bucket("gcp-sweeps")
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
    mounts, path = host_python_mounts()
    a = cell(
        source=source,
        image=python_in_registry,
        memMB=256,
        mounts=mounts,
        env={"PATH": path, **gcs_env.env},
    )
    cfg = [
        f"image_repo={gar_registry.host}/{PROJECT}/sweeps,builder=registry,quiet=True",
        "output_path=gs://gcp-sweeps/runs",
    ]
    request = SweepRequest(
        RunRequest(app=a, scheduler="gcp_batch", cfg=cfg, workspace=str(ws)),
        {"lr": [0.1, 5, 0.9, 7, 9]},
        max_parallel=2,
    )
    with get_runner() as runner:
        shown = sweep_dryrun(runner, request)
        assert "gcp_batch sweep of 5 trials, one native array job" in shown
        assert '"parallelism": "2"' in shown and '"taskCount": "5"' in shown
        creates = gcp_env.requests["POST jobs"]
        sw = start(runner, request)
        assert sw.array and gcp_env.requests["POST jobs"] == creates + 1
        ids = [h.rsplit("/", 1)[1] for h in sw.handles]  # type: ignore[union-attr]
        job_id = ids[0].rsplit(":", 1)[0]
        assert ids == [f"{job_id}:{i}" for i in range(5)]
        h = sw.handles

        def state(i: int) -> AppState | None:
            status = runner.status(h[i])  # type: ignore[arg-type]
            return status.state if status else None

        # trial 3 waits for a slot: cancelled now, it ends before it starts
        runner.cancel(h[3])  # type: ignore[arg-type]
        assert state(3) == AppState.CANCELLED
        # one job describe and one task list answer for every trial
        before = dict(gcp_env.requests)
        sw.statuses()
        calls = {k: v - before.get(k, 0) for k, v in gcp_env.requests.items()}
        assert {k: v for k, v in calls.items() if v} == {"GET job": 1, "GET tasks": 1}
        # trial 2 (starts once trial 0 ends) fails; trial 4 then runs beside trial 1
        wait_for(lambda: state(2) == AppState.FAILED, 180, 0.5)
        wait_for(lambda: state(4) == AppState.RUNNING, 120, 0.5)
        assert state(1) == AppState.RUNNING
        runner.cancel(h[1])  # type: ignore[arg-type]
        wait_for(lambda: state(1) == AppState.CANCELLED, 60, 0.5)
        assert state(4) == AppState.RUNNING
        cancels = gcp_env.requests["POST cancel"]
        sw.cancel()
        assert gcp_env.requests["POST cancel"] == cancels + 1
        statuses = sw.wait(timeout=120)
        assert [s.state if s else None for s in statuses] == [
            AppState.SUCCEEDED,
            AppState.CANCELLED,
            AppState.FAILED,
            AppState.CANCELLED,
            AppState.CANCELLED,
        ], statuses
        assert statuses[3] is not None and statuses[1] is not None
        frame = sw.results()
        assert frame["result"][0] == 1.0
        assert frame["error"][2] == "raised ValueError: lr too high"
        assert "trial lr 0.9" in "".join(runner.log_lines(h[2], "cell", 0))  # type: ignore[arg-type]
        trial1 = "".join(runner.log_lines(h[1], "cell", 0))  # type: ignore[arg-type]
        assert "trial lr 5" in trial1 and "this trial was cancelled" in trial1
        # trial 3 started once a slot was free, saw its mark and ran no cell
        trial3 = "".join(runner.log_lines(h[3], "cell", 0))  # type: ignore[arg-type]
        assert "trial lr" not in trial3 and "cancelled before it started" in trial3
        with pytest.raises(GcpError, match="is one task of a sweep's job"):
            runner.delete(h[0])  # type: ignore[arg-type]
    project, location, name = parse_app_id(job_id)
    job = gcp_env.jobs[f"projects/{project}/locations/{location}/jobs/{name}"]
    assert job.state == "CANCELLED"
    assert [t.events[-1]["exit_code"] for t in job.tasks[:4]] == [0, 170, 1, 170]


def test_a_sweep_runs_one_job_per_trial(gcp_env: GcpFake, base_images: dict[str, str]) -> None:
    """A component sweep (and a cell sweep without a gs:// output_path, where a trial's cancel
    mark would go) is one job per trial, each with its value substituted into the
    arguments."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    request = SweepRequest(
        RunRequest(
            component="utils.echo",
            component_args=["--msg", "word=${word}"],
            scheduler="gcp_batch",
            image=base_images["busybox"],
            workspace="",
        ),
        ["word=alpha,beta"],
    )
    with get_runner() as runner:
        sw = start(runner, request)
        assert not sw.array
        statuses = sw.wait(timeout=120)
        assert [s.state if s else None for s in statuses] == [AppState.SUCCEEDED] * 2
        logs = ["".join(runner.log_lines(h, "echo", 0)) for h in sw.handles]  # type: ignore[arg-type]
        assert logs == ["word=alpha\n", "word=beta\n"]
        records = runner.jobstore.trials(sw.id)
        assert [(r.trial, r.params) for r in records] == [
            (0, '{"word": "alpha"}'),
            (1, '{"word": "beta"}'),
        ]


def test_replica_id_in_a_command_is_each_tasks_index(
    gcp_env: GcpFake, base_images: dict[str, str]
) -> None:
    """GCP Batch runs container commands without a shell: a ``${replica_id}`` in one runs
    under ``/bin/sh -c`` so each task's program receives its own index."""
    from torchx_nb.schedulers.gcp_batch import task_command

    assert task_command(["echo", "plain"]) == ["echo", "plain"]
    assert task_command(["echo", "idx=$BATCH_TASK_INDEX", "it's"]) == [
        "/bin/sh",
        "-c",
        "exec echo idx=\"$BATCH_TASK_INDEX\"'' 'it'\"'\"'s'",
    ]
    role = specs.Role(
        "r",
        base_images["busybox"],
        entrypoint="echo",
        args=[f"task {specs.macros.replica_id} of 2; $HOME stays"],
        num_replicas=2,
        resource=specs.Resource(1, 0, 64),
    )
    sched = GcpBatchScheduler("torchx")
    app_id = sched.submit(specs.AppDef("idx", roles=[role]), {})
    wait_for(lambda: sched.describe(app_id).state == AppState.SUCCEEDED, 90)  # type: ignore[union-attr]
    logs = sorted("".join(sched.log_iter(app_id, "r", k)) for k in (0, 1))
    assert logs == ["task 0 of 2; $HOME stays\n", "task 1 of 2; $HOME stays\n"]


def test_a_job_held_by_quota_says_so_with_the_next_step(gcp_env: GcpFake) -> None:
    """The loopback GCP Batch holds a job of a quota-starved project SCHEDULED with GCP's own
    status event; the job's message is that sentence with what to do."""
    from torchx_nb.schedulers.gcp_reasons import waiting_reason

    project = "quota-starved"  # its name says quota: only GCP's own sentence may count
    gcp_env.quota_projects.add(project)
    sched = GcpBatchScheduler("torchx")
    app_id = sched.submit(shell_app("true", "unused:1"), {"project": project})

    def said() -> str | None:
        desc = sched.describe(app_id)
        msg = desc.msg if desc is not None and desc.state == AppState.PENDING else ""
        return msg if msg.startswith("pending (quota)") else None

    msg = wait_for(said, 30)
    assert msg.startswith(  # type: ignore[union-attr]
        "pending (quota): Quota checking process decides to delay scheduling for the job"
    )
    assert msg.endswith(  # type: ignore[union-attr]
        "[Quota: CPUS, limit: 24, usage: 24, wanted: 4.].; ask for more quota for the project"
        " (IAM & Admin > Quotas), or for less (-h, cpu, gpu)"
    )
    sched.cancel(app_id)
    assert waiting_reason(
        "Batch Error: code - CODE_GCE_ZONE_RESOURCE_POOL_EXHAUSTED, description - The zone"
        " 'projects/p/zones/us-central1-a' does not have enough resources available."
    ).startswith("pending (no capacity): Batch Error")
    assert waiting_reason("Job state is set from QUEUED to SCHEDULED.") == (
        "Job state is set from QUEUED to SCHEDULED."
    )


def test_a_cancelled_job_says_who_cancelled_it(
    gcp_env: GcpFake, base_images: dict[str, str]
) -> None:
    """``torchx-nb cancel`` leaves who asked in its cancel mark (GCP Batch's status events
    say no who): the status says so; a job cancelled with GCP's own CancelJob (gcloud, the
    console) says it was cancelled outside torchx_nb here."""
    import getpass
    import re

    from tests.conftest import cli
    from torchx_nb.runner import get_runner
    from torchx_nb.schedulers.gcp_batch import parse_trial_id

    bb = base_images["busybox"]
    with get_runner() as runner:
        ours, theirs = (
            runner.run(shell_app("sleep 120", bb), "gcp_batch", {"location": "europe-west4"})
            for _ in range(2)
        )
        for handle in (ours, theirs):
            wait_for(lambda h=handle: runner.status(h).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
        code, _, err = cli("cancel", ours)
        assert code == 0, err
        sched = runner.get_scheduler("gcp_batch")
        assert isinstance(sched, GcpBatchScheduler)
        project, location, name, _ = parse_trial_id(theirs.rsplit("/", 1)[1])
        full = f"projects/{project}/locations/{location}/jobs/{name}"
        sched.gcp.call("cancel", sched.gcp.batch.cancel_job, name=full)
        cancelled = runner.wait(ours, wait_interval=0.2, timeout=60)
        stopped = runner.wait(theirs, wait_interval=0.2, timeout=60)
    assert cancelled is not None and cancelled.state == AppState.CANCELLED
    assert re.fullmatch(
        rf"it was cancelled by {getpass.getuser()} with torchx-nb cancel \(pid \d+\)",
        cancelled.msg,
    ), cancelled.msg
    assert stopped is not None and stopped.state == AppState.CANCELLED
    assert stopped.msg.startswith("it was cancelled outside torchx_nb here ("), stopped.msg


def test_spot_retries_a_preemption_and_the_program_only_per_max_retries() -> None:
    """The request: spot is provisioning_model=spot; one kind of lifecycle policy per job
    (GCP does the opposite for the codes it does not name); the fake's retry decision, GCP's
    rule, applied to the request's own task spec."""
    from google.cloud import batch_v1

    no_retries = dryrun(app(max_retries=0), spot=True, max_preemptions=3).request.job_def
    spec = no_retries.task_groups[0].task_spec
    model = no_retries.allocation_policy.instances[0].policy.provisioning_model
    assert model == batch_v1.AllocationPolicy.ProvisioningModel.SPOT
    assert spec.max_retry_count == 3
    assert [
        (p.action.name, list(p.action_condition.exit_codes)) for p in spec.lifecycle_policies
    ] == [("RETRY_TASK", [50001])]
    assert GcpFake.retried(spec, 50001, 2) and not GcpFake.retried(spec, 50001, 3)
    assert not GcpFake.retried(spec, 1, 0)  # the program's failure is not retried
    # retries, and a ledger in the output path: every failure but 171 retried, capped at 10
    ledger = dryrun(app(max_retries=2), spot=True, output_path="gs://b/p").request.job_def
    spec = ledger.task_groups[0].task_spec
    assert spec.max_retry_count == 10
    assert [
        (p.action.name, list(p.action_condition.exit_codes)) for p in spec.lifecycle_policies
    ] == [("FAIL_TASK", [171])]
    env = dict(spec.environment.variables)
    assert env["TORCHX_NB_ATTEMPT_ENV"] == "BATCH_TASK_RETRY_ATTEMPT"
    assert env["TORCHX_NB_MAX_RETRIES"] == "2" and env["TORCHX_NB_CHECKPOINT_URL"].endswith(
        "/checkpoints"
    )
    assert GcpFake.retried(spec, 1, 0) and GcpFake.retried(spec, 50001, 9)
    assert not GcpFake.retried(spec, 171, 0) and not GcpFake.retried(spec, 50001, 10)
    # retries without a ledger: as before, max_retries and no policy
    plain = dryrun(app(max_retries=2)).request.job_def.task_groups[0].task_spec
    assert plain.max_retry_count == 2 and not list(plain.lifecycle_policies)
    with pytest.raises(
        specs.InvalidRunConfigException,
        match=r"^spot=True and provisioning_model=standard disagree \(spot is the alias of"
        r" provisioning_model=spot\): give only one of them$",
    ):
        dryrun(app(), spot=True, provisioning_model="standard")


def test_a_task_preempted_once_runs_again_and_the_job_succeeds_with_one_preemption(
    gcp_env: GcpFake,
) -> None:
    """The loopback GCP Batch ends the running task with 50001; its RETRY_TASK policy runs it
    again, and describe tells one preemption (with when the task ran again) of a SUCCEEDED job."""
    project = "spot-timed"
    gcp_env.timed_projects[project] = 4.0
    sched = GcpBatchScheduler("torchx")
    app_id = sched.submit(shell_app("true", "unused:1"), {"project": project, "spot": True})
    name = "projects/{}/locations/{}/jobs/{}".format(*parse_app_id(app_id))

    def running() -> bool:
        desc = sched.describe(app_id)
        return desc is not None and desc.roles_statuses[0].replicas[0].state == AppState.RUNNING

    wait_for(running, 60)
    gcp_env.preempt_task(name, 0)

    def ended() -> Any:
        desc = sched.describe(app_id)
        return desc if desc is not None and desc.state.name in ("SUCCEEDED", "FAILED") else None

    desc = wait_for(ended, 90)
    assert desc.state == AppState.SUCCEEDED
    assert desc.roles[0].max_retries == 0  # maxRetryCount is the preemptions' here
    assert len(desc.preemptions) == 1
    (p,) = desc.preemptions
    assert p.why == "Spot VM preempted"
    assert p.resumed_at is not None and p.resumed_at >= p.at
    assert desc.started is not None and p.at >= desc.started - 1
