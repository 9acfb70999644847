"""``local_docker``: one container per replica on a Docker daemon, with TorchX's names and labels.

describe(), list() and log_iter() read the daemon (containers are found by label), so they work
from any process. The daemon is the one ``DOCKER_HOST`` (or the default socket) points at."""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torchx_nb.apps.cell_runner.common import REPLICA_ID_ENV
from torchx_nb.lazy import LazyClient
from torchx_nb.schedulers import local_docker_preempt as preempting
from torchx_nb.schedulers.abilities import Preemptible, StoresOutputs, TakesTypedOptions
from torchx_nb.schedulers.api import (
    DescribeAppResponse,
    GivenOpts,
    ListAppResponse,
    LogQuery,
    Scheduler,
)
from torchx_nb.schedulers.cancellers import canceller
from torchx_nb.schedulers.devices import get_device_mounts
from torchx_nb.schedulers.ids import make_unique
from torchx_nb.schedulers.local_docker_attempts import (
    ATTEMPT_ENV,
    LABEL_APP_ID,
    LABEL_ATTEMPT,
    attempt_of,
    attempts_of,
    newest,
    preemptions,
)
from torchx_nb.schedulers.local_docker_logs import docker_time, timed_lines
from torchx_nb.schedulers.local_docker_request import (
    DockerContainer as DockerContainer,
)
from torchx_nb.schedulers.local_docker_request import (
    DockerJob as DockerJob,
)
from torchx_nb.schedulers.local_docker_request import (
    container_name as container_name,
)
from torchx_nb.schedulers.local_docker_request import (
    format_job,
    role_from_label,
    role_label,
)
from torchx_nb.schedulers.logs import on_tail_stop
from torchx_nb.schedulers.outputs import (
    cancel_mark,
    checkpoint_env,
    checkpoint_url,
    mark_cancelled,
    marked_ending,
    output_env,
)
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    BindMount,
    DeviceMount,
    ReplicaStatus,
    Role,
    RoleStatus,
    TorchxNbError,
    VolumeMount,
    is_terminal,
    macros,
)
from torchx_nb.specs.exceptions import NotPreemptible
from torchx_nb.specs.log_line import Stream
from torchx_nb.specs.preemption import not_running, preempting_already
from torchx_nb.specs.structured_opts import PreemptionOpts, StructuredOpts
from torchx_nb.version import __version__
from torchx_nb.workspace import WorkspaceMixin, WorkspaceOpts
from torchx_nb.workspace.daemon import docker_client

LABEL_VERSION = "torchx.pytorch.org/version"
LABEL_ROLE_NAME = "torchx.pytorch.org/role-name"
LABEL_REPLICA_ID = "torchx.pytorch.org/replica-id"
LABEL_SPEC = "torchx-nb/role"
RANK0_ENV = "TORCHX_RANK0_HOST"
CONTAINER_OUTPUTS = "/torchx-nb/outputs"
DEFAULT_NETWORK = "torchx"

_STATES = {
    "created": AppState.SUBMITTED,
    "restarting": AppState.PENDING,
    "running": AppState.RUNNING,
    "paused": AppState.PENDING,
    "removing": AppState.PENDING,
    "dead": AppState.FAILED,
}


def _app_state(states: list[AppState]) -> AppState:
    """The app's state from its replicas': the first still running, else how they ended."""
    live = [s for s in states if not is_terminal(s)]
    if live:
        return live[0]
    if all(s == AppState.SUCCEEDED for s in states):
        return AppState.SUCCEEDED
    if AppState.CANCELLED in states:
        return AppState.CANCELLED
    return AppState.FAILED


@dataclass(kw_only=True)
class _LocalDockerFields(StructuredOpts):
    copy_env: list[str] | None = None
    """host environment variables to copy into the containers (glob patterns, e.g. FOO_*)"""

    env: dict[str, str] | None = None
    """environment variables set in every container (applied after copy_env)"""

    privileged: bool = False
    """run the containers privileged"""

    network: str = DEFAULT_NETWORK
    """docker network: 'torchx' (a bridge created on demand, containers reach each other by
    name), 'host' or 'none'"""


@dataclass(kw_only=True)
class LocalDockerOpts(WorkspaceOpts, PreemptionOpts, _LocalDockerFields):
    """local_docker's options, then the preemption limit (``torchx-nb preempt``), then the
    workspace's."""


class LocalDockerScheduler(
    TakesTypedOptions, WorkspaceMixin, StoresOutputs, Preemptible, Scheduler[LocalDockerOpts]
):
    """Runs each replica as a container on the local Docker daemon; a workspace is patched onto
    the image locally (no push needed)."""

    is_local = True
    pushes_image = False
    preempt_grace = 10.0  # docker stop's default, as for a cancel

    def __init__(self, session_name: str, docker_client: Any = None) -> None:
        super().__init__("local_docker", session_name)
        self._client = docker_client

    client = LazyClient(lambda self: docker_client())

    def output_url(self, app_id: str, request: DockerJob) -> str | None:
        """The host folder every container of the app writes at ``CONTAINER_OUTPUTS``."""
        return f"file://{request.outputs}"

    def _validate(self, app: AppDef, scheduler: str, cfg: LocalDockerOpts | None = None) -> None:
        """Resources are optional on local_docker: NULL_RESOURCE means no limits."""

    def _submit_dryrun(self, app: AppDef, cfg: LocalDockerOpts) -> AppDryRunInfo[DockerJob]:
        from torchx_nb.paths import data_dir

        app_id = make_unique(app.name)
        network = cfg.network
        outputs = str(data_dir() / "local_docker" / app_id / "outputs")
        job = DockerJob(app_id=app_id, network=network, outputs=outputs)
        rank0 = "localhost" if network == "host" else container_name(app_id, app.roles[0].name, 0)
        patterns = cfg.copy_env or []
        copied = {
            k: v for k, v in os.environ.items() if any(fnmatch.fnmatch(k, p) for p in patterns)
        }
        extra_env = dict(cfg.env or {})
        for role in app.roles:
            for i in range(role.num_replicas):
                values = macros.Values(
                    img_root="", app_id=app_id, replica_id=str(i), rank0_env=RANK0_ENV
                )
                r = values.apply(role)
                name = container_name(app_id, role.name, i)
                env = {
                    **output_env(CONTAINER_OUTPUTS, None),
                    # a checkpoint store in the outputs: a preemption's rerun restores it
                    **checkpoint_env(
                        f"file://{checkpoint_url(CONTAINER_OUTPUTS)}",
                        attempt_var=ATTEMPT_ENV,  # each rank of an attempt reads the same
                        max_retries=r.max_retries,
                        grace=self.preempt_grace,
                        reclaims_named=True,  # a preemption's rerun names the attempt it stopped
                    ),
                    ATTEMPT_ENV: "1",  # a preemption's rerun says 2, 3… (``rerun``)
                    REPLICA_ID_ENV: str(i),  # each rank's own checkpoint folder
                    **copied,
                    **r.env,
                    **extra_env,
                    RANK0_ENV: rank0,
                }
                kwargs: dict[str, Any] = {
                    "name": name,
                    "environment": env,
                    "labels": {
                        LABEL_VERSION: __version__,
                        LABEL_APP_ID: app_id,
                        LABEL_ROLE_NAME: role.name,
                        LABEL_REPLICA_ID: str(i),
                        LABEL_SPEC: role_label(role),
                        LABEL_ATTEMPT: "1",
                    },
                    "privileged": cfg.privileged,
                    "network": network,
                    "init": True,
                }
                if network not in ("host", "none"):
                    kwargs["hostname"] = name
                self._resources(r, kwargs)
                kwargs.setdefault("mounts", []).append(
                    {
                        "Target": CONTAINER_OUTPUTS,
                        "Source": outputs,
                        "Type": "bind",
                        "ReadOnly": False,
                    }
                )
                if r.max_retries > 0:
                    kwargs["restart_policy"] = {
                        "Name": "on-failure",
                        "MaximumRetryCount": r.max_retries,
                    }
                job.containers.append(
                    DockerContainer(image=r.image, command=[r.entrypoint, *r.args], kwargs=kwargs)
                )
        return AppDryRunInfo(job, format_job)

    @staticmethod
    def _resources(role: Role, kwargs: dict[str, Any]) -> None:
        res = role.resource
        if res.memMB > 0:
            kwargs["mem_limit"] = f"{res.memMB}m"
            kwargs["shm_size"] = f"{res.memMB}m"
        if res.cpu > 0:
            kwargs["nano_cpus"] = int(res.cpu * 1e9)
        if res.gpu > 0:
            kwargs["device_requests"] = [
                {"Driver": "", "Count": res.gpu, "Capabilities": [["compute", "utility"]]}
            ]
        mounts: list[dict[str, Any]] = []
        devices: list[str] = []
        for m in [*role.mounts, *get_device_mounts(res.devices)]:
            if isinstance(m, BindMount):
                mounts.append(
                    {
                        "Target": m.dst_path,
                        "Source": m.src_path,
                        "Type": "bind",
                        "ReadOnly": m.read_only,
                    }
                )
            elif isinstance(m, VolumeMount):
                mounts.append(
                    {
                        "Target": m.dst_path,
                        "Source": m.src,
                        "Type": "volume",
                        "ReadOnly": m.read_only,
                    }
                )
            elif isinstance(m, DeviceMount):
                devices.append(f"{m.src_path}:{m.dst_path}:{m.permissions}")
        if mounts:
            kwargs["mounts"] = mounts
        if devices:
            kwargs["devices"] = devices

    def _ensure_network(self, name: str) -> None:
        if name in ("host", "none", "bridge"):
            return
        import docker

        try:
            self.client.networks.get(name)
        except docker.errors.NotFound:
            try:
                self.client.networks.create(name, driver="bridge", check_duplicate=True)
            except docker.errors.APIError as e:
                if "already exists" not in str(e):
                    raise TorchxNbError(
                        f"cannot create docker network {name!r}: {e.explanation or e};"
                        " use -cfg network=host"
                    ) from None

    def _ensure_image(self, image: str) -> None:
        import docker

        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            try:
                self.client.images.pull(image)
            except docker.errors.APIError as e:
                raise TorchxNbError(
                    f"image {image!r} is not on this Docker daemon and cannot be pulled"
                    f" ({e.explanation or e}); build or pull it first"
                ) from None

    def schedule(self, dryrun_info: AppDryRunInfo[DockerJob]) -> str:
        from docker.types import DeviceRequest, Mount

        from torchx_nb.paths import state_dir

        job = dryrun_info.request
        # the container's user may not be ours: its output folder is open to it, while the
        # app's folder around it (0700) keeps everyone else out
        os.chmod(state_dir("local_docker", job.app_id, "outputs"), 0o777)
        self._ensure_network(job.network)
        for image in {c.image for c in job.containers}:
            self._ensure_image(image)
        for c in job.containers:
            kwargs = dict(c.kwargs)
            network = kwargs.pop("network")
            kwargs["network_mode" if network in ("host", "none") else "network"] = network
            if "mounts" in kwargs:
                kwargs["mounts"] = [
                    Mount(
                        target=m["Target"],
                        source=m["Source"],
                        type=m["Type"],
                        read_only=m["ReadOnly"],
                    )
                    for m in kwargs["mounts"]
                ]
            if "device_requests" in kwargs:
                kwargs["device_requests"] = [
                    DeviceRequest(count=d["Count"], capabilities=d["Capabilities"])
                    for d in kwargs["device_requests"]
                ]
            self.client.containers.run(c.image, c.command, detach=True, **kwargs)
        return job.app_id

    def _containers(self, app_id: str | None = None) -> list[Any]:
        label = f"{LABEL_APP_ID}={app_id}" if app_id else LABEL_APP_ID
        return list(self.client.containers.list(all=True, filters={"label": label}))

    def _container_state(self, c: Any) -> AppState:
        """Exited containers: 0 → SUCCEEDED; 143/137 (not an OOM kill) after a stop or kill
        sent to it — torchx_nb's cancel (its mark), ``docker stop``/``docker kill`` (the
        daemon's event log) — → CANCELLED; else FAILED: a program that exited 137 itself, or
        whose process the kernel killed, was stopped by nobody."""
        status = c.status
        if status == "exited":
            state = c.attrs.get("State", {})
            code = state.get("ExitCode", 1)
            if code == 0:
                return AppState.SUCCEEDED
            if code in (137, 143) and not state.get("OOMKilled") and self._was_stopped(c):
                return AppState.CANCELLED
            return AppState.FAILED
        return _STATES.get(status, AppState.UNKNOWN)

    def _was_stopped(self, c: Any) -> bool:
        """Whether a stop or kill was sent to container ``c`` while it ran: torchx_nb's cancel
        mark, or a ``kill`` event in the daemon's event log (which keeps its last events
        only: a stop found once is kept beside the job store, so the answer never changes)."""
        app_id = c.labels.get(LABEL_APP_ID, "")
        if cancel_mark("local_docker", app_id).exists():
            return True
        seen = cancel_mark("local_docker", f"stopped_{c.id}")
        if seen.exists():
            return True
        import math
        import time

        info = c.attrs.get("State", {})
        start, end = docker_time(info.get("StartedAt")), docker_time(info.get("FinishedAt"))
        if start is None or end is None:
            return True  # no times to look between: as before, a 137/143 is a stop
        try:
            events = self.client.events(
                since=int(start),
                until=math.ceil(min(end + 1, time.time())),
                filters={"container": c.id, "event": "kill"},
                decode=True,
            )
            killed = any(True for _ in events)
        except Exception:
            return True  # the daemon cannot tell: as before
        if killed:
            from torchx_nb.paths import private_dir, write_private

            private_dir(seen.parent)
            write_private(seen, "")
        return killed

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        said = preempting.read_mark(app_id)  # before the containers: they may be stopping
        every = self._containers(app_id)
        if not every:
            return None
        containers = newest(every)  # each replica's newest attempt
        roles: dict[str, Role] = {}
        statuses: dict[str, list[ReplicaStatus]] = {}
        states: list[AppState] = []
        failures: list[str] = []
        started: list[float | None] = []
        ended: list[float | None] = []
        for c in sorted(
            containers,
            key=lambda c: (
                c.labels.get(LABEL_ROLE_NAME, ""),
                int(c.labels.get(LABEL_REPLICA_ID, 0)),
            ),
        ):
            role_name = c.labels.get(LABEL_ROLE_NAME, "")
            replica = int(c.labels.get(LABEL_REPLICA_ID, 0))
            state = self._container_state(c)
            states.append(state)
            info = c.attrs.get("State", {})
            code = info.get("ExitCode") if is_terminal(state) else None
            oom = bool(info.get("OOMKilled")) and state == AppState.FAILED
            if state in (AppState.FAILED, AppState.CANCELLED):
                failures.append(
                    f"{role_name}/{replica} "
                    + ("ran out of memory (OOMKilled)" if oom else f"exited with code {code}")
                )
            started.append(docker_time(info.get("StartedAt")))
            ended.append(docker_time(info.get("FinishedAt")) if is_terminal(state) else None)
            statuses.setdefault(role_name, []).append(
                ReplicaStatus(replica, state, role_name, c.name, exit_code=code, oom=oom)
            )
            if role_name not in roles:
                spec = role_from_label(c.labels.get(LABEL_SPEC, ""))
                if spec:
                    roles[role_name] = spec
        app_state = _app_state(states)
        resp = DescribeAppResponse(
            app_id=app_id,
            state=app_state,
            num_restarts=max(attempt_of(c) for c in containers) - 1,
            preemptions=preemptions(
                every, lambda c, key: docker_time(c.attrs.get("State", {}).get(key))
            ),
            roles=list(roles.values()),
            roles_statuses=[RoleStatus(r, reps) for r, reps in statuses.items()],
            started=min((t for t in started if t), default=None),
            ended=max((t for t in ended if t), default=None) if is_terminal(app_state) else None,
        )
        if failures:
            resp.msg = "; ".join(failures)
        if app_state == AppState.CANCELLED:
            codes = [r.exit_code for reps in statuses.values() for r in reps]
            ending = docker_cancel_ending(app_id, codes)
            resp.msg = f"it {ending}"
            for reps in statuses.values():
                for rep in reps:
                    if rep.state == AppState.CANCELLED:
                        rep.ending = ending
        preempting.during(app_id, said, resp)
        return resp

    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        seen: dict[str, list[AppState]] = {}
        marks = preempting.marks()  # before the containers, as describe
        for c in newest_per_app(self._containers()):
            seen.setdefault(c.labels[LABEL_APP_ID], []).append(self._container_state(c))
        out = []
        for app_id, states in seen.items():
            state = preempting.state_during(app_id, marks.get(app_id), _app_state(states))
            out.append(ListAppResponse(app_id=app_id, state=state, name=app_id.rsplit("-", 1)[0]))
        return out

    def _cancel_existing(self, app_id: str) -> None:
        """Stop every container of the app (SIGTERM, then SIGKILL after 10 s), in parallel,
        after leaving a mark saying who asked (Docker keeps no who)."""
        mark_cancelled("local_docker", app_id, canceller())
        threads = [
            threading.Thread(target=c.stop, kwargs={"timeout": 10}, daemon=True)
            for c in self._containers(app_id)
            if c.status in ("running", "restarting", "created", "paused")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Lines of one container's log, optionally between ``since`` and ``until``, each a
        ``LogLine`` with the time the daemon received it (asked with ``timestamps``)."""
        matches = attempts_of(self._containers(q.app_id), q.role, q.k)
        if not matches:
            raise ValueError(f"app {q.app_id!r} has no replica {q.role}/{q.k}")
        *earlier, container = matches  # a preempted replica: its attempts' logs in order
        opts = {
            "stdout": q.streams != Stream.STDERR,
            "stderr": q.streams != Stream.STDOUT,
            "since": q.since,
            "until": q.until,
            "stream": True,  # one chunk per message, so each message's time is found
            "timestamps": True,
        }
        logs = [c.logs(**opts, follow=False) for c in earlier]
        logs.append(container.logs(**opts, follow=q.tail))
        if q.tail:
            on_tail_stop(logs[-1].close)
        return timed_lines(logs)

    def preempt(self, app_id: str, grace: float | None = None) -> None:
        """Preempt the running app as a reclaimed spot machine would: every running replica's
        container is stopped (SIGTERM, SIGKILL after ``grace`` seconds, 10 by default) and a
        new one runs the next attempt (``local_docker_attempts``), by a worker of its own
        (``local_docker_preempt``) that carries on if this process is interrupted; returns
        once they run. One preemption at a time."""
        said = preempting.read_mark(app_id)
        containers = self._containers(app_id)
        if not containers:
            raise NotPreemptible(f"local_docker has no app {app_id!r} to preempt")
        cancelled = cancel_mark("local_docker", app_id).exists()
        if said is not None and not said.get("failed") and not cancelled:
            preempting.take_over(app_id)  # its worker died midway: another does the rest
            raise preempting_already(app_id)
        current = newest(containers)
        if (
            said is not None
            or cancelled
            or not any(c.status in ("running", "restarting") for c in current)
        ):
            raise not_running(app_id)
        attempt = max(attempt_of(c) for c in current)
        preempting.start(app_id, attempt, 10.0 if grace is None else grace, canceller())
        preempting.wait(app_id)


def newest_per_app(containers: list[Any]) -> list[Any]:
    """Each app's replicas' newest attempts."""
    by_app: dict[str, list[Any]] = {}
    for c in containers:
        by_app.setdefault(c.labels.get(LABEL_APP_ID, ""), []).append(c)
    return [c for group in by_app.values() for c in newest(group)]


def create_scheduler(session_name: str, docker_client: Any = None) -> LocalDockerScheduler:
    return LocalDockerScheduler(session_name, docker_client=docker_client)


def docker_cancel_ending(app_id: str, codes: list[int | None]) -> str:
    """Who stopped a CANCELLED app (its containers ended by SIGTERM/SIGKILL): torchx_nb's
    cancel (its mark says for whom), else a signal from outside torchx_nb."""
    said = marked_ending("local_docker", app_id)
    if said:
        return said
    name = "SIGKILL" if 137 in codes else "SIGTERM"
    return f"was stopped by {name} from outside torchx_nb (docker stop or kill, or the host)"
