"""A daemonless client for the OCI distribution API: read a base image's manifest, upload only
the blobs a repository lacks, and write a new config and manifest. This is how a workspace is
patched onto an image where no Docker daemon runs (SageMaker Studio, CI runners).

Built on ``requests`` rather than oras-py: oras-py always sends manifests as OCI (a Docker v2
base must keep its media type), and has no cross-repository blob mount."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchx_nb.specs.exceptions import RegistryError as RegistryError
from torchx_nb.workspace.layers import DOCKER_LAYER, OCI_LAYER, Layer

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
MANIFEST_TYPES = [OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST]
CHUNK = 8 * 1024 * 1024
FIXED_CREATED = "1970-01-01T00:00:00Z"

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ImageRef:
    """``host[:port]/repo[:tag][@digest]`` split into its parts."""

    host: str
    repository: str
    reference: str

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        """Parse a fully qualified reference; the registry host is required (nothing is
        assumed about a default registry)."""
        first, sep, rest = ref.partition("/")
        if not sep or not (("." in first) or (":" in first) or first == "localhost"):
            raise RegistryError(
                f"image {ref!r} names no registry host; the registry builder needs a full"
                " reference like HOST[:PORT]/REPO:TAG (or use -cfg builder=docker)"
            )
        if "@" in rest:
            repo, _, reference = rest.partition("@")
        else:
            repo, colon, tag = rest.rpartition(":")
            if not colon or "/" in tag:
                repo, reference = rest, "latest"
            else:
                reference = tag
        return cls(first, repo, reference)

    def __str__(self) -> str:
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.host}/{self.repository}{sep}{self.reference}"

    def with_reference(self, reference: str) -> ImageRef:
        return ImageRef(self.host, self.repository, reference)


def _docker_config() -> dict[str, Any]:
    cfg_dir = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker"))
    try:
        return dict(json.loads((cfg_dir / "config.json").read_text()))
    except (FileNotFoundError, ValueError):
        return {}


@dataclass
class Credentials:
    """Username/password for one registry host, and where they came from."""

    username: str
    password: str
    source: str


def docker_credentials(host: str) -> Credentials | None:
    """Credentials for ``host`` from the docker config: a credential helper (``credHelpers`` or
    ``credsStore``, run as ``docker-credential-NAME get``), else an ``auths`` entry."""
    cfg = _docker_config()
    helper = cfg.get("credHelpers", {}).get(host) or cfg.get("credsStore")
    if helper:
        try:
            out = subprocess.run(
                [f"docker-credential-{helper}", "get"],
                input=host,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            data = json.loads(out.stdout)
            return Credentials(data["Username"], data["Secret"], f"docker-credential-{helper}")
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
    for key, entry in cfg.get("auths", {}).items():
        if key.split("://")[-1].rstrip("/").split("/")[0] == host and entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return Credentials(user, password, "~/.docker/config.json")
    return None


ECR_HOSTS_ENV = "TORCHX_NB_ECR_HOSTS"


_ECR_HOST_RE = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$"
)


def ecr_region(host: str) -> str | None:
    """The AWS region named by an ECR registry host (``ACCOUNT.dkr.ecr.REGION.amazonaws.com``)."""
    m = _ECR_HOST_RE.match(host.split(":", 1)[0])
    return m.group("region") if m else None


def ecr_credentials(host: str, notes: list[str] | None = None) -> Credentials | None:
    """An ECR login from boto3's ``get_authorization_token`` in the registry's own region, when
    ECR says ``host`` is the account's registry (its ``proxyEndpoint``) or ``host`` is listed
    in ``TORCHX_NB_ECR_HOSTS`` (for VPC endpoints and other aliases). None without boto3 or AWS
    credentials; why is appended to ``notes``."""
    aliases = {h.strip() for h in os.environ.get(ECR_HOSTS_ENV, "").split(",") if h.strip()}
    region = ecr_region(host)
    if region is None and host not in aliases:
        return None
    try:
        import boto3
    except ImportError:
        if notes is not None:
            notes.append("ECR login needs boto3: pip install 'torchx_nb[aws_batch]'")
        return None
    try:
        client = boto3.client("ecr", region_name=region) if region else boto3.client("ecr")
        resp = client.get_authorization_token()
    except Exception as e:
        if notes is not None:
            notes.append(f"ECR login failed: {' '.join(str(e).split())}")
        return None
    aliases = {h.strip() for h in os.environ.get(ECR_HOSTS_ENV, "").split(",") if h.strip()}
    for data in resp.get("authorizationData", []):
        endpoint = str(data.get("proxyEndpoint", "")).split("://")[-1].rstrip("/")
        if endpoint == host or host in aliases:
            user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
            return Credentials(user, password, "ECR get_authorization_token")
    if notes is not None:
        notes.append(f"ECR gave no token for {host}")
    return None


GAR_HOSTS_ENV = "TORCHX_NB_GAR_HOSTS"
GOOGLE_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def is_google_registry(host: str) -> bool:
    """Artifact Registry (``LOCATION-docker.pkg.dev``), Container Registry (``gcr.io``), or a
    host listed in ``TORCHX_NB_GAR_HOSTS`` (private endpoints and other aliases)."""
    name = host.split(":", 1)[0]
    aliases = {h.strip() for h in os.environ.get(GAR_HOSTS_ENV, "").split(",") if h.strip()}
    return (
        name.endswith("-docker.pkg.dev")
        or name == "gcr.io"
        or name.endswith(".gcr.io")
        or host in aliases
    )


def google_credentials(host: str, notes: list[str] | None = None) -> Credentials | None:
    """An Artifact Registry login: google-auth's Application Default Credentials give an access
    token, sent as the password of ``oauth2accesstoken``. None when ``host`` is not Google's or
    no token could be had; why is appended to ``notes``."""
    if not is_google_registry(host):
        return None
    try:
        import google.auth
        import google.auth.transport.requests
    except ImportError:
        if notes is not None:
            notes.append(
                "Artifact Registry login needs google-auth: pip install 'torchx_nb[gcp_batch]'"
            )
        return None
    try:
        creds, _ = google.auth.default(scopes=GOOGLE_SCOPES)
        creds.refresh(google.auth.transport.requests.Request())
    except Exception as e:
        if notes is not None:
            notes.append(
                f"Artifact Registry login failed: {' '.join(str(e).split())[:300]}; run"
                " `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
            )
        return None
    return Credentials("oauth2accesstoken", str(creds.token), "google-auth access token")


def _is_local(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return name in ("localhost", "127.0.0.1", "[::1]") or name.startswith("127.")


@dataclass
class PushStats:
    """What a push cost: requests and bytes sent, blobs mounted or already present."""

    uploaded_bytes: int = 0
    uploaded_blobs: list[str] = field(default_factory=list)
    skipped_blobs: list[str] = field(default_factory=list)
    mounted_blobs: list[str] = field(default_factory=list)
    requests: int = 0


class RegistryClient:
    """One registry host, with basic or bearer-token auth negotiated on 401."""

    def __init__(
        self,
        host: str,
        credentials: Credentials | None = None,
        insecure: bool | None = None,
        session: Any = None,
    ) -> None:
        from torchx_nb import http_retry

        self.host = host
        self.scheme = "http" if (insecure if insecure is not None else _is_local(host)) else "https"
        self.session = session or http_retry.session()
        self._creds = credentials
        self._creds_loaded = credentials is not None
        self._tokens: dict[str, str] = {}
        self.auth_notes: list[str] = []
        self.stats = PushStats()

    @property
    def credentials(self) -> Credentials | None:
        if not self._creds_loaded:
            self._creds = (
                docker_credentials(self.host)
                or ecr_credentials(self.host, self.auth_notes)
                or google_credentials(self.host, self.auth_notes)
            )
            self._creds_loaded = True
        return self._creds

    def _url(self, path: str) -> str:
        return path if path.startswith("http") else f"{self.scheme}://{self.host}{path}"

    def request(self, method: str, path: str, scope: str = "", **kwargs: Any) -> Any:
        """Send a request, answering a 401 challenge once (basic, or a bearer token)."""
        import requests

        headers = dict(kwargs.pop("headers", {}))
        if scope in self._tokens:
            headers["Authorization"] = self._tokens[scope]
        try:
            self.stats.requests += 1
            resp = self.session.request(
                method, self._url(path), headers=headers, timeout=60, **kwargs
            )
            if resp.status_code == 401:
                auth = self._authenticate(resp.headers.get("WWW-Authenticate", ""), scope)
                if auth:
                    headers["Authorization"] = auth
                    if "data" in kwargs and hasattr(kwargs["data"], "seek"):
                        kwargs["data"].seek(0)
                    self.stats.requests += 1
                    resp = self.session.request(
                        method, self._url(path), headers=headers, timeout=60, **kwargs
                    )
        except requests.ConnectionError:
            raise RegistryError(
                f"registry {self.host} is unreachable ({self.scheme}); check the host and port"
                " of image_repo"
            ) from None
        if resp.status_code in (401, 403):
            tried = self.credentials.source if self.credentials else "no credentials"
            why = "".join(f"; {n}" for n in self.auth_notes)
            raise RegistryError(
                f"registry {self.host} refused {method} {path.split('?')[0]}"
                f" ({resp.status_code}; tried {tried}{why}); log in with `docker login"
                f" {self.host}` or add credentials to ~/.docker/config.json"
            )
        return resp

    def _authenticate(self, challenge: str, scope: str) -> str | None:
        creds = self.credentials
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if not creds:
                return None
            raw = f"{creds.username}:{creds.password}".encode()
            return "Basic " + base64.b64encode(raw).decode()
        if scheme.lower() != "bearer":
            return None
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        query = {"service": fields.get("service", "")}
        if scope or fields.get("scope"):
            query["scope"] = scope or fields["scope"]
        auth = (creds.username, creds.password) if creds else None
        resp = self.session.get(fields["realm"], params=query, auth=auth, timeout=60)
        if resp.status_code != 200:
            return None
        body = resp.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            return None
        self._tokens[scope] = f"Bearer {token}"
        return self._tokens[scope]

    @staticmethod
    def _scope(repo: str, push: bool = False) -> str:
        return f"repository:{repo}:{'pull,push' if push else 'pull'}"

    def get_manifest(
        self, ref: ImageRef, platform: str = "linux/amd64"
    ) -> tuple[dict[str, Any], str, str]:
        """(manifest, media type, digest); an index is resolved to ``platform``'s manifest."""
        resp = self.request(
            "GET",
            f"/v2/{ref.repository}/manifests/{ref.reference}",
            scope=self._scope(ref.repository),
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        if resp.status_code == 404:
            raise RegistryError(
                f"image {ref} not found in the registry (push the base image"
                " there first, or check its name and tag)"
            )
        if resp.status_code != 200:
            raise RegistryError(f"cannot read {ref}: HTTP {resp.status_code} {resp.text[:200]}")
        media = resp.headers.get("Content-Type", "").split(";")[0]
        body = resp.json()
        media = body.get("mediaType", media)
        if media in (OCI_INDEX, DOCKER_LIST):
            os_, _, arch = platform.partition("/")
            for m in body.get("manifests", []):
                p = m.get("platform", {})
                if p.get("os") == os_ and p.get("architecture") == arch:
                    return self.get_manifest(ref.with_reference(m["digest"]), platform)
            found = ", ".join(
                f"{m.get('platform', {}).get('os')}/{m.get('platform', {}).get('architecture')}"
                for m in body.get("manifests", [])
            )
            raise RegistryError(f"image {ref} has no {platform} variant (has: {found})")
        digest = (
            resp.headers.get("Docker-Content-Digest")
            or "sha256:" + hashlib.sha256(resp.content).hexdigest()
        )
        return body, media, digest

    def get_blob(self, repo: str, digest: str) -> bytes:
        resp = self.request("GET", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo))
        if resp.status_code != 200:
            raise RegistryError(f"cannot read blob {digest} of {repo}: HTTP {resp.status_code}")
        return bytes(resp.content)

    def manifest_exists(self, ref: ImageRef) -> bool:
        """Whether the registry has ``ref`` (one HEAD request)."""
        resp = self.request(
            "HEAD",
            f"/v2/{ref.repository}/manifests/{ref.reference}",
            scope=self._scope(ref.repository),
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        return bool(resp.status_code == 200)

    def blob_exists(self, repo: str, digest: str) -> bool:
        resp = self.request("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo, True))
        return bool(resp.status_code == 200)

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Ask the registry to link a blob from another repository; True when it did."""
        resp = self.request(
            "POST",
            f"/v2/{repo}/blobs/uploads/?mount={digest}&from={from_repo}",
            scope=self._scope(repo, True),
        )
        if resp.status_code == 201:
            return True
        if resp.status_code == 202 and resp.headers.get("Location"):
            self.request("DELETE", resp.headers["Location"], scope=self._scope(repo, True))
        return False

    def upload_blob(
        self,
        repo: str,
        digest: str,
        data: bytes | Path,
        on_progress: Progress | None = None,
        what: str = "",
    ) -> None:
        """Chunked upload (POST, PATCH…, PUT ?digest=), reporting progress per chunk."""
        total = len(data) if isinstance(data, bytes) else data.stat().st_size
        self._upload(repo, _chunks(data), digest, total, on_progress, what)

    def upload_stream(self, repo: str, chunks: Iterable[bytes], what: str = "") -> str:
        """Upload a blob whose bytes are still being made (PATCH as they come, PUT with the
        digest once they end); its digest."""
        return self._upload(repo, chunks, None, 0, None, what)

    def _upload(
        self,
        repo: str,
        chunks: Iterable[bytes],
        digest: str | None,
        total: int,
        on_progress: Progress | None,
        what: str,
    ) -> str:
        """POST, a PATCH per chunk, PUT with ``digest`` (computed from the chunks when it is
        None); an upload that fails midway is cancelled. The blob's digest."""
        scope = self._scope(repo, True)
        resp = self.request("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)
        if resp.status_code != 202:
            raise RegistryError(
                f"cannot start an upload to {self.host}/{repo}:"
                f" HTTP {resp.status_code} {resp.text[:200]}"
            )
        location = resp.headers["Location"]
        sha = hashlib.sha256() if digest is None else None
        done = 0
        try:
            for chunk in chunks:
                if sha is not None:
                    sha.update(chunk)
                resp = self.request(
                    "PATCH",
                    location,
                    scope=scope,
                    data=chunk,
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"{done}-{done + len(chunk) - 1}",
                    },
                )
                if resp.status_code != 202:
                    raise RegistryError(
                        f"upload of {what or digest or 'a layer'} to {self.host}/{repo} failed:"
                        f" HTTP {resp.status_code} {resp.text[:200]}"
                    )
                location = resp.headers.get("Location", location)
                done += len(chunk)
                self.stats.uploaded_bytes += len(chunk)
                if on_progress:
                    on_progress(done, total, what or (digest or "")[:19])
        except BaseException:
            with contextlib.suppress(Exception):
                self.request("DELETE", location, scope=scope)
            raise
        if sha is not None:
            digest = "sha256:" + sha.hexdigest()
        assert digest is not None
        sep = "&" if "?" in location else "?"
        resp = self.request(
            "PUT", f"{location}{sep}digest={digest}", scope=scope, headers={"Content-Length": "0"}
        )
        if resp.status_code != 201:
            raise RegistryError(
                f"upload of {what or digest} to {self.host}/{repo} was not"
                f" accepted: HTTP {resp.status_code} {resp.text[:200]}"
            )
        self.stats.uploaded_blobs.append(digest)
        return digest

    def ensure_blob(
        self,
        repo: str,
        digest: str,
        data: bytes | Path | Callable[[], bytes],
        from_repo: str | None = None,
        on_progress: Progress | None = None,
        what: str = "",
    ) -> None:
        """Make ``digest`` present in ``repo``: already there, mounted, or uploaded."""
        if self.blob_exists(repo, digest):
            self.stats.skipped_blobs.append(digest)
            return
        if from_repo and from_repo != repo and self.mount_blob(repo, digest, from_repo):
            self.stats.mounted_blobs.append(digest)
            return
        payload = data() if callable(data) else data
        self.upload_blob(repo, digest, payload, on_progress, what)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        resp = self.request(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            scope=self._scope(repo, True),
            data=body,
            headers={"Content-Type": media_type},
        )
        if resp.status_code not in (200, 201):
            raise RegistryError(
                f"{self.host}/{repo} refused the manifest:"
                f" HTTP {resp.status_code} {resp.text[:300]}"
            )
        return str(
            resp.headers.get("Docker-Content-Digest")
            or "sha256:" + hashlib.sha256(body).hexdigest()
        )


def _chunks(data: bytes | Path) -> Iterator[bytes]:
    if isinstance(data, bytes):
        for i in range(0, max(len(data), 1), CHUNK):
            yield data[i : i + CHUNK]
        return
    with open(data, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


_UPLOADS: dict[str, list[threading.Thread]] = {}
_UPLOADS_LOCK = threading.Lock()


def start_upload(
    image_repo: str, chunks: Iterable[bytes], clients: dict[str, RegistryClient] | None = None
) -> None:
    """Upload a blob still being made to ``image_repo`` (``HOST/REPO``) on a thread of its
    own; ``finish_uploads`` waits for it. An upload that fails (or a layer given up) is left
    to the push, which uploads whatever the registry lacks."""
    target = ImageRef.parse(image_repo.rstrip("/") + ":unused")
    client = (clients if clients is not None else {}).setdefault(
        target.host, RegistryClient(target.host)
    )

    def upload() -> None:
        with contextlib.suppress(Exception):
            client.upload_stream(target.repository, chunks, "environment")

    thread = threading.Thread(target=upload, name="torchx-nb-upload", daemon=True)
    with _UPLOADS_LOCK:
        _UPLOADS.setdefault(image_repo.rstrip("/"), []).append(thread)
    thread.start()


def finish_uploads(image_repo: str) -> None:
    """Wait for the uploads begun to ``image_repo``, from this thread or another."""
    with _UPLOADS_LOCK:
        threads = _UPLOADS.pop(image_repo.rstrip("/"), [])
    for thread in threads:
        thread.join()


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
