"""An ended job its scheduler keeps nothing of — a removed container, a Kubernetes Job deleted
(as its TTL does), a GCP Batch job deleted — still reads as it ended: the job store and the job's outputs are the
truth, so ``status`` and the failure card agree with what was seen live, instead of "unknown
app". Against real dockerd and the loopback Kubernetes and GCP Batch servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli, shell_app, wait_for
from tests.infra.dockerd import DockerDaemon
from tests.infra.gcp import GcpFake
from tests.infra.kube import KubeFake
from tests.infra.moto import MotoServer, make_queue
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.specs.api import AppState, message_text


def test_a_removed_container_keeps_its_end_and_card(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(
            cell(source="raise ValueError('boom')", image=base_images["python"]),
            "local_docker",
            {},
            workspace=str(ws),
        )
        live = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert live is not None and live.state == AppState.FAILED
        (live_card,) = runner.failure_cards(handle, live)
        client = docker_env.client()
        app_id = handle.rsplit("/", 1)[1]
        for c in client.containers.list(
            all=True, filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
        ):
            c.remove(force=True)
        assert runner.get_scheduler("local_docker").describe(app_id) is None  # nothing left
        after = runner.status(handle)
        assert after is not None
        (card,) = runner.failure_cards(handle, after)
    assert (after.state, after.msg, after.ended) == (live.state, live.msg, live.ended)
    # the replica's ending kept in the job store: the same card, exit code included
    assert live_card.headline() == card.headline() == "cell/0 raised ValueError: boom (exit code 1)"
    code, out, err = cli("status", handle)
    assert code == 0, err
    assert "State: FAILED" in out and "cell/0 raised ValueError: boom (exit code 1)" in out


def test_a_deleted_kubernetes_job_keeps_its_end(
    kube_env: KubeFake, base_images: dict[str, str]
) -> None:
    from kubernetes import client, config

    with get_runner() as runner:
        handle = runner.run(
            shell_app("exit 3", base_images["busybox"]), "kubernetes", {"api": "indexed"}
        )
        live = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert live is not None and live.state == AppState.FAILED
        namespace, name = handle.rsplit("/", 1)[1].split(":", 1)
        # what the TTL controller does once ttlSecondsAfterFinished has passed
        config.load_kube_config(str(kube_env.kubeconfig))
        client.BatchV1Api().delete_namespaced_job(
            name, namespace, body={"propagationPolicy": "Background"}
        )
        wait_for(
            lambda: runner.get_scheduler("kubernetes").describe(f"{namespace}:{name}") is None, 30
        )
        after = runner.status(handle)
    assert after is not None
    assert (after.state, after.msg, after.ended) == (live.state, live.msg, live.ended)


def test_a_deleted_gcp_batch_job_keeps_its_end(
    gcp_env: GcpFake, base_images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GCP Batch deletes a job in the background: a describe can read the job and then find
    its tasks gone (NotFound); the job then reads as gone, and its end as the store kept it
    (that NotFound was raised to the caller)."""
    from torchx_nb.schedulers.gcp_batch import GcpBatchScheduler, parse_trial_id

    with get_runner() as runner:
        handle = runner.run(shell_app("exit 3", base_images["busybox"]), "gcp_batch", {})
        live = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert live is not None and live.state == AppState.FAILED
        app_id = handle.rsplit("/", 1)[1]
        sched = runner.get_scheduler("gcp_batch")
        assert isinstance(sched, GcpBatchScheduler)
        project, location, name, _ = parse_trial_id(app_id)
        # a user's `gcloud batch jobs delete`, or the project's retention
        full = f"projects/{project}/locations/{location}/jobs/{name}"
        read = sched._get(project, location, name)  # a describe's get just before the delete
        sched.gcp.call("delete", sched.gcp.batch.delete_job, name=full)
        wait_for(lambda: sched.describe(app_id) is None, 30)
        # that describe then lists the tasks of a job deleted since: NotFound
        with monkeypatch.context() as patched:
            patched.setattr(sched, "_get", lambda *_: read)
            assert sched.describe(app_id) is None
            trial = f"{app_id}:0"
            assert sched.describe_many([app_id, trial]) == {app_id: None, trial: None}
        after = runner.status(handle)
    assert after is not None
    assert (after.state, after.msg, after.ended) == (live.state, live.msg, live.ended)


def test_an_aws_batch_job_no_longer_listed_keeps_its_exit_code_and_end(
    aws_env: MotoServer, docker_env: DockerDaemon, base_images: dict[str, str]
) -> None:
    """Batch keeps a job for a while after it ended, then lists and describes it no more
    (moto keeps it for ever: its queue is deleted here, so it is no longer listed, as after
    Batch's retention). Live, its replica carries the container's exit code; afterwards the
    job store's record gives the same state, message, end and card."""
    aws_env.use_docker(True)
    queue = make_queue(aws_env, "gone-q")
    with get_runner() as runner:
        handle = runner.run(
            shell_app("echo bad; exit 3", base_images["busybox"], mem_mb=128),
            "aws_batch",
            {"queue": queue},
        )
        live = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert live is not None and live.state == AppState.FAILED
        (rep,) = [r for rs in live.roles for r in rs.replicas]
        assert rep.exit_code == 3 and rep.state == AppState.FAILED, rep
        (live_card,) = runner.failure_cards(handle, live)
    batch = aws_env.client("batch")
    batch.update_job_queue(jobQueue=queue, state="DISABLED")
    wait_for(
        lambda: batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["state"] == "DISABLED",
        30,
    )
    batch.delete_job_queue(jobQueue=queue)
    with get_runner() as runner:  # a later process: nothing cached of the job's id
        app_id = handle.rsplit("/", 1)[1]
        wait_for(lambda: runner.get_scheduler("aws_batch").describe(app_id) is None, 30)
        after = runner.status(handle)
        assert after is not None
        (card,) = runner.failure_cards(handle, after, lines=0)
    said = (after.state, message_text(after.msg), after.ended)
    assert said == (live.state, message_text(live.msg), live.ended)
    assert live_card.headline() == card.headline() == f"{rep.role}/0 exited with code 3"
    code, out, err = cli("status", handle)
    assert code == 0, err
    assert "State: FAILED" in out and "exited with code 3" in out, out
