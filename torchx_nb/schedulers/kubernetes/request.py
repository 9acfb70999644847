"""The request: an app as a Volcano job or an Indexed Job (pod templates, resources, volumes, tolerations, labels), local images pushed first, and the ids it answers to."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchx_nb.schedulers.kubernetes.constants import (
    _NAME_RE,
    INDEX_ANNOTATION,
    ITYPE,
    LABEL_APP_NAME,
    LABEL_INSTANCE,
    LABEL_KUBE_APP_NAME,
    LABEL_ORGANIZATION,
    LABEL_REPLICA_ID,
    LABEL_ROLE_INDEX,
    LABEL_ROLE_NAME,
    LABEL_VERSION,
    ORGANIZATION,
    RANK0_ENV,
    RESERVED_MEMMB,
    RESERVED_MILLICPU,
)
from torchx_nb.schedulers.kubernetes.options import KubernetesOpts
from torchx_nb.schedulers.kubernetes.spot import ignore_disruptions, spot_choice, spot_placement
from torchx_nb.specs.api import (
    AppDef,
    BindMount,
    DeviceMount,
    InvalidRunConfigException,
    Resource,
    RetryPolicy,
    Role,
    TorchxNbError,
    VolumeMount,
    macros,
)
from torchx_nb.specs.exceptions import LocalImageWithoutRepo as LocalImageWithoutRepo
from torchx_nb.version import __version__


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
    notes: tuple[str, ...] = ()  # lines the dry run says above the request (spot)

    @property
    def name(self) -> str:
        return str(self.resource["metadata"]["name"])

    def __str__(self) -> str:
        return _fmt(self)


def _fmt(job: KubernetesJob) -> str:
    import yaml

    from torchx_nb.redact import redact

    docs = [job.resource] + ([job.service] if job.service else [])
    said = yaml.safe_dump_all(redact(docs), sort_keys=False)
    return "".join(f"# {note}\n" for note in job.notes) + said


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
    spot = spot_placement(spot_choice(cfg.spot), node_selector)
    node_selector.update(spot.get("nodeSelector") or {})
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
    tolerations += [t for t in spot.get("tolerations") or [] if t not in tolerations]
    if "affinity" in spot:
        spec["affinity"] = spot["affinity"]
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
    return _manifest("batch.volcano.sh/v1alpha1", "Job", app, name, spec)


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


def _manifest(
    api_version: str, kind: str, app: AppDef, name: str, spec: dict[str, Any]
) -> dict[str, Any]:
    """A Kubernetes object of the job ``name`` (named and labelled as the job) with ``spec``."""
    meta = {"name": name, "labels": _job_labels(app, name)}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


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
    job = _manifest(
        "batch/v1",
        "Job",
        app,
        name,
        {
            "completionMode": "Indexed",
            "completions": role.num_replicas,
            "parallelism": role.num_replicas,
            "backoffLimit": max(role.max_retries, 0) * role.num_replicas,
            # an evicted or reclaimed pod never spends backoffLimit (restartPolicy is Never)
            "podFailurePolicy": {"rules": [ignore_disruptions()]},
            "template": template,
        },
    )
    if cfg.priority_class:
        template["spec"]["priorityClassName"] = cfg.priority_class
    headless = {"clusterIP": "None", "selector": {LABEL_INSTANCE: name}}
    service = _manifest("v1", "Service", app, name, {**headless, "publishNotReadyAddresses": True})
    return job, service
