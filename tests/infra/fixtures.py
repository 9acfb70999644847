"""Session fixtures for the real Docker parts. A missing part skips the test on a laptop and
fails it under CI=true: a green CI means every backend really ran."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.infra.dockerd import (
    DockerDaemon,
    Registry,
    build_base_images,
    docker_available,
    start_dockerd,
    start_registry,
)
from tests.infra.gcp import GcpFake
from tests.infra.gcs import GcsEmulator, gcs_available, start_gcs
from tests.infra.kernel_venv import KernelVenv, make_kernel_venv
from tests.infra.kube import KubeFake
from tests.infra.moto import MotoServer, moto_available, start_moto
from tests.infra.slurm import SlurmCluster, slurm_available
from tests.infra.token_proxy import TokenProxy

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: missing parts fail)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerDaemon]:
    reason = docker_available()
    if reason:
        missing(reason)
    daemon = start_dockerd(tmp_path_factory.mktemp("dockerd"))
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def base_images(dockerd: DockerDaemon) -> dict[str, str]:
    return build_base_images(dockerd.client())


def push_to_registry(daemon: DockerDaemon, local: str, remote: str) -> str:
    """Tag ``local`` as ``remote`` (``HOST/REPO:TAG``) and push it with our dockerd."""
    client = daemon.client()
    repo, tag = remote.rsplit(":", 1)
    client.images.get(local).tag(repo, tag)
    for event in client.images.push(repo, tag, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(f"push of {remote} failed: {event['error']}")
    return remote


@pytest.fixture(scope="session")
def python_in_registry(
    dockerd: DockerDaemon, base_images: dict[str, str], registry: Registry
) -> str:
    """The python base image in the local registry, for the daemonless builder and remote
    schedulers."""
    return push_to_registry(dockerd, base_images["python"], f"{registry.host}/base/python:3.11")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    reason = docker_available()
    if reason:
        missing(reason)
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    reason = docker_available()
    if reason:
        missing(reason)
    reg = start_registry(tmp_path_factory.mktemp("auth-registry"), "tester", "s3cret-pw")
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def moto_server(
    tmp_path_factory: pytest.TempPathFactory, dockerd: DockerDaemon
) -> Iterator[MotoServer]:
    reason = moto_available()
    if reason:
        missing(reason)
    server = start_moto(tmp_path_factory.mktemp("moto"), dockerd.base_url)
    yield server
    server.stop()


@pytest.fixture
def aws_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """AWS_ENDPOINT_URL, fake credentials and a region for this process and its children."""
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    reason = gcs_available()
    if reason:
        missing(reason)
    server = start_gcs(tmp_path_factory.mktemp("gcs"))
    yield server
    server.stop()


@pytest.fixture
def gcs_env(gcs_server: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> GcsEmulator:
    """STORAGE_EMULATOR_HOST for this process and its children."""
    for key, value in gcs_server.env.items():
        monkeypatch.setenv(key, value)
    return gcs_server


@pytest.fixture
def docker_env(dockerd: DockerDaemon, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point DOCKER_HOST (this process and subprocesses, kernels included) at our daemon."""
    monkeypatch.setenv("DOCKER_HOST", dockerd.base_url)
    return dockerd


def _start_slurm(root: Any, accounting: bool, preempt: bool = False) -> SlurmCluster:
    reason = slurm_available()
    if reason:
        missing(reason)
    return SlurmCluster(root, accounting=accounting, preempt=preempt).start()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A private Slurm cluster (controller, two nodes, slurmdbd with MariaDB) on 127.0.0.1."""
    cluster = _start_slurm(tmp_path_factory.mktemp("slurm"), accounting=True)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def slurm_cluster_noacct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A second cluster with accounting off (no slurmdbd: sacct has no data)."""
    cluster = _start_slurm(tmp_path_factory.mktemp("slurm-noacct"), accounting=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def slurm_preempt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A preempting cluster of its own (partitions spot, spotc and urgent: PREEMPT_CONF in
    tests/infra/slurm.py), so a preemptor takes the nodes of this cluster's jobs only, never
    those of the tests that share ``slurm_cluster``."""
    cluster = _start_slurm(tmp_path_factory.mktemp("slurm-preempt"), accounting=True, preempt=True)
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm_preempt_env(slurm_preempt: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """SLURM_CONF naming the preempting cluster, for this process and its children."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_preempt.conf))
    return slurm_preempt


@pytest.fixture
def slurm_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """SLURM_CONF for this process and its children (the CLI, kernels) names our cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


@pytest.fixture(scope="session")
def gcp_fake(tmp_path_factory: pytest.TempPathFactory, dockerd: DockerDaemon) -> Iterator[GcpFake]:
    """The loopback GCP Batch + Cloud Logging (tests/infra/gcp.py), running tasks in our
    dockerd."""
    fake = GcpFake(tmp_path_factory.mktemp("gcp"), dockerd.client()).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def gar_registry(gcp_fake: GcpFake, registry: Registry) -> Iterator[TokenProxy]:
    """An Artifact-Registry-like front of the local registry: it takes the user
    ``oauth2accesstoken`` with an access token the GCP fake issued, as Artifact Registry does."""
    proxy = TokenProxy(
        registry.url,
        "",
        "",
        check=lambda user, password: user == "oauth2accesstoken" and gcp_fake.valid_token(password),
    )
    gcp_fake.registry_auth = {"username": "oauth2accesstoken", "password": gcp_fake.issue_token()}
    yield proxy
    proxy.stop()


@pytest.fixture
def gcp_env(
    gcp_fake: GcpFake,
    gar_registry: TokenProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> GcpFake:
    """Credentials (a service-account key), endpoints and project naming the GCP fake, for this
    process and its children; gcloud's own config and the docker config are empty."""
    for key, value in gcp_fake.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TORCHX_NB_GAR_HOSTS", gar_registry.host)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path_factory.mktemp("gcloud")))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path_factory.mktemp("docker-config")))
    return gcp_fake


@pytest.fixture(scope="session")
def kube_fake(
    tmp_path_factory: pytest.TempPathFactory, dockerd: DockerDaemon
) -> Iterator[KubeFake]:
    """The loopback Kubernetes API server with Volcano (tests/infra/kube.py), running pods in
    our dockerd."""
    fake = KubeFake(tmp_path_factory.mktemp("kube"), dockerd.client()).start()
    yield fake
    fake.stop()


@pytest.fixture
def kube_env(kube_fake: KubeFake, monkeypatch: pytest.MonkeyPatch) -> KubeFake:
    """KUBECONFIG naming the loopback API server, for this process and its children."""
    monkeypatch.setenv("KUBECONFIG", str(kube_fake.kubeconfig))
    return kube_fake


@pytest.fixture(scope="session")
def kernel_venv(tmp_path_factory: pytest.TempPathFactory) -> KernelVenv:
    """A kernel virtualenv with packages no index serves (see kernel_venv.py)."""
    return make_kernel_venv(tmp_path_factory.mktemp("kernel-venv"))
