"""The test infrastructure itself: our dockerd runs the locally built base images, and the
local registry stores and serves them."""

from __future__ import annotations

from tests.infra.dockerd import DockerDaemon, Registry


def test_base_images_run(dockerd: DockerDaemon, base_images: dict[str, str]) -> None:
    client = dockerd.client()
    out = client.containers.run(
        base_images["busybox"], ["sh", "-c", "echo ok"], network_mode="host", remove=True
    )
    assert out == b"ok\n"
    out = client.containers.run(
        base_images["python"], ["python", "-c", "print(6 * 7)"], network_mode="host", remove=True
    )
    assert out == b"42\n"


def test_push_pull_through_the_local_registry(
    dockerd: DockerDaemon, base_images: dict[str, str], registry: Registry
) -> None:
    client = dockerd.client()
    ref = f"{registry.host}/infra/bb"
    client.images.get(base_images["busybox"]).tag(ref, "1")
    for event in client.images.push(ref, "1", stream=True, decode=True):
        assert "error" not in event, event
    client.images.remove(f"{ref}:1")
    client.images.pull(ref, "1")
    out = client.containers.run(f"{ref}:1", ["echo", "pulled"], network_mode="host", remove=True)
    assert out == b"pulled\n"


def test_auth_registry_refuses_anonymous_pushes(
    dockerd: DockerDaemon, base_images: dict[str, str], auth_registry: Registry
) -> None:
    client = dockerd.client()
    ref = f"{auth_registry.host}/infra/bb"
    client.images.get(base_images["busybox"]).tag(ref, "1")
    events = list(client.images.push(ref, "1", stream=True, decode=True))
    assert any("error" in e for e in events)
    auth = {"username": auth_registry.user, "password": auth_registry.password}
    events = list(client.images.push(ref, "1", stream=True, decode=True, auth_config=auth))
    assert not any("error" in e for e in events), events
