"""``kubernetes``: an app becomes a Volcano job (TorchX's ``vcjob``: a task per replica) or, on
the many clusters without Volcano, a plain ``batch/v1`` Indexed Job with a headless Service for
rendezvous (``-cfg api=indexed``). With ``api=indexed`` a sweep's trials are one Indexed Job,
each completion index a trial ``NAMESPACE:NAME:INDEX``. Images are patched with the workspace
and pushed to ``image_repo``; logs come from the pod log API.

TorchX's names carry over: the request is a ``KubernetesJob`` (``resource``, ``images_to_push``),
the handle is ``kubernetes://SESSION/NAMESPACE:NAME``, and the options, labels, resources and
volumes are TorchX's. The ``kubernetes`` client is imported when first needed; credentials come
from the standard kubeconfig (``KUBECONFIG``, ``~/.kube/config``) or the in-cluster service
account, and an ``ApiClient`` can be injected."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from torchx_nb.schedulers.abilities import (
    DescribesMany,
    StoresOutputs,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import DescribeAppResponse, ListAppResponse, LogQuery, Scheduler
from torchx_nb.schedulers.ids import random_id
from torchx_nb.schedulers.kubernetes_pending import event_pending_reason, pod_pending_reason
from torchx_nb.schedulers.logs import on_tail_stop
from torchx_nb.schedulers.outputs import (
    REMOTE_OUTPUT_DIR,
    cancel_mark,
    mark_cancelled,
    output_env,
    upload_target,
)
from torchx_nb.specs.api import (
    NONE,
    AppDef,
    AppDryRunInfo,
    AppState,
    BindMount,
    DeviceMount,
    InvalidRunConfigException,
    ReplicaStatus,
    Resource,
    RetryPolicy,
    Role,
    RoleStatus,
    TorchxNbError,
    VolumeMount,
    is_terminal,
    macros,
)
from torchx_nb.specs.log_line import LogLine
from torchx_nb.specs.structured_opts import StructuredOpts
from torchx_nb.version import __version__
from torchx_nb.workspace import WorkspaceMixin, WorkspaceOpts

LABEL_VERSION = "torchx.pytorch.org/version"
LABEL_APP_NAME = "torchx.pytorch.org/app-name"
LABEL_ROLE_INDEX = "torchx.pytorch.org/role-index"
LABEL_ROLE_NAME = "torchx.pytorch.org/role-name"
LABEL_REPLICA_ID = "torchx.pytorch.org/replica-id"
LABEL_KUBE_APP_NAME = "app.kubernetes.io/name"
LABEL_ORGANIZATION = "app.kubernetes.io/managed-by"
LABEL_INSTANCE = "app.kubernetes.io/instance"
ORGANIZATION = "torchx.pytorch.org"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ITYPE = "node.kubernetes.io/instance-type"
RANK0_ENV = "TORCHX_RANK0_HOST"
VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
PODGROUP = ("scheduling.volcano.sh", "v1beta1", "podgroups")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # a Volcano pod's PodGroup
VOLCANO_QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")
RESERVED_MILLICPU = 100
RESERVED_MEMMB = 1024

VOLCANO_STATES = {
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Restarting": AppState.RUNNING,
    "Completing": AppState.RUNNING,
    "Aborting": AppState.RUNNING,
    "Terminating": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Terminated": AppState.FAILED,
    "Aborted": AppState.CANCELLED,
}
POD_STATES = {
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Succeeded": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Unknown": AppState.UNKNOWN,
}

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class KubernetesError(TorchxNbError):
    """A Kubernetes call failed in a way the user can fix."""


@dataclass
class KubernetesJob:
    """kubernetes' native request (TorchX's name and attributes): the ``resource`` to create
    and the images to push, plus what TorchX kept aside (the namespace, the API, and the
    headless Service an Indexed Job needs)."""

    images_to_push: dict[str, tuple[str, str]]
    resource: dict[str, Any]
    namespace: str = "default"
    api: str = "volcano"
    service: dict[str, Any] | None = None
    outputs: str | None = None  # where the pods upload $TORCHX_OUTPUT_DIR (output_path)

    @property
    def name(self) -> str:
        return str(self.resource["metadata"]["name"])

    def __str__(self) -> str:
        return _fmt(self)


def _fmt(job: KubernetesJob) -> str:
    import yaml

    from torchx_nb.redact import redact

    docs = [job.resource] + ([job.service] if job.service else [])
    return yaml.safe_dump_all(redact(docs), sort_keys=False)


def normalize(name: str) -> str:
    """A DNS-1123 label from ``name``: lowercase letters, digits and ``-``, other characters
    deleted as TorchX does (``worker_Pool`` is ``workerpool``)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "", name.lower()).strip("-")
    return cleaned[:63].rstrip("-") or "app"


def parse_app_id(app_id: str) -> tuple[str, str]:
    """``NAMESPACE:NAME`` → both parts, each checked (the id may come from anywhere)."""
    namespace, sep, name = app_id.partition(":")
    if not sep or not _NAME_RE.match(namespace) or not _NAME_RE.match(name):
        raise ValueError(f"not a kubernetes app id {app_id!r}: expected NAMESPACE:NAME")
    return namespace, name


def parse_trial_id(app_id: str) -> tuple[str, str, int | None]:
    """``NAMESPACE:NAME`` or a sweep trial's ``NAMESPACE:NAME:INDEX`` (a completion index of
    the sweep's Indexed Job) → namespace, name and the index (None for a whole job)."""
    head, sep, index = app_id.rpartition(":")
    if sep and head.count(":") == 1 and index.isdigit() and len(index) <= 6:
        return (*parse_app_id(head), int(index))
    return (*parse_app_id(app_id), None)


def _index_ranges(text: str | None) -> set[int]:
    """The indexes a Job status lists as ``completedIndexes``/``failedIndexes`` ("1,3-5")."""
    out: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _index_of(pod: dict[str, Any]) -> int:
    labels = pod["metadata"].get("labels") or {}
    raw = labels.get(LABEL_REPLICA_ID) or labels.get(INDEX_LABEL) or "0"
    return int(raw) if str(raw).isdigit() else 0


def _latest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


@dataclass
class _ArrayState:
    """What one describe round knows of a sweep's Indexed Job, read once for all its trials:
    the Job, the indexes that ended each way, and the pods of each index."""

    job: dict[str, Any]
    completed: set[int]
    failed: set[int]
    pods: dict[int, list[dict[str, Any]]]

    @classmethod
    def of(cls, job: dict[str, Any], pods: list[dict[str, Any]]) -> _ArrayState:
        status = job.get("status") or {}
        by_index: dict[int, list[dict[str, Any]]] = {}
        for pod in pods:
            by_index.setdefault(_index_of(pod), []).append(pod)
        return cls(
            job,
            _index_ranges(status.get("completedIndexes")),
            _index_ranges(status.get("failedIndexes")),
            by_index,
        )


def array_job(job: dict[str, Any], size: int) -> dict[str, Any]:
    """The one-replica Indexed Job ``job`` made into a sweep of ``size`` trials: a completion
    index per trial, all started at once, each failing on its own (``backoffLimitPerIndex``:
    a failed trial neither stops nor fails the others before they end), and a pod evicted
    through the API fails its index for good (``FailIndex`` on ``DisruptionTarget``): that is
    how one trial is cancelled. Each trial is replica 0 of its own run."""
    out = json.loads(json.dumps(job))
    spec = out["spec"]
    retries = int(spec.pop("backoffLimit", 0) or 0)
    spec.update(
        completions=size,
        parallelism=size,
        backoffLimitPerIndex=retries,
        podFailurePolicy={
            "rules": [
                {
                    "action": "FailIndex",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        },
    )
    pod = spec["template"]["spec"]
    pod.pop("subdomain", None)
    container = pod["containers"][0]
    container["env"] = [
        {"name": "TORCHX_REPLICA_ID", "value": "0"} if e["name"] == "TORCHX_REPLICA_ID" else e
        for e in container["env"]
        if e["name"] != RANK0_ENV
    ]
    return out


def _role_label(text: str) -> str:
    """A label value: at most 63 of ``[A-Za-z0-9_.-]``, starting and ending alphanumeric."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return cleaned or "x"


def resources(res: Resource) -> dict[str, Any]:
    """TorchX's requests and limits: the limit is what was asked, the request a little less so
    the pod fits beside the node's own daemons."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if res.cpu > 0:
        mcpu = int(res.cpu * 1000)
        limits["cpu"] = f"{mcpu}m"
        requests["cpu"] = f"{max(mcpu - RESERVED_MILLICPU, 0)}m"
    if res.memMB > 0:
        limits["memory"] = f"{int(res.memMB)}M"
        requests["memory"] = f"{max(int(res.memMB) - RESERVED_MEMMB, 0)}M"
    if res.gpu > 0:
        limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"] = str(res.gpu)
    for name, count in res.devices.items():
        limits[name] = str(count)
    return {"limits": limits, "requests": requests}


def _volumes(role: Role) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    privileged = False
    # a Resource's devices go in the limits only, where the device plugin assigns them (as in
    # TorchX): no hostPath of fixed device files, no privileged pod
    for i, m in enumerate(role.mounts):
        name = f"mount-{i}"
        if isinstance(m, BindMount):
            volumes.append({"name": name, "hostPath": {"path": m.src_path}})
            mounts.append({"name": name, "mountPath": m.dst_path, "readOnly": m.read_only})
        elif isinstance(m, VolumeMount):
            volumes.append(
                {
                    "name": name,
                    # as TorchX: read-only-ness is the volumeMount's
                    "persistentVolumeClaim": {"claimName": m.src},
                }
            )
            mounts.append({"name": name, "mountPath": m.dst_path, "readOnly": m.read_only})
        elif isinstance(m, DeviceMount):
            volumes.append({"name": name, "hostPath": {"path": m.src_path}})
            read_only = "w" not in m.permissions and "m" not in m.permissions
            mounts.append({"name": name, "mountPath": m.dst_path, "readOnly": read_only})
            privileged = True
    return volumes, mounts, privileged


def _tolerations(specs_: list[str]) -> list[dict[str, str]]:
    """``key=value:Effect``, ``key:Effect`` (exists) or ``key=value`` (any effect)."""
    out = []
    for spec in specs_:
        m = re.match(r"^([A-Za-z0-9./_-]+)(?:=([A-Za-z0-9._-]*))?(?::([A-Za-z]+))?$", spec)
        if m is None:
            raise InvalidRunConfigException(
                f"toleration {spec!r}: write KEY=VALUE:EFFECT, KEY:EFFECT or KEY=VALUE",
                "tolerations",
            )
        key, value, effect = m.groups()
        tol: dict[str, str] = {"key": key, "operator": "Equal" if value is not None else "Exists"}
        if value is not None:
            tol["value"] = value
        if effect:
            if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise InvalidRunConfigException(
                    f"toleration {spec!r}: the effect is NoSchedule, PreferNoSchedule or NoExecute",
                    "tolerations",
                )
            tol["effect"] = effect
        out.append(tol)
    return out


def pod_template(
    role: Role,
    name: str,
    labels: dict[str, str],
    cfg: KubernetesOpts,
    env_first: list[dict[str, Any]] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod template for one role (and one replica under Volcano), as TorchX builds it."""
    volumes, mounts, privileged = _volumes(role)
    container: dict[str, Any] = {
        "name": name,
        "image": role.image,
        "command": [role.entrypoint, *role.args],
        "env": [
            *(env_first or []),
            *({"name": k, "value": v} for k, v in {**(extra_env or {}), **role.env}.items()),
        ],
        "ports": [{"name": n, "containerPort": p} for n, p in role.port_map.items()],
        "resources": resources(role.resource),
        "volumeMounts": mounts,
    }
    if privileged:
        container["securityContext"] = {"privileged": True}
    node_selector: dict[str, str] = dict(cfg.node_selector or {})
    itype = role.resource.capabilities.get(ITYPE)
    if itype:
        node_selector[ITYPE] = str(itype)
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "Never",
        "volumes": volumes,
        "nodeSelector": node_selector,
    }
    if cfg.service_account:
        spec["serviceAccountName"] = cfg.service_account
    if cfg.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in cfg.image_pull_secrets]
    tolerations = _tolerations(cfg.tolerations or [])
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}, "labels": labels},
        "spec": spec,
    }


def _labels(app: AppDef, name: str, role_idx: int, role: Role, replica: str) -> dict[str, str]:
    return {
        LABEL_VERSION: __version__,
        LABEL_APP_NAME: _role_label(app.name),
        LABEL_ROLE_INDEX: str(role_idx),
        LABEL_ROLE_NAME: _role_label(role.name),
        LABEL_REPLICA_ID: replica,
        LABEL_KUBE_APP_NAME: _role_label(app.name),
        LABEL_ORGANIZATION: ORGANIZATION,
        LABEL_INSTANCE: name,
    }


def volcano_resource(
    app: AppDef, name: str, cfg: KubernetesOpts, extra_env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """TorchX's vcjob: a task per replica, ``svc``/``env`` plugins, retry policies."""
    first = normalize(app.roles[0].name).upper().replace("-", "_")
    tasks = []
    for role_idx, role in enumerate(app.roles):
        for i in range(role.num_replicas):
            rank0 = role_idx == 0 and i == 0
            values = macros.Values(
                img_root="",
                app_id=name,
                replica_id=str(i),
                rank0_env=RANK0_ENV if rank0 else f"VC_{first}_0_HOSTS",
            )
            r = values.apply(role)
            if rank0:
                r.env = {**r.env, RANK0_ENV: "localhost"}
            task_name = normalize(f"{role.name}-{i}")
            labels = _labels(app, name, role_idx, role, str(i))
            task: dict[str, Any] = {
                "replicas": 1,
                "name": task_name,
                "template": pod_template(r, task_name, labels, cfg, extra_env=extra_env),
            }
            if role.max_retries > 0:
                task["maxRetry"] = role.max_retries
                # as TorchX: a REPLICA-policy role restarts its own pod only (no job policy)
                task["policies"] = (
                    []
                    if role.retry_policy == RetryPolicy.REPLICA
                    else [
                        {"event": "PodEvicted", "action": "RestartJob"},
                        {"event": "PodFailed", "action": "RestartJob"},
                    ]
                )
            if role.min_replicas is not None:
                task["minAvailable"] = 1 if i < role.min_replicas else 0
            tasks.append(task)
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": cfg.queue or "",
        "tasks": tasks,
        "maxRetry": min(r.max_retries for r in app.roles),
        "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
    }
    if cfg.priority_class:
        spec["priorityClassName"] = cfg.priority_class
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": _job_labels(app, name)},
        "spec": spec,
    }


class LocalImageWithoutRepo(InvalidRunConfigException, KeyError):
    """A local image and no ``image_repo`` to push it to: a ``KeyError`` too, as TorchX raises
    there, so ``except KeyError`` still catches it; its message reads unquoted."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def local_images(app: AppDef, image_repo: str | None) -> tuple[AppDef, dict[str, tuple[str, str]]]:
    """As TorchX: a role image that is a local build (``sha256:HASH``, the Docker daemon's id)
    becomes ``IMAGE_REPO:HASH``, to be pushed there at submit (a pod can never pull a local
    id); without ``image_repo`` that is one line naming the fix."""
    images: dict[str, tuple[str, str]] = {}
    roles = []
    for role in app.roles:
        if role.image.startswith("sha256:"):
            if not image_repo:
                raise LocalImageWithoutRepo(
                    f"role {role.name!r} runs the local image {role.image[:19]}…, which no pod can"
                    " pull: pass -cfg image_repo=HOST/REPO to push it there",
                    "image_repo",
                )
            tag = role.image.removeprefix("sha256:")
            images[role.image] = (image_repo, tag)
            role = dataclasses.replace(role, image=f"{image_repo}:{tag}")
        roles.append(role)
    return dataclasses.replace(app, roles=roles), images


def push_local_images(images: Mapping[str, tuple[str, str]]) -> None:
    """Tag each local image and push it to its repository (the Docker daemon's)."""
    from torchx_nb.workspace.daemon import docker_client

    client = docker_client()
    for local, (repo, tag) in images.items():
        try:
            client.images.get(local).tag(repo, tag)
            for event in client.images.push(repo, tag, stream=True, decode=True):
                if "error" in event:
                    raise TorchxNbError(f"push of {local[:19]}… to {repo} failed: {event['error']}")
        except TorchxNbError:
            raise
        except Exception as e:
            raise TorchxNbError(f"cannot push {local[:19]}… to {repo}: {e}") from None


def _job_labels(app: AppDef, name: str) -> dict[str, str]:
    return {
        LABEL_VERSION: __version__,
        LABEL_APP_NAME: _role_label(app.name),
        LABEL_ORGANIZATION: ORGANIZATION,
        LABEL_INSTANCE: name,
    }


def indexed_resources(
    app: AppDef, name: str, cfg: KubernetesOpts, extra_env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``batch/v1`` Indexed Job (a pod per replica, ``replica_id`` from the completion index)
    and the headless Service that gives pod 0 the stable name ``NAME-0.NAME``."""
    role = app.roles[0]
    rank0 = f"{name}-0.{name}"
    values = macros.Values(
        img_root="", app_id=name, replica_id="$(TORCHX_REPLICA_ID)", rank0_env=RANK0_ENV
    )
    r = values.apply(role)
    r.env = {**r.env, RANK0_ENV: rank0}
    index = {
        "name": "TORCHX_REPLICA_ID",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
    }
    labels = _labels(app, name, 0, role, "")
    del labels[LABEL_REPLICA_ID]  # the completion index labels each pod
    template = pod_template(
        r, normalize(role.name), labels, cfg, env_first=[index], extra_env=extra_env
    )
    template["spec"]["subdomain"] = name
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": _job_labels(app, name)},
        "spec": {
            "completionMode": "Indexed",
            "completions": role.num_replicas,
            "parallelism": role.num_replicas,
            "backoffLimit": max(role.max_retries, 0) * role.num_replicas,
            "template": template,
        },
    }
    if cfg.priority_class:
        template["spec"]["priorityClassName"] = cfg.priority_class
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": _job_labels(app, name)},
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_INSTANCE: name},
            "publishNotReadyAddresses": True,
        },
    }
    return job, service


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
        return KubernetesError(
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


@dataclass(kw_only=True)
class _KubernetesFields(StructuredOpts):
    namespace: str = "default"
    """Kubernetes namespace to schedule job in"""

    queue: str | None = None
    """Volcano queue to schedule job in (api=volcano)"""

    service_account: str | None = None
    """the service account name to set on the pod specs"""

    priority_class: str | None = None
    """the name of the PriorityClass to set on the job specs"""

    api: str = "volcano"
    """volcano (a vcjob, TorchX's) or indexed (a batch/v1 Indexed Job and a headless Service:
    clusters without Volcano)"""

    image_pull_secrets: list[str] | None = None
    """secrets for pulling the image"""

    node_selector: dict[str, str] | None = None
    """node labels the pods must match"""

    tolerations: list[str] | None = None
    """taints tolerated: KEY=VALUE:EFFECT or KEY:EFFECT"""

    output_path: str | None = None
    """s3://BUCKET/PREFIX or gs://BUCKET/PREFIX: each job's $TORCHX_OUTPUT_DIR (a cell's
    result, its files) is uploaded to PREFIX/JOB_NAME/ at its end (with boto3 or
    google-cloud-storage from the image)"""


@dataclass(kw_only=True)
class KubernetesOpts(WorkspaceOpts, _KubernetesFields):
    """kubernetes' options (TorchX's, then ours), then the workspace's."""


class KubernetesScheduler(
    TakesTypedOptions[KubernetesOpts],
    WorkspaceMixin,
    DescribesMany,
    StoresOutputs,
    SubmitsArrays,
    Scheduler[KubernetesOpts],
):
    """Volcano jobs or Indexed Jobs; describes many apps with one list per namespace. With
    ``api=indexed`` a sweep's trials are the completion indexes of one Indexed Job."""

    opts_type = KubernetesOpts
    array_index_env = "JOB_COMPLETION_INDEX"

    def __init__(self, session_name: str, client: Any = None) -> None:
        super().__init__("kubernetes", session_name)
        self.kube = _Kube(client)
        self._no_volcano: set[str] = set()
        self._checked: set[tuple[str, str]] = set()

    def output_url(self, app_id: str, request: KubernetesJob) -> str | None:
        return request.outputs

    def can_array(self, app: AppDef, cfg: Mapping[str, Any]) -> bool:
        """Indexed Jobs only: a Volcano job has no way to stop one of its tasks, so under
        ``api=volcano`` each trial is a job of its own, in the queue the user chose."""
        opts = self.typed(cfg, partial=True)
        return super().can_array(app, cfg) and (opts.api or "volcano") == "indexed"

    def array_request(
        self, info: AppDryRunInfo[KubernetesJob], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[KubernetesJob]:
        """One Indexed Job of ``size`` completion indexes (``array_job``), no Service: a
        trial has one replica and needs no rendezvous name."""
        req = info.request
        if req.api != "indexed":
            raise KubernetesError("a sweep is one Indexed Job only with -cfg api=indexed")
        job = array_job(req.resource, size)
        return AppDryRunInfo(dataclasses.replace(req, resource=job, service=None), _fmt)

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """``NAMESPACE:NAME:INDEX``: the completion indexes of the Indexed Job."""
        return [f"{app_id}:{i}" for i in range(size)]

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """Suspend the Indexed Job (``spec.suspend``): the Job controller deletes its running
        pods and starts no more, and indexes that ended keep their end (the Job and its record
        stay, where deleting it would lose them)."""
        namespace, name = parse_app_id(array_id)
        for trial_id in trial_ids:
            mark_cancelled("kubernetes", trial_id)
        call(
            f"cannot suspend {array_id}",
            self.kube.batch.patch_namespaced_job,
            name,
            namespace,
            {"spec": {"suspend": True}},
        )
        return True

    def _validate(self, app: AppDef, scheduler: str, cfg: KubernetesOpts | None = None) -> None:
        super()._validate(app, scheduler, cfg)
        cfg = self.typed(cfg or {})
        api = cfg.api or "volcano"
        if api not in ("volcano", "indexed"):
            raise InvalidRunConfigException(f"api {api!r}: use volcano or indexed", "api")
        if api == "volcano" and not cfg.queue:
            raise InvalidRunConfigException(
                "Volcano jobs need a queue: pass -cfg queue=NAME (see `kubectl get queues`), or"
                " -cfg api=indexed on a cluster without Volcano",
                "queue",
            )
        if api == "indexed" and len(app.roles) > 1:
            raise InvalidRunConfigException(
                f"an Indexed Job has one pod template, and this app has {len(app.roles)} roles:"
                " use -cfg api=volcano or merge the roles",
                "roles",
            )
        namespace = cfg.namespace or "default"
        if not _NAME_RE.match(namespace):
            raise InvalidRunConfigException(f"{namespace!r} is not a namespace name", "namespace")

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: KubernetesOpts) -> None:
        """Every check the request makes, before an image is built (the request itself is
        built once, by the dry run)."""
        cfg = self.typed(cfg)
        self._validate(app, scheduler, cfg)
        _tolerations(cfg.tolerations or [])

    def _submit_dryrun(self, app: AppDef, cfg: KubernetesOpts) -> AppDryRunInfo[KubernetesJob]:
        name = normalize(f"{normalize(app.name)[:40]}-{random_id()}")
        api = cfg.api or "volcano"
        namespace = cfg.namespace or "default"
        if api == "volcano" and not cfg.queue:
            raise InvalidRunConfigException(
                "Volcano jobs need a queue: pass -cfg queue=NAME (see `kubectl get queues`), or"
                " -cfg api=indexed",
                "queue",
            )
        app, images = local_images(app, cfg.image_repo)
        outputs = upload_target(cfg.output_path, name, ("s3", "gs"))
        env = output_env(REMOTE_OUTPUT_DIR, outputs) if outputs else {}
        if api == "indexed":
            job, service = indexed_resources(app, name, cfg, env)
            req = KubernetesJob(images, job, namespace, api, service, outputs)
        else:
            req = KubernetesJob(images, volcano_resource(app, name, cfg, env), namespace, api)
            req.outputs = outputs
        return AppDryRunInfo(req, _fmt)

    def image_opts(self, cfg: Mapping[str, Any], build: bool) -> Mapping[str, Any]:
        """The namespace (and queue) are checked before an image is built and pushed."""
        if build:
            opts = self.typed(cfg)
            queue = (opts.queue or "") if (opts.api or "volcano") == "volcano" else ""
            self._check_target(opts.namespace or "default", queue)
        return cfg

    def _check_target(self, namespace: str, queue: str) -> None:
        """The namespace (and the Volcano queue) exist; checked once per scheduler, so a
        submission that built an image does not ask again when it is sent."""
        if (namespace, queue) in self._checked:
            return
        _must_exist(
            lambda: self.kube.core.read_namespace(namespace),
            f"namespace {namespace!r} does not exist: create it (kubectl create namespace"
            f" {namespace}) or pass -cfg namespace=...",
            f"cannot read namespace {namespace!r}",
        )
        if queue:
            _must_exist(
                lambda: self.kube.custom.get_cluster_custom_object(*VOLCANO_QUEUES, queue),
                f"no Volcano queue {queue!r} (or no Volcano on this cluster): pick one from"
                " `kubectl get queues`, or pass -cfg api=indexed",
                f"cannot read Volcano queue {queue!r}",
            )
        self._checked.add((namespace, queue))

    def schedule(self, dryrun_info: AppDryRunInfo[KubernetesJob]) -> str:
        req = dryrun_info.request
        queue = str(req.resource["spec"].get("queue") or "") if req.api == "volcano" else ""
        self._check_target(req.namespace, queue)
        if req.images_to_push:
            push_local_images(req.images_to_push)
        what = f"cannot create {req.namespace}/{req.name}"
        if req.api == "indexed":
            if req.service:
                call(what, self.kube.core.create_namespaced_service, req.namespace, req.service)
            call(what, self.kube.batch.create_namespaced_job, req.namespace, req.resource)
        else:
            call(
                what,
                self.kube.custom.create_namespaced_custom_object,
                *VOLCANO[:2],
                req.namespace,
                VOLCANO[2],
                req.resource,
            )
        return f"{req.namespace}:{req.name}"

    # -- reading

    def _pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._list(
            f"cannot list the pods of {namespace}",
            self.kube.core.list_namespaced_pod,
            namespace,
            selector,
        )

    def _list(
        self, what: str, fn: Any, *args: Any, selector: str = "label_selector"
    ) -> list[dict[str, Any]]:
        """Every page of a list call (``limit``/``continue``), as plain dicts; the last of
        ``args`` is the ``selector`` (labels, or fields)."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {
                selector: args[-1],
                "limit": 500,
                "_preload_content": False,
            }
            if token:
                kwargs["_continue"] = token
            resp = call(what, fn, *args[:-1], **kwargs)
            body = json.loads(resp.data)
            items.extend(body.get("items", []))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _vcjobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        if namespace in self._no_volcano:
            return []
        try:
            return self._list(
                f"cannot list the Volcano jobs of {namespace}",
                self.kube.custom.list_namespaced_custom_object,
                *VOLCANO[:2],
                namespace,
                VOLCANO[2],
                selector,
            )
        except KubernetesError as e:
            if "(HTTP 404)" in str(e):  # no Volcano CRD on this cluster
                self._no_volcano.add(namespace)
                return []
            raise

    def _jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._list(
            f"cannot list the jobs of {namespace}",
            self.kube.batch.list_namespaced_job,
            namespace,
            selector,
        )

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self.describe_many([app_id]).get(app_id)

    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """One list each of Volcano jobs, Jobs and pods per namespace (ours, by label)."""
        out: dict[str, DescribeAppResponse | None] = dict.fromkeys(app_ids)
        by_ns: dict[str, dict[str, list[tuple[str, int | None]]]] = {}
        for app_id in app_ids:
            namespace, name, index = parse_trial_id(app_id)
            by_ns.setdefault(namespace, {}).setdefault(name, []).append((app_id, index))
        for namespace, names in by_ns.items():
            selector = (
                f"{LABEL_ORGANIZATION}={ORGANIZATION},{LABEL_INSTANCE}={next(iter(names))}"
                if len(names) == 1
                else f"{LABEL_ORGANIZATION}={ORGANIZATION}"
            )
            jobs = {j["metadata"]["name"]: j for j in self._vcjobs(namespace, selector)}
            jobs.update({j["metadata"]["name"]: j for j in self._jobs(namespace, selector)})
            pods: dict[str, list[dict[str, Any]]] = {}
            if any(n in jobs for n in names):
                for pod in self._pods(namespace, selector):
                    owner = (pod["metadata"].get("labels") or {}).get(LABEL_INSTANCE, "")
                    pods.setdefault(owner, []).append(pod)
            for name, ids in names.items():
                job = jobs.get(name)
                array = None
                if job is not None and any(i is not None for _, i in ids):
                    array = _ArrayState.of(job, pods.get(name, []))
                for app_id, index in ids:
                    if array is not None and index is not None:
                        out[app_id] = self._trial_response(app_id, index, array)
                    else:
                        out[app_id] = self._read(app_id, job, pods.get(name, []))
            self._explain_waiting(namespace, names, out, pods)
        return out

    def _explain_waiting(
        self,
        namespace: str,
        names: dict[str, list[tuple[str, int | None]]],
        out: dict[str, DescribeAppResponse | None],
        pods: dict[str, list[dict[str, Any]]],
    ) -> None:
        """Pending runs that nothing in their pods explains get the latest Warning event
        about their job or pods: one list of the namespace's warnings, only when needed."""
        silent = [
            (name, app_id)
            for name, ids in names.items()
            for app_id, _ in ids
            if (resp := out[app_id]) is not None and resp.state == AppState.PENDING and not resp.msg
        ]
        if not silent:
            return
        try:
            events = self._list(
                f"cannot list the events of {namespace}",
                self.kube.core.list_namespaced_event,
                namespace,
                "type=Warning",
                selector="field_selector",
            )
        except KubernetesError:  # a reason is extra: a user may not read events
            return
        for name, app_id in silent:
            said = event_pending_reason(events, name, pods.get(name, []))
            resp = out[app_id]
            if said and resp is not None:
                resp.msg = said

    def _read(
        self, app_id: str, job: dict[str, Any] | None, pods: list[dict[str, Any]]
    ) -> DescribeAppResponse | None:
        if job is not None:
            return self._response(app_id, job, pods)
        if cancel_mark("kubernetes", app_id).exists():
            return DescribeAppResponse(
                app_id=app_id,
                state=AppState.CANCELLED,
                msg="cancelled: the job and its pods were deleted",
            )
        return None

    def _trial_response(self, app_id: str, index: int, array: _ArrayState) -> DescribeAppResponse:
        """Completion index ``index`` of a sweep's Indexed Job, read as a run of its own: the
        Job's completed and failed indexes decide its end, its latest pod what it does now."""
        job = array.job
        mine = array.pods.get(index, [])
        pod = _latest(mine)
        phase = ((pod or {}).get("status") or {}).get("phase", "Pending")
        if index in array.completed:
            state, msg = AppState.SUCCEEDED, ""
        elif index in array.failed:
            state, msg = AppState.FAILED, ""
            if cancel_mark("kubernetes", app_id).exists():
                state, msg = AppState.CANCELLED, "cancelled: its pod was evicted"
        elif job["metadata"].get("deletionTimestamp"):
            state, msg = AppState.CANCELLED, "deleted"
        elif job["spec"].get("suspend"):
            state, msg = AppState.CANCELLED, "cancelled with its sweep's Job (suspended)"
        else:
            state, msg = (AppState.RUNNING if phase == "Running" else AppState.PENDING), ""
        as_one = {**job, "spec": {**job["spec"], "completions": 1}}
        relabelled = [
            {
                **p,
                "metadata": {
                    **p["metadata"],
                    "labels": {**(p["metadata"].get("labels") or {}), INDEX_LABEL: "0"},
                },
            }
            for p in ([pod] if pod else [])
        ]
        roles, statuses = self._roles(as_one, relabelled, False, state)
        failed = [
            r.structured_error_msg for s in statuses for r in s.replicas if r.structured_error_msg
        ]
        pstatus = (pod or {}).get("status") or {}
        ended = None
        if is_terminal(state):
            for cs in pstatus.get("containerStatuses") or []:
                ended = _epoch(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max(len(mine) - 1, 0),
            msg=msg or ("; ".join(failed) if state == AppState.FAILED else ""),
            roles=roles,
            roles_statuses=statuses,
            metadata=dict(job["metadata"].get("labels") or {}),
            started=_epoch(pstatus.get("startTime")),
            ended=ended,
        )

    def _response(
        self, app_id: str, job: dict[str, Any], pods: list[dict[str, Any]]
    ) -> DescribeAppResponse:
        volcano = job.get("apiVersion", "").startswith("batch.volcano.sh")
        state, msg, restarts = (
            self._volcano_state(job) if volcano else self._indexed_state(job, pods)
        )
        if job["metadata"].get("deletionTimestamp"):
            state, msg = AppState.CANCELLED, "deleted"
        roles, statuses = self._roles(job, pods, volcano, state)
        failed = [
            f"{r.role}-{r.id}: {r.structured_error_msg}"
            for s in statuses
            for r in s.replicas
            if r.state == AppState.FAILED and r.structured_error_msg
        ]
        if state == AppState.PENDING and volcano and not msg:
            msg = self._gang_reason(app_id, pods) or ""
        if state == AppState.PENDING and not msg:
            waiting = [
                r.structured_error_msg
                for s in statuses
                for r in s.replicas
                if r.state == AppState.PENDING and r.structured_error_msg not in ("", NONE)
            ]
            msg = waiting[0] if waiting else msg
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=restarts,
            msg="; ".join(failed) if failed and state == AppState.FAILED else msg,
            roles=roles,
            roles_statuses=statuses,
            metadata=dict(job["metadata"].get("labels") or {}),
            started=_epoch((job.get("status") or {}).get("startTime")),
            ended=_epoch((job.get("status") or {}).get("completionTime"))
            if is_terminal(state)
            else None,
        )

    def _gang_reason(self, app_id: str, pods: list[dict[str, Any]]) -> str | None:
        """Why Volcano holds the whole job: its PodGroup's Unschedulable condition (named by
        its pods' ``scheduling.k8s.io/group-name``), with the first pod's own reason."""
        names = sorted(
            str(group)
            for p in pods
            if (group := (p["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION))
        )
        if not names:
            return None
        namespace = app_id.split(":", 1)[0]
        try:
            group = self.kube.custom.get_namespaced_custom_object(
                *PODGROUP[:2], namespace, PODGROUP[2], names[0]
            )
        except Exception:  # a reason is extra: the job's state stands without it
            return None
        for cond in (group.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Unschedulable" and cond.get("status") == "True":
                said = " ".join(str(cond.get("message") or cond.get("reason") or "").split())
                first = next((r for p in pods if (r := pod_pending_reason(p))), None)
                return f"pending (gang unschedulable): {said}" + (
                    f"; {first.removeprefix('pending ')}" if first else ""
                )
        return None

    @staticmethod
    def _volcano_state(job: dict[str, Any]) -> tuple[AppState, str, int]:
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase", "Pending")
        msg = (status.get("state") or {}).get("message", "") or ""
        return VOLCANO_STATES.get(phase, AppState.UNKNOWN), msg, int(status.get("retryCount", 0))

    @staticmethod
    def _indexed_state(
        job: dict[str, Any], pods: list[dict[str, Any]]
    ) -> tuple[AppState, str, int]:
        status = job.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("status") != "True":
                continue
            if cond.get("type") == "Complete":
                return AppState.SUCCEEDED, cond.get("message", ""), int(status.get("failed", 0))
            if cond.get("type") == "Failed":
                text = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
                return AppState.FAILED, text, int(status.get("failed", 0))
        running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
        return (AppState.RUNNING if running else AppState.PENDING), "", int(status.get("failed", 0))

    def _roles(
        self, job: dict[str, Any], pods: list[dict[str, Any]], volcano: bool, state: AppState
    ) -> tuple[list[Role], list[RoleStatus]]:
        templates: list[tuple[str, int, dict[str, Any]]] = []
        if volcano:
            for task in job["spec"].get("tasks", []):
                labels = task["template"]["metadata"].get("labels") or {}
                templates.append(
                    (
                        labels.get(LABEL_ROLE_NAME, task["name"]),
                        int(labels.get(LABEL_REPLICA_ID, 0)),
                        task["template"],
                    )
                )
        else:
            template = job["spec"]["template"]
            labels = template["metadata"].get("labels") or {}
            for i in range(int(job["spec"].get("completions") or 1)):
                templates.append((labels.get(LABEL_ROLE_NAME, "node"), i, template))
        roles: dict[str, Role] = {}
        statuses: dict[str, list[ReplicaStatus]] = {}
        latest: dict[tuple[str, int], dict[str, Any]] = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            key = (labels.get(LABEL_ROLE_NAME, ""), _index_of(pod))
            have = latest.get(key)
            if have is None or pod["metadata"].get("creationTimestamp", "") >= have["metadata"].get(
                "creationTimestamp", ""
            ):
                latest[key] = pod
        default = AppState.PENDING if not is_terminal(state) else state
        for role_name, idx, template in templates:
            c = template["spec"]["containers"][0]
            if role_name not in roles:
                env = {e["name"]: e.get("value", "") for e in c.get("env", []) if "value" in e}
                roles[role_name] = Role(
                    name=role_name,
                    image=c.get("image", ""),
                    entrypoint=(c.get("command") or [""])[0],
                    args=list(c.get("command") or [])[1:],
                    num_replicas=0,
                    env=env,
                )
            roles[role_name].num_replicas += 1
            current = latest.get((role_name, idx))
            rstate, host, addr, exit_code, why = default, "(no pod yet)", None, None, ""
            if current is not None:
                pstatus = current.get("status") or {}
                rstate = POD_STATES.get(pstatus.get("phase", "Pending"), AppState.UNKNOWN)
                host = current["metadata"]["name"]  # what kubectl logs/describe take
                addr = pstatus.get("podIP")
                for cs in pstatus.get("containerStatuses") or []:
                    term = (cs.get("state") or {}).get("terminated")
                    if term:
                        exit_code = term.get("exitCode")
                        why = term.get("reason", "") or term.get("message", "")
            rep = ReplicaStatus(
                idx,
                rstate,
                role_name,
                host,
                hostaddr=addr,
                exit_code=exit_code,
                oom=why == "OOMKilled" and rstate == AppState.FAILED,
            )
            if rstate == AppState.FAILED:
                rep.structured_error_msg = f"FAILED (exit code {exit_code})" + (
                    f": {why}" if why else ""
                )
            elif rstate == AppState.PENDING and current is not None:
                rep.structured_error_msg = pod_pending_reason(current) or NONE
            statuses.setdefault(role_name, []).append(rep)
        return list(roles.values()), [RoleStatus(n, reps) for n, reps in statuses.items()]

    def list(self, cfg: KubernetesOpts | None = None) -> list[ListAppResponse]:
        """Our jobs (by label) in ``cfg.namespace`` (default ``default``), every page."""
        namespace = self.typed(cfg, partial=True).namespace or "default"
        selector = f"{LABEL_ORGANIZATION}={ORGANIZATION}"
        out = []
        for job in [*self._vcjobs(namespace, selector), *self._jobs(namespace, selector)]:
            name = job["metadata"]["name"]
            app_id = f"{namespace}:{name}"
            resp = self._response(app_id, job, [])
            out.append(
                ListAppResponse(
                    app_id=app_id,
                    state=resp.state,
                    name=(job["metadata"].get("labels") or {}).get(LABEL_APP_NAME, name),
                )
            )
        return out

    def _cancel_existing(self, app_id: str) -> None:
        """Delete the job with its pods (foreground propagation), and an Indexed Job's Service;
        a sweep trial's pod is evicted instead, which fails its index for good."""
        namespace, name, index = parse_trial_id(app_id)
        body = {"propagationPolicy": "Foreground"}
        what = f"cannot delete {app_id}"
        mark_cancelled("kubernetes", app_id)
        if index is not None:
            self._evict_trial(namespace, name, index)
            return
        if self._vcjobs(namespace, f"{LABEL_INSTANCE}={name}"):
            call(
                what,
                self.kube.custom.delete_namespaced_custom_object,
                *VOLCANO[:2],
                namespace,
                VOLCANO[2],
                name,
                body=body,
            )
            return
        call(what, self.kube.batch.delete_namespaced_job, name, namespace, body=body)
        try:
            self.kube.core.delete_namespaced_service(name, namespace)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                raise _kube_error(e, what) from None

    def _evict_trial(self, namespace: str, name: str, index: int, wait: float = 30.0) -> None:
        """Evict the pod of completion ``index``: the Job controller makes every index's pod at
        once (parallelism = completions), so a trial cancelled just after the submit waits for
        its pod to appear, a few seconds at most."""
        import time

        selector = f"{LABEL_INSTANCE}={name},{INDEX_LABEL}={index}"
        deadline = time.monotonic() + wait
        while True:
            pod = _latest(self._pods(namespace, selector))
            phase = ((pod or {}).get("status") or {}).get("phase")
            if pod is not None and phase in ("Succeeded", "Failed"):
                return
            if pod is not None:
                pod_name = pod["metadata"]["name"]
                eviction = {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": pod_name, "namespace": namespace},
                }
                call(
                    f"cannot evict pod {pod_name}",
                    self.kube.core.create_namespaced_pod_eviction,
                    pod_name,
                    namespace,
                    eviction,
                )
                return
            if time.monotonic() > deadline:
                raise KubernetesError(
                    f"trial {index} of {namespace}:{name} has no pod after {wait:.0f} s: cancel"
                    " again, or cancel the whole sweep"
                )
            time.sleep(0.5)

    #: why ``--streams`` cannot pick a stream here
    combined_only = "the pod log API gives one combined log"

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Replica ``k``'s pod log (its latest pod), followed while it runs with
        ``should_tail``."""
        namespace, name, index = parse_trial_id(q.app_id)
        desc = self.describe(q.app_id)
        if desc is None:
            raise ValueError(f"unknown app {q.app_id!r}")
        pods = self._pods(namespace, f"{LABEL_INSTANCE}={name}")
        label = _role_label(q.role)
        pod = _latest(
            [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get(LABEL_ROLE_NAME) == label
                and _index_of(p) == (q.k if index is None else index)
            ]
        )
        if pod is None:
            return iter(())
        return self._pod_lines(namespace, pod["metadata"]["name"], q.since, q.until, q.tail)

    def _pod_lines(
        self,
        namespace: str,
        pod: str,
        since: datetime | None,
        until: datetime | None,
        follow: bool,
    ) -> Iterator[str]:
        from torchx_nb.schedulers.logs import LineSplitter

        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False, "timestamps": True}
        if since:
            age = (datetime.now(timezone.utc) - since.astimezone(timezone.utc)).total_seconds()
            kwargs["since_seconds"] = max(int(age), 1)
        resp = call(
            f"cannot read the log of pod {pod}",
            self.kube.core.read_namespaced_pod_log,
            pod,
            namespace,
            **kwargs,
        )
        on_tail_stop(resp.close)
        lines = LineSplitter()
        try:
            for chunk in resp.stream(4096):
                for line in lines.feed(chunk):
                    out = _after_timestamp(line, since, until)
                    if out is not None:
                        yield out
            for line in lines.flush():
                out = _after_timestamp(line, since, until)
                if out is not None:
                    yield out if out.endswith("\n") else LogLine(out + "\n", LogLine.time_of(out))
        except Exception:
            if follow:
                return
            raise
        finally:
            resp.release_conn()


def _parse_time(text: str) -> datetime | None:
    """An RFC 3339 time as the API writes it (up to nanoseconds, ``Z``), in UTC."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if m is None:
        return None
    base, frac, zone = m.groups()
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{base}.{(frac or '0')[:6].ljust(6, '0')}{zone}")


def _after_timestamp(line: str, since: datetime | None, until: datetime | None) -> str | None:
    """The line without the time stamp the API put in front, or None outside the window."""
    stamp, sep, rest = line.partition(" ")
    when = _parse_time(stamp) if sep else None
    if when is None:
        return line
    if since and when < since.astimezone(timezone.utc):
        return None
    if until and when > until.astimezone(timezone.utc):
        return None
    return LogLine(rest, when.timestamp())


def _epoch(text: Any) -> float | None:
    when = _parse_time(str(text)) if text else None
    return when.timestamp() if when else None


def create_scheduler(session_name: str, client: Any = None, **kwargs: Any) -> KubernetesScheduler:
    return KubernetesScheduler(session_name, client=client)
