"""The Google clients (Batch, Cloud Logging, Storage), made on first use over REST, and their errors in one line."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from torchx_nb.schedulers.gcp_batch.constants import (
    BATCH_ENDPOINT_ENV,
    LOGGING_ENDPOINT_ENV,
    SCOPES,
)
from torchx_nb.specs.api import (
    TorchxNbError,
)
from torchx_nb.specs.exceptions import GcpError as GcpError
from torchx_nb.specs.exceptions import GcpUnreachable


def storage_client(credentials: Any = None) -> Any:
    """google-cloud-storage's client: anonymous against an emulator (``STORAGE_EMULATOR_HOST``),
    else with ``credentials`` (default: Application Default Credentials)."""
    from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client.create_anonymous_client()
    return storage.Client(project=default_project(), credentials=credentials)


def default_project() -> str | None:
    """The project from the environment, without any network call: ``GOOGLE_CLOUD_PROJECT`` (or
    ``GCLOUD_PROJECT``, ``CLOUDSDK_CORE_PROJECT``), the credentials file's ``project_id``, then
    gcloud's active configuration."""
    import configparser
    import json
    from pathlib import Path

    for var in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    gcloud = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    for creds in (
        os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"),
        str(gcloud / "application_default_credentials.json"),
    ):
        if not creds:
            continue
        try:
            info = json.loads(Path(creds).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):
            project = info.get("project_id") or info.get("quota_project_id")
            if project:
                return str(project)
    try:
        active = (gcloud / "active_config").read_text().strip() or "default"
    except OSError:
        active = "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(gcloud / "configurations" / f"config_{active}")
    except configparser.Error:
        return None
    return parser.get("core", "project", fallback=None) or None


def _api_message(e: BaseException) -> str:
    """The API's own words: over REST google.api_core prefixes them with the method and URL."""
    message = str(getattr(e, "message", None) or e)
    message = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", message)
    return " ".join(message.split())


def gcp_error(e: BaseException, what: str, endpoint: str = "") -> TorchxNbError:
    """One line for the usual GCP failures: no or refused credentials, denied, unreachable."""
    if isinstance(e, TorchxNbError):
        return e
    name = type(e).__name__
    if name == "DefaultCredentialsError":
        return GcpError(
            f"{what}: no GCP credentials; run `gcloud auth application-default login`, or set"
            " GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
        )
    if name == "RefreshError":
        return GcpError(
            f"{what}: GCP refused the credentials ({_api_message(e)}); run `gcloud auth"
            " application-default login` again or check GOOGLE_APPLICATION_CREDENTIALS"
        )
    if name in ("TransportError", "ConnectionError", "ConnectTimeout", "ReadTimeout"):
        where = endpoint or "Google's API"
        return GcpUnreachable(
            f"{what}: cannot reach {where} ({_api_message(e)[:200]}); check the network"
            f" (and {BATCH_ENDPOINT_ENV} / {LOGGING_ENDPOINT_ENV} if set)"
        )
    # gRPC names, then what the same HTTP status is called over REST
    if name in ("Unauthenticated", "Unauthorized"):
        return GcpError(
            f"{what}: GCP refused the credentials ({_api_message(e)}); run `gcloud auth"
            " application-default login` again or check GOOGLE_APPLICATION_CREDENTIALS",
            name,
        )
    if name in ("PermissionDenied", "Forbidden"):
        return GcpError(
            f"{what}: permission denied: {_api_message(e)}; ask for the Batch Job Editor role"
            " (roles/batch.jobsEditor) on the project",
            name,
        )
    if name in ("TooManyRequests", "ResourceExhausted"):
        return GcpError(f"{what}: GCP quota exceeded even after retries; try again later", name)
    return GcpError(f"{what}: {name}: {_api_message(e)}", name)


def is_transient(e: BaseException) -> bool:
    """Worth retrying: throttled, unavailable, internal or timed out, or the connection broke."""
    return type(e).__name__ in (
        "ServiceUnavailable",
        "TooManyRequests",
        "ResourceExhausted",
        "InternalServerError",
        "GatewayTimeout",
        "DeadlineExceeded",
        "BadGateway",
        "ConnectionError",
        "TransportError",
    )


class GcpClients:
    """The Batch and Logging clients, created on first use unless injected; every call goes
    through ``call``: retried with exponential backoff on transient errors (google.api_core's
    Retry), anything else turned into one line."""

    def __init__(
        self,
        batch_client: Any = None,
        logging_client: Any = None,
        credentials: Any = None,
        retry_timeout: float = 30.0,
        timeout: float = 60.0,
    ) -> None:
        self._batch = batch_client
        self._logging = logging_client
        self._storage: Any = None
        self._credentials = credentials
        self.retry_timeout = retry_timeout
        self.timeout = timeout

    def credentials(self) -> Any:
        if self._credentials is None:
            try:
                import google.auth

                self._credentials, _ = google.auth.default(scopes=SCOPES)
            except Exception as e:
                raise gcp_error(e, "cannot find GCP credentials") from None
        return self._credentials

    @staticmethod
    def _options(env: str) -> dict[str, str] | None:
        endpoint = os.environ.get(env, "").strip()
        return {"api_endpoint": endpoint} if endpoint else None

    @property
    def batch(self) -> Any:
        if self._batch is None:
            from google.cloud import batch_v1

            self._batch = batch_v1.BatchServiceClient(
                transport="rest",
                credentials=self.credentials(),
                client_options=self._options(BATCH_ENDPOINT_ENV),
            )
        return self._batch

    @property
    def logging(self) -> Any:
        """google-cloud-logging's client over JSON/HTTP (its GAPIC layer has no REST
        transport)."""
        if self._logging is None:
            from google.cloud import logging as cloud_logging

            self._logging = cloud_logging.Client(
                project=default_project() or "-",
                credentials=self.credentials(),
                _use_grpc=False,
                client_options=self._options(LOGGING_ENDPOINT_ENV),
            )
        return self._logging

    @property
    def storage(self) -> Any:
        """google-cloud-storage's client (a trial's cancel mark goes in the job's bucket)."""
        if self._storage is None:
            self._storage = storage_client(self._credentials)
        return self._storage

    @staticmethod
    def endpoint(api: str) -> str:
        """Where calls to ``api`` (batch, logging or storage) go."""
        env = {
            "logging": LOGGING_ENDPOINT_ENV,
            "storage": "STORAGE_EMULATOR_HOST",
        }.get(api, BATCH_ENDPOINT_ENV)
        return os.environ.get(env, "").strip() or f"{api}.googleapis.com"

    def call(
        self, what: str, fn: Callable[..., Any], *args: Any, api: str = "batch", **kwargs: Any
    ) -> Any:
        """``fn(*args, **kwargs)`` with our backoff around it; a pager is read to the end inside
        the retry."""
        from google.api_core.retry import Retry

        owner = getattr(fn, "__self__", None)
        # a GAPIC method: no retry of its own (ours is around it) and our timeout
        extra = {"retry": None, "timeout": self.timeout} if hasattr(owner, "_transport") else {}

        def once() -> Any:
            result = fn(*args, **extra, **kwargs)
            return list(result) if hasattr(result, "pages") else result

        retry = Retry(
            predicate=is_transient,
            initial=0.25,
            multiplier=2.0,
            maximum=4.0,
            timeout=self.retry_timeout,
        )
        try:
            return retry(once)()
        except Exception as e:
            cause = e.__cause__ if type(e).__name__ == "RetryError" and e.__cause__ else e
            raise gcp_error(cause, what, self.endpoint(api)) from None
