"""Where a registry's credentials come from: the docker config (its credential helpers, then
its ``auths``), ECR tokens (boto3) and Google access tokens (google-auth), each found without
asking the user; what was tried and why it failed is kept as a note for the error line."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
