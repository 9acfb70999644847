"""The kubernetes client, made on first use from the kubeconfig (or in-cluster), and its errors in one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torchx_nb.specs.api import (
    TorchxNbError,
)
from torchx_nb.specs.exceptions import KubernetesError as KubernetesError
from torchx_nb.specs.exceptions import KubernetesUnreachable


def _kube_error(e: BaseException, what: str) -> TorchxNbError:
    """One line: the API server's own message for a refused call, or why it was not reached."""
    if isinstance(e, TorchxNbError):
        return e
    status = getattr(e, "status", None)
    body = getattr(e, "body", None)
    if status is not None and status != 0:
        message = ""
        try:
            message = str(json.loads(body or "{}").get("message", ""))
        except (ValueError, TypeError, AttributeError):
            message = ""
        message = " ".join((message or str(getattr(e, "reason", "")) or str(e)).split())
        if status == 403:
            return KubernetesError(f"{what}: forbidden: {message}")
        if status == 401:
            return KubernetesError(
                f"{what}: the API server refused the credentials ({message}); check your"
                " kubeconfig (kubectl config view)"
            )
        return KubernetesError(f"{what}: {message} (HTTP {status})")
    text = " ".join(str(e).split())
    if "MaxRetryError" in type(e).__name__ or "Connection" in text or "connect" in text:
        return KubernetesUnreachable(
            f"{what}: cannot reach the Kubernetes API server ({text[:200]}); check the cluster"
            " and your kubeconfig's server"
        )
    return KubernetesError(f"{what}: {type(e).__name__}: {text}")


@dataclass
class _Kube:
    """The ApiClient and the typed APIs over it, created on first use unless injected."""

    api_client: Any = None
    apis: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Any:
        if self.api_client is None:
            import os

            from kubernetes import client, config

            # a Configuration of our own, and KUBECONFIG read now: the client reads it once, at
            # import, into its global default
            conf = client.Configuration()
            path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
            try:
                config.load_kube_config(config_file=path, client_configuration=conf)
            except Exception as kube_error:
                try:
                    config.load_incluster_config(client_configuration=conf)
                except Exception:
                    raise KubernetesError(
                        "no Kubernetes credentials: no kubeconfig"
                        f" ({' '.join(str(kube_error).split())[:160]}) and not running in a"
                        " cluster; set KUBECONFIG or create ~/.kube/config"
                    ) from None
            self.api_client = client.ApiClient(configuration=conf)
        return self.api_client

    def api(self, name: str) -> Any:
        if name not in self.apis:
            from kubernetes import client

            self.apis[name] = getattr(client, name)(self.client())
        return self.apis[name]

    @property
    def core(self) -> Any:
        return self.api("CoreV1Api")

    @property
    def batch(self) -> Any:
        return self.api("BatchV1Api")

    @property
    def custom(self) -> Any:
        return self.api("CustomObjectsApi")


def _must_exist(read: Any, missing: str, what: str) -> None:
    """``read()``; a 404 becomes the one line ``missing``. A 403 passes: a user may be allowed
    to create jobs without being allowed to read namespaces or queues."""
    try:
        read()
    except Exception as e:
        status = getattr(e, "status", None)
        if status == 404:
            raise KubernetesError(missing) from None
        if status != 403:
            raise _kube_error(e, what) from None


def call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise _kube_error(e, what) from None
