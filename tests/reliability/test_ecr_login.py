"""ECR login asks the registry's own region, and says why it failed instead of hiding it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.dockerd import free_port
from tests.infra.moto import MotoServer
from torchx_nb.workspace.registry import RegistryClient
from torchx_nb.workspace.registry_auth import ecr_credentials, ecr_region


def test_region_comes_from_the_registry_host() -> None:
    assert ecr_region("123456789012.dkr.ecr.eu-west-1.amazonaws.com") == "eu-west-1"
    assert ecr_region("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com") == "us-gov-west-1"
    assert ecr_region("127.0.0.1:5000") is None


def test_login_uses_the_registry_region_not_the_default(
    aws_env: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    host = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
    notes: list[str] = []
    creds = ecr_credentials(host, notes)
    assert creds is not None, notes
    assert creds.source == "ECR get_authorization_token"


def test_a_failed_login_names_the_aws_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    client = RegistryClient("123456789012.dkr.ecr.eu-west-1.amazonaws.com")
    assert client.credentials is None
    assert client.auth_notes and client.auth_notes[0].startswith("ECR login failed: ")
    assert "Could not connect" in client.auth_notes[0]
