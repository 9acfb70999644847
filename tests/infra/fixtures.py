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


@pytest.fixture
def docker_env(dockerd: DockerDaemon, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point DOCKER_HOST (this process and subprocesses, kernels included) at our daemon."""
    monkeypatch.setenv("DOCKER_HOST", dockerd.base_url)
    return dockerd
