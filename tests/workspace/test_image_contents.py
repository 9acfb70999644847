"""Reading what a base image has for Python from its layers: whiteouts, egg-info and
dist-info, the libc, and the real bookworm base through the real registry and daemon, cached
per digest."""

from __future__ import annotations

import io
import tarfile

from tests.infra.dockerd import DockerDaemon, Registry
from torchx_nb.workspace.image_contents import from_daemon, from_registry, scan_layers


class Link(str):
    """A symlink's target, in ``_layer``'s files."""


def _layer(files: dict[str, bytes | Link | None]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(data, Link):
                info.type = tarfile.SYMTYPE
                info.linkname = str(data)
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def _meta(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nlong text\n".encode()


SITE = "usr/local/lib/python3.12/site-packages"


def test_layers_in_order_with_whiteouts_egg_info_and_the_libc() -> None:
    base = _layer(
        {
            "usr/local/lib/python3.12/os.py": b"",
            "usr/local/bin/python3.12": b"ELF",
            "usr/local/bin/python": Link("python3.12"),
            f"{SITE}/": None,
            f"{SITE}/numpy-1.26.0.dist-info/METADATA": _meta("numpy", "1.26.0"),
            f"{SITE}/Old_Pkg-0.1.dist-info/METADATA": _meta("Old_Pkg", "0.1"),
            f"{SITE}/six-1.16.0.egg-info": _meta("six", "1.16.0"),
            f"{SITE}/gone/x.dist-info/METADATA": _meta("nested", "1"),
            "usr/lib/python3.9/os.py": b"",
            "var/lib/dpkg/status": b"Package: bash\nVersion: 5.2\n\nPackage: libc6\nVersion: 2.36-9\n",
        }
    )
    top = _layer(
        {
            f"{SITE}/.wh.Old_Pkg-0.1.dist-info": b"",
            f"{SITE}/numpy-1.26.0.dist-info/.wh..wh..opq": b"",
            f"{SITE}/numpy-2.0.0.dist-info/METADATA": _meta("numpy", "2.0.0"),
        }
    )
    c = scan_layers([base, top])
    assert c.python == "3.12" and c.prefix == "/usr/local"
    assert c.site_dirs == ("/usr/local/lib/python3.12/site-packages",)
    assert c.distributions == {"numpy": "2.0.0", "six": "1.16.0"}
    assert c.platform == "x86_64-manylinux_2_36"
    musl = scan_layers(
        [
            _layer(
                {
                    "lib/ld-musl-x86_64.so.1": b"",
                    "usr/lib/python3.11/os.py": b"",
                    "usr/bin/python3.11": b"ELF",
                    "usr/bin/python3": Link("/usr/bin/python3.11"),
                }
            )
        ]
    )
    assert musl.platform == "x86_64-unknown-linux-musl" and musl.python == "3.11"
    assert scan_layers([_layer({"bin/sh": b""})]).python is None


def test_the_bookworm_base_through_the_registry_and_the_daemon_read_once(
    python_in_registry: str, registry: Registry, dockerd: DockerDaemon
) -> None:
    from torchx_nb.workspace.registry import ImageRef, RegistryClient

    ref = ImageRef.parse(python_in_registry)
    client = RegistryClient(ref.host)
    c = from_registry(client, ref)
    assert (c.python, c.prefix, c.platform) == ("3.11", "/usr", "x86_64-manylinux_2_36")
    assert c.site_dir == "/usr/lib/python3/dist-packages"
    assert "tnbserved" not in c.distributions
    before = client.stats.requests
    assert from_registry(client, ref) == c
    assert client.stats.requests - before == 1  # the manifest only: the layers are cached
    docker = dockerd.client()
    assert from_daemon(docker, docker.images.get(python_in_registry)) == c


def test_a_damaged_layer_in_the_registry_is_named_in_one_line(registry: Registry) -> None:
    """A layer whose gzip stream ends early (a broken push, a truncated blob) stops the read
    with one line naming the layer and the fix, not a decompressor's traceback."""
    import hashlib
    import json

    import pytest

    from torchx_nb.specs.api import TorchxNbError
    from torchx_nb.workspace.registry import ImageRef, RegistryClient

    whole = _layer({"usr/lib/python3.11/os.py": b"x" * 200_000}).getvalue()
    broken = whole[: len(whole) // 2]
    with pytest.raises(tarfile.ReadError):
        scan_layers([io.BytesIO(broken)])
    client = RegistryClient(registry.host)
    repo = "damaged/python"
    digest = "sha256:" + hashlib.sha256(broken).hexdigest()
    client.upload_blob(repo, digest, broken)
    config = json.dumps({"architecture": "amd64", "rootfs": {"type": "layers"}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    client.upload_blob(repo, config_digest, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": digest,
                "size": len(broken),
            }
        ],
    }
    client.put_manifest(
        repo, "1", json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
    )
    ref = ImageRef.parse(f"{registry.host}/{repo}:1")
    with pytest.raises(TorchxNbError) as err:
        from_registry(RegistryClient(registry.host), ref)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"cannot read layer {digest[:19]} of {ref}: it is not an intact tar")
    assert message.endswith("push the image again, or pass --packages none")
