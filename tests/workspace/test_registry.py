"""The daemonless registry client against a real registry (Debian's docker-registry)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.infra.dockerd import DockerDaemon, Registry
from torchx_nb.workspace.collect import collect_workspace
from torchx_nb.workspace.image_config import append_layers
from torchx_nb.workspace.layers import build_file_layer, build_layer
from torchx_nb.workspace.registry import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    ImageRef,
    RegistryClient,
    RegistryError,
)


@pytest.fixture(scope="module")
def pushed_base(dockerd: DockerDaemon, base_images: dict[str, str], registry: Registry) -> str:
    """The busybox base image in the local registry (pushed by dockerd: a Docker v2 manifest)."""
    client = dockerd.client()
    ref = f"{registry.host}/base/busybox"
    client.images.get(base_images["busybox"]).tag(ref, "1")
    for event in client.images.push(ref, "1", stream=True, decode=True):
        assert "error" not in event, event
    return f"{ref}:1"


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.csv").write_text("x,y\n1,2\n")
    (ws / ".env").write_text("SECRET_TOKEN=do-not-ship\n")
    (ws / ".aws").mkdir()
    (ws / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=do-not-ship\n")
    return ws


def test_image_ref_parsing() -> None:
    assert ImageRef.parse("127.0.0.1:5000/a/b:1") == ImageRef("127.0.0.1:5000", "a/b", "1")
    assert ImageRef.parse("localhost/a") == ImageRef("localhost", "a", "latest")
    assert ImageRef.parse("host.example/a@sha256:ab").reference == "sha256:ab"
    with pytest.raises(RegistryError, match="names no registry host"):
        ImageRef.parse("python:3.11")


def test_append_uploads_only_what_is_new(
    pushed_base: str, registry: Registry, tmp_path: Path
) -> None:
    ws = workspace(tmp_path)
    files = collect_workspace(ws)
    layers = [
        build_layer(files, "workspace", cache=tmp_path / "c"),
        build_file_layer({".torchx/cell-1.py": b"print('one')\n"}, "workspace", tmp_path),
    ]
    repo = f"{registry.host}/proj/app"
    first = append_layers(pushed_base, repo, layers, history=["workspace", "cell"])
    assert first.image == f"{repo}@{first.digest}"
    assert {layers[0].digest, layers[1].digest} <= set(first.stats.uploaded_blobs)
    assert first.stats.mounted_blobs, "base layers are mounted, not re-uploaded"
    assert first.working_dir == "/workspace"

    client = RegistryClient(registry.host)
    manifest, media, _ = client.get_manifest(ImageRef.parse(first.image))
    base_manifest, _, _ = client.get_manifest(ImageRef.parse(pushed_base))
    assert media == DOCKER_MANIFEST
    assert manifest["layers"][: len(base_manifest["layers"])] == base_manifest["layers"]
    assert [m["digest"] for m in manifest["layers"][-2:]] == [lay.digest for lay in layers]
    config = json.loads(client.get_blob("proj/app", manifest["config"]["digest"]))
    assert config["rootfs"]["diff_ids"][-2:] == [lay.diff_id for lay in layers]
    assert config["config"]["WorkingDir"] == "/workspace"

    again = append_layers(pushed_base, repo, layers, history=["workspace", "cell"])
    assert again.digest == first.digest and again.stats.uploaded_bytes == 0

    edited = [
        layers[0],
        build_file_layer({".torchx/cell-2.py": b"print('two')\n"}, "workspace", tmp_path),
    ]
    third = append_layers(pushed_base, repo, edited, history=["workspace", "cell"])
    uploaded = set(third.stats.uploaded_blobs)
    assert edited[1].digest in uploaded and layers[0].digest not in uploaded
    assert third.stats.uploaded_bytes < edited[1].size + 4096


def test_no_secret_reaches_any_layer(pushed_base: str, registry: Registry, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    layers = [build_layer(collect_workspace(ws), "workspace", cache=tmp_path / "c")]
    result = append_layers(pushed_base, f"{registry.host}/proj/secrets", layers)
    client = RegistryClient(registry.host)
    manifest, _, _ = client.get_manifest(ImageRef.parse(result.image))
    names: list[str] = []
    for blob in manifest["layers"]:
        data = gzip.decompress(client.get_blob("proj/secrets", blob["digest"]))
        assert b"do-not-ship" not in data
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            names += tar.getnames()
    assert "workspace/data.csv" in names
    assert not any(".env" in n or ".aws" in n for n in names)


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_oci_index_picks_the_platform(registry: Registry, tmp_path: Path) -> None:
    client = RegistryClient(registry.host)
    repo = "oci/base"
    manifests = []
    for arch in ("arm64", "amd64"):
        raw = _tar({f"arch-{arch}": arch.encode()})
        layer = gzip.compress(raw, mtime=0)
        ldig = "sha256:" + hashlib.sha256(layer).hexdigest()
        client.upload_blob(repo, ldig, layer)
        config = json.dumps(
            {
                "architecture": arch,
                "os": "linux",
                "config": {},
                "rootfs": {
                    "type": "layers",
                    "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()],
                },
            }
        ).encode()
        cdig = "sha256:" + hashlib.sha256(config).hexdigest()
        client.upload_blob(repo, cdig, config)
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": cdig,
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": ldig,
                        "size": len(layer),
                    }
                ],
            }
        ).encode()
        mdig = client.put_manifest(
            repo, "sha256:" + hashlib.sha256(body).hexdigest(), body, OCI_MANIFEST
        )
        manifests.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": mdig,
                "size": len(body),
                "platform": {"os": "linux", "architecture": arch},
            }
        )
    index = json.dumps(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    ).encode()
    client.put_manifest(repo, "multi", index, OCI_INDEX)

    extra = build_file_layer({"hello.txt": b"hi"}, "workspace", tmp_path)
    result = append_layers(f"{registry.host}/{repo}:multi", f"{registry.host}/oci/app", [extra])
    manifest, media, _ = client.get_manifest(ImageRef.parse(result.image))
    assert media == OCI_MANIFEST
    assert manifest["layers"][0]["digest"] != manifests[0]["digest"]
    config = json.loads(client.get_blob("oci/app", manifest["config"]["digest"]))
    assert config["architecture"] == "amd64"
    assert manifest["layers"][-1]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    with pytest.raises(RegistryError, match="has no linux/s390x variant"):
        client.get_manifest(ImageRef.parse(f"{registry.host}/{repo}:multi"), "linux/s390x")


def test_clear_errors(
    registry: Registry, auth_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RegistryError, match="not found in the registry"):
        RegistryClient(registry.host).get_manifest(ImageRef.parse(f"{registry.host}/no/pe:1"))
    with pytest.raises(RegistryError, match="unreachable"):
        RegistryClient("127.0.0.1:1").get_manifest(ImageRef.parse("127.0.0.1:1/a/b:1"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    with pytest.raises(
        RegistryError, match=r"refused .*\(401; tried no credentials\).*docker login"
    ):
        RegistryClient(auth_registry.host).upload_blob("a/b", "sha256:" + "0" * 64, b"x")


def test_docker_config_credentials(
    auth_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    cfg = tmp_path / "docker"
    cfg.mkdir()
    token = base64.b64encode(f"{auth_registry.user}:{auth_registry.password}".encode()).decode()
    (cfg / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": token}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
    client = RegistryClient(auth_registry.host)
    data = b"authorised blob"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    client.upload_blob("auth/repo", digest, data)
    assert client.blob_exists("auth/repo", digest)
    assert client.credentials is not None and client.credentials.source == "~/.docker/config.json"


def test_ecr_login_with_boto3_token(
    aws_env: object,
    pushed_base: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ECR-like registry (htpasswd with the user and password moto's ECR hands out) is
    logged in to with boto3's get_authorization_token; the base comes from another registry,
    so its blobs are copied across hosts."""
    from tests.infra.dockerd import start_registry

    ecr = start_registry(tmp_path / "ecr", "AWS", "123456789012-auth-token")
    try:
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
        monkeypatch.setenv("TORCHX_NB_ECR_HOSTS", ecr.host)
        layer = build_file_layer({"f.txt": b"pushed with an ECR token"}, "workspace", tmp_path)
        result = append_layers(pushed_base, f"{ecr.host}/team/jobs", [layer])
        client = RegistryClient(ecr.host)
        manifest, media, _ = client.get_manifest(ImageRef.parse(result.image))
        assert media == DOCKER_MANIFEST and manifest["layers"][-1]["digest"] == layer.digest
        assert client.credentials is not None
        assert client.credentials.source == "ECR get_authorization_token"
        assert len(result.stats.uploaded_blobs) == len(manifest["layers"]) + 1
    finally:
        ecr.stop()


def test_bearer_token_registry(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    from tests.infra.token_proxy import TokenProxy

    proxy = TokenProxy(registry.url, "bob", "pw")
    try:
        cfg = tmp_path / "docker"
        cfg.mkdir()
        auth = base64.b64encode(b"bob:pw").decode()
        (cfg / "config.json").write_text(json.dumps({"auths": {proxy.host: {"auth": auth}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
        client = RegistryClient(proxy.host)
        data = b"through a bearer token"
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        client.upload_blob("tok/repo", digest, data)
        assert client.blob_exists("tok/repo", digest)
        assert client.get_blob("tok/repo", digest) == data
        assert proxy.token_requests[0]["scope"] == "repository:tok/repo:pull,push"
        assert proxy.token_requests[0]["service"] == "test"
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
        with pytest.raises(RegistryError, match="refused"):
            RegistryClient(proxy.host).upload_blob("tok/repo", digest, data)
    finally:
        proxy.stop()


def test_credential_helper(
    auth_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-torchxtest"
    helper.write_text(
        "#!/bin/sh\nread host\n"
        f'echo "{{\\"ServerURL\\": \\"$host\\", \\"Username\\": \\"{auth_registry.user}\\",'
        f' \\"Secret\\": \\"{auth_registry.password}\\"}}"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    cfg = tmp_path / "docker"
    cfg.mkdir()
    (cfg / "config.json").write_text(
        json.dumps({"credHelpers": {auth_registry.host: "torchxtest"}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
    client = RegistryClient(auth_registry.host)
    data = b"via a credential helper"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    client.upload_blob("helper/repo", digest, data)
    assert client.blob_exists("helper/repo", digest)
    assert client.credentials is not None
    assert client.credentials.source == "docker-credential-torchxtest"


def test_a_layer_is_uploaded_while_it_is_written(registry: Registry, tmp_path: Path) -> None:
    """``upload_stream`` follows a layer being written on another thread: the registry ends
    with the layer's exact blob under its digest, uploaded once; a layer given up midway
    leaves nothing behind under any digest."""
    import os
    import threading

    from torchx_nb.workspace.layers import LayerAborted, LayerWriter

    client = RegistryClient(registry.host)
    writer = LayerWriter(tmp_path / "l.tar.gz", 1, fast=True)
    result: list[str] = []
    upload = threading.Thread(
        target=lambda: result.append(client.upload_stream("streamed/env", writer.follow(1 << 20)))
    )
    upload.start()
    writer.add([(f"f{i}", os.urandom(400_000) * 2, 0o644, None) for i in range(10)])
    layer = writer.close()
    upload.join(timeout=60)
    assert result == [layer.digest]
    assert client.get_blob("streamed/env", layer.digest) == layer.path.read_bytes()
    assert client.stats.uploaded_blobs == [layer.digest]

    given_up = LayerWriter(tmp_path / "g.tar.gz", 1, fast=True)
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            client.upload_stream("streamed/gone", given_up.follow(1 << 20))
        except LayerAborted as e:
            failed.append(e)

    upload = threading.Thread(target=follow)
    upload.start()
    given_up.add([(f"f{i}", os.urandom(400_000) * 2, 0o644, None) for i in range(4)])
    given_up.abort()
    upload.join(timeout=60)
    assert len(failed) == 1 and client.stats.uploaded_blobs == [layer.digest]
