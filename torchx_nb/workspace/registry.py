"""A daemonless client for the OCI distribution API: read a base image's manifest, upload only
the blobs a repository lacks, and write a new config and manifest. This is how a workspace is
patched onto an image where no Docker daemon runs (SageMaker Studio, CI runners).

Built on ``requests`` rather than oras-py: oras-py always sends manifests as OCI (a Docker v2
base must keep its media type), and has no cross-repository blob mount. Where its credentials
come from is ``registry_auth``; the new config and manifest are written by ``image_config``."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchx_nb.specs.exceptions import RegistryError as RegistryError
from torchx_nb.specs.exceptions import RegistryUnreachable
from torchx_nb.workspace.registry_auth import (
    Credentials,
    docker_credentials,
    ecr_credentials,
    google_credentials,
)

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
            raise RegistryUnreachable(
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
