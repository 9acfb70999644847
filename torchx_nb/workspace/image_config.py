"""Image-config rewriting: a base image's manifest and config read from its registry, the
new layers appended (their history, the working directory, a fixed creation time, so one input
gives one digest) and the new config and manifest written under the target repository."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchx_nb.workspace.layers import DOCKER_LAYER, OCI_LAYER, Layer
from torchx_nb.workspace.registry import (
    DOCKER_CONFIG,
    DOCKER_MANIFEST,
    FIXED_CREATED,
    OCI_CONFIG,
    ImageRef,
    Progress,
    PushStats,
    RegistryClient,
)


@dataclass
class AppendResult:
    """The pushed image and what the push cost."""

    image: str
    digest: str
    stats: PushStats
    working_dir: str


def working_dir_for(config: dict[str, Any]) -> str:
    """Where the workspace goes: the base image's WorkingDir, or /workspace when it has none."""
    wd = str(config.get("config", {}).get("WorkingDir") or "")
    return wd if wd not in ("", "/") else "/workspace"


def append_layers(
    base: str,
    target_repo: str,
    layers: list[Layer],
    labels: dict[str, str] | None = None,
    history: list[str] | None = None,
    on_progress: Progress | None = None,
    platform: str = "linux/amd64",
    clients: dict[str, RegistryClient] | None = None,
) -> AppendResult:
    """Push ``base`` + ``layers`` as a new image in ``target_repo`` (``HOST/REPO``), uploading
    only the blobs the target lacks; returns ``HOST/REPO@sha256:...``.

    The new config is reproducible (fixed creation time), so the same base and layers always
    give the same digest. The base manifest's media type (OCI or Docker v2) is kept."""
    clients = clients if clients is not None else {}
    base_ref = ImageRef.parse(base)
    target = ImageRef.parse(target_repo.rstrip("/") + ":unused")

    def client(host: str) -> RegistryClient:
        if host not in clients:
            clients[host] = RegistryClient(host)
        return clients[host]

    src, dst = client(base_ref.host), client(target.host)
    manifest, media, _ = src.get_manifest(base_ref, platform)
    config = json.loads(src.get_blob(base_ref.repository, manifest["config"]["digest"]))
    docker_types = media == DOCKER_MANIFEST
    layer_type = DOCKER_LAYER if docker_types else OCI_LAYER
    same_host = base_ref.host == target.host

    def fetch(digest: str) -> Callable[[], bytes]:
        return lambda: src.get_blob(base_ref.repository, digest)

    for blob in manifest["layers"]:
        dst.ensure_blob(
            target.repository,
            blob["digest"],
            fetch(blob["digest"]),
            from_repo=base_ref.repository if same_host else None,
            on_progress=on_progress,
            what=f"base {blob['digest'][7:19]}",
        )
    for i, layer in enumerate(layers):
        dst.ensure_blob(
            target.repository,
            layer.digest,
            layer.path,
            on_progress=on_progress,
            what=(history or [])[i] if history and i < len(history) else "layer",
        )

    cfg = dict(config)
    rootfs = dict(cfg.get("rootfs", {"type": "layers", "diff_ids": []}))
    rootfs["diff_ids"] = [*rootfs.get("diff_ids", []), *(lay.diff_id for lay in layers)]
    cfg["rootfs"] = rootfs
    inner = dict(cfg.get("config") or {})
    work = working_dir_for(cfg)
    inner["WorkingDir"] = work
    inner["Labels"] = {**(inner.get("Labels") or {}), **(labels or {})}
    cfg["config"] = inner
    cfg["created"] = FIXED_CREATED
    cfg["history"] = [
        *cfg.get("history", []),
        *(
            {"created": FIXED_CREATED, "created_by": f"torchx_nb: {h}"}
            for h in (history or ["layer"] * len(layers))
        ),
    ]
    cfg_bytes = json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    cfg_digest = "sha256:" + hashlib.sha256(cfg_bytes).hexdigest()
    dst.ensure_blob(target.repository, cfg_digest, cfg_bytes, what="config")

    new_manifest = {
        "schemaVersion": 2,
        "mediaType": media,
        "config": {
            "mediaType": DOCKER_CONFIG if docker_types else OCI_CONFIG,
            "digest": cfg_digest,
            "size": len(cfg_bytes),
        },
        "layers": [
            *manifest["layers"],
            *({"mediaType": layer_type, "digest": lay.digest, "size": lay.size} for lay in layers),
        ],
    }
    body = json.dumps(new_manifest, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    dst.put_manifest(target.repository, digest, body, media)
    return AppendResult(f"{target.host}/{target.repository}@{digest}", digest, dst.stats, work)
