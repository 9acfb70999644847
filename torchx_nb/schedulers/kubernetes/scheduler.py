"""``KubernetesScheduler``: submit, describe, cancel, list, logs and native arrays on Kubernetes (Volcano or Indexed Jobs)."""

from __future__ import annotations

from typing import Any

from torchx_nb.schedulers.abilities import (
    DescribesMany,
    StoresOutputs,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import DescribeAppResponse, GivenOpts, ListAppResponse, Scheduler
from torchx_nb.schedulers.cancellers import canceller
from torchx_nb.schedulers.ids import random_id
from torchx_nb.schedulers.kubernetes.arrays import KubeArrays
from torchx_nb.schedulers.kubernetes.client import (
    KubernetesError,
    _Kube,
    _kube_error,
    _must_exist,
    call,
)
from torchx_nb.schedulers.kubernetes.constants import (
    _NAME_RE,
    GROUP_ANNOTATION,
    LABEL_APP_NAME,
    LABEL_INSTANCE,
    LABEL_ORGANIZATION,
    ORGANIZATION,
    PODGROUP,
    VOLCANO,
    VOLCANO_QUEUES,
    VOLCANO_STATES,
)
from torchx_nb.schedulers.kubernetes.describe import (
    _ArrayState,
    _epoch,
)
from torchx_nb.schedulers.kubernetes.logs import KubeLogs
from torchx_nb.schedulers.kubernetes.options import KubernetesOpts
from torchx_nb.schedulers.kubernetes.pending import event_pending_reason, pod_pending_reason
from torchx_nb.schedulers.kubernetes.preempt import KubePreempts
from torchx_nb.schedulers.kubernetes.request import (
    KubernetesJob,
    _fmt,
    _tolerations,
    indexed_resources,
    local_images,
    normalize,
    parse_trial_id,
    push_local_images,
    volcano_resource,
)
from torchx_nb.schedulers.kubernetes.spot import (
    preemptions,
    spot_choice,
    spot_note,
    spot_placement,
)
from torchx_nb.schedulers.outputs import (
    REMOTE_OUTPUT_DIR,
    mark_cancelled,
    marked_ending,
    output_env,
    upload_target,
)
from torchx_nb.specs.api import (
    NONE,
    AppDef,
    AppDryRunInfo,
    AppState,
    InvalidRunConfigException,
    is_terminal,
)
from torchx_nb.workspace import WorkspaceMixin


class KubernetesScheduler(
    KubeArrays,
    KubePreempts,
    KubeLogs,
    TakesTypedOptions,
    WorkspaceMixin,
    DescribesMany,
    StoresOutputs,
    Scheduler[KubernetesOpts],
):
    """Volcano jobs or Indexed Jobs; describes many apps with one list per namespace. With
    ``api=indexed`` a sweep's trials are the completion indexes of one Indexed Job."""

    array_index_env = "JOB_COMPLETION_INDEX"

    def __init__(self, session_name: str, client: Any = None) -> None:
        super().__init__("kubernetes", session_name)
        self.kube = _Kube(client)
        self._checked: set[tuple[str, str]] = set()

    def output_url(self, app_id: str, request: KubernetesJob) -> str | None:
        return request.outputs

    def _validate(self, app: AppDef, scheduler: str, cfg: KubernetesOpts | None = None) -> None:
        super()._validate(app, scheduler, cfg)
        cfg = KubernetesOpts() if cfg is None else cfg  # TorchX's call has none: the defaults
        api = cfg.api
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
        namespace = cfg.namespace
        if not _NAME_RE.match(namespace):
            raise InvalidRunConfigException(f"{namespace!r} is not a namespace name", "namespace")

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: KubernetesOpts) -> None:
        """Every check the request makes, before an image is built (the request itself is
        built once, by the dry run)."""
        self._validate(app, scheduler, cfg)
        _tolerations(cfg.tolerations or [])
        spot_placement(spot_choice(cfg.spot), dict(cfg.node_selector or {}))

    def _submit_dryrun(self, app: AppDef, cfg: KubernetesOpts) -> AppDryRunInfo[KubernetesJob]:
        name = normalize(f"{normalize(app.name)[:40]}-{random_id()}")
        api = cfg.api
        namespace = cfg.namespace
        if api == "volcano" and not cfg.queue:
            raise InvalidRunConfigException(
                "Volcano jobs need a queue: pass -cfg queue=NAME (see `kubectl get queues`), or"
                " -cfg api=indexed",
                "queue",
            )
        app, images = local_images(app, cfg.image_repo)
        outputs = upload_target(cfg.output_path, name, ("s3", "gs"))
        env = output_env(REMOTE_OUTPUT_DIR, outputs) if outputs else {}
        note = spot_note(spot_choice(cfg.spot), api)
        if api == "indexed":
            job, service = indexed_resources(app, name, cfg, env)
            req = KubernetesJob(images, job, namespace, api, service, outputs)
        else:
            req = KubernetesJob(images, volcano_resource(app, name, cfg, env), namespace, api)
            req.outputs = outputs
        req.notes = (note,) if note else ()
        return AppDryRunInfo(req, _fmt)

    def image_opts(self, cfg: KubernetesOpts, build: bool) -> KubernetesOpts:
        """The namespace (and queue) are checked before an image is built and pushed."""
        if build:
            queue = (cfg.queue or "") if cfg.api == "volcano" else ""
            self._check_target(cfg.namespace, queue)
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
                    self._stop_cancelled_trials(namespace, array)
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
        said = marked_ending("kubernetes", app_id)
        if said:
            return DescribeAppResponse(
                app_id=app_id,
                state=AppState.CANCELLED,
                msg=f"it {said}: its Job and pods were deleted",
                preemptions=preemptions(app_id, []),
            )
        return None

    def _response(
        self, app_id: str, job: dict[str, Any], pods: list[dict[str, Any]]
    ) -> DescribeAppResponse:
        volcano = job.get("apiVersion", "").startswith("batch.volcano.sh")
        state, msg, restarts = (
            self._volcano_state(job) if volcano else self._indexed_state(job, pods)
        )
        if job["metadata"].get("deletionTimestamp") and not is_terminal(state):
            # a Job that had ended keeps its end while it is deleted (kubectl delete, a
            # cleanup policy): deleting it stops nothing, so nobody cancelled it
            state, msg = AppState.CANCELLED, _deleted_by(app_id)
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
            preemptions=[] if volcano else preemptions(app_id, pods),
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

    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        """Our jobs (by label) in the namespace given, else the option's default, every
        page."""
        namespace = str(self.given_opts(cfg).get("namespace", KubernetesOpts.namespace))
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
        a sweep trial's pod is marked cancelled instead (``_cancel_trial``), which fails its
        index for good."""
        namespace, name, index = parse_trial_id(app_id)
        body = {"propagationPolicy": "Foreground"}
        what = f"cannot delete {app_id}"
        if index is not None:  # marked by _cancel_trial, unless the trial has ended
            self._cancel_trial(namespace, name, index, app_id)
            return
        mark_cancelled("kubernetes", app_id, canceller())
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


def create_scheduler(session_name: str, client: Any = None, **kwargs: Any) -> KubernetesScheduler:
    return KubernetesScheduler(session_name, client=client)


def _deleted_by(app_id: str) -> str:
    """Why a Job being deleted ends: our cancel (its mark says by whom), else a deletion
    made outside torchx_nb."""
    said = marked_ending("kubernetes", app_id)
    if not said:
        return "its Job is being deleted outside torchx_nb (kubectl delete, or its owner)"
    return f"it {said}: its Job and pods are being deleted"
