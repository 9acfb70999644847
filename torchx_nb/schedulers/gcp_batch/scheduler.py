"""``GcpBatchScheduler``: submit, describe, cancel, list, logs and native arrays on GCP Batch."""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from typing import Any

from torchx_nb.schedulers.abilities import (
    DescribesMany,
    StoresOutputs,
    SubmitsAgain,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import DescribeAppResponse, GivenOpts, ListAppResponse, Scheduler
from torchx_nb.schedulers.cancellers import canceller
from torchx_nb.schedulers.gcp_batch.arrays import GcpArrays
from torchx_nb.schedulers.gcp_batch.client import GcpClients, GcpError, default_project
from torchx_nb.schedulers.gcp_batch.constants import (
    _LOCATION_RE,
    _PROJECT_RE,
    ACTIVE_JOB_STATES,
    BAD_REQUEST,
    FIREWALL_SCRIPT,
    JOB_STATES,
    LABEL_APP_NAME,
    LABEL_USER,
    LABEL_VERSION,
    RANK0_ENV,
    TASK_GROUP,
    TASK_INDEX,
)
from torchx_nb.schedulers.gcp_batch.describe import (
    _by_index,
    _console_url,
    _counts,
    _role,
    _started,
    _ts,
    task_preemptions,
)
from torchx_nb.schedulers.gcp_batch.logs import GcpLogs
from torchx_nb.schedulers.gcp_batch.options import GcpBatchOpts, parse_duration
from torchx_nb.schedulers.gcp_batch.request import (
    GCPBatchJob,
    _Checked,
    _fmt,
    _label_key,
    _mounts,
    job_name,
    label_value,
    parse_trial_id,
    task_command,
)
from torchx_nb.schedulers.gcp_batch.spot import (
    TAKEN_IDS,
    again_job,
    budget_labels,
    check_labels,
    ended_preempted,
    follows,
    has_ledger,
    next_job_id,
    preemptible,
    provisioning,
    retries,
    task_failures,
    trial_job_id,
)
from torchx_nb.schedulers.gcp_reasons import waiting_reason
from torchx_nb.schedulers.outputs import (
    REMOTE_OUTPUT_DIR,
    checkpoint_env,
    checkpoint_url,
    mark_cancelled,
    marked_ending,
    output_env,
    upload_target,
)
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    InvalidRunConfigException,
    Resource,
    RoleStatus,
    is_terminal,
    macros,
)
from torchx_nb.specs.exceptions import TorchxNbError
from torchx_nb.specs.named_resources_gcp import machine_type_for
from torchx_nb.version import __version__
from torchx_nb.workspace import WorkspaceMixin


class GcpBatchScheduler(
    GcpLogs,
    GcpArrays,
    TakesTypedOptions,
    WorkspaceMixin,
    DescribesMany,
    StoresOutputs,
    SubmitsAgain,
    Scheduler[GcpBatchOpts],
):
    """One GCP Batch job per app; describes many jobs with one list call per location; a
    sweep's trials are the tasks of one job."""

    rank0_env = RANK0_ENV
    array_index_env = "BATCH_TASK_INDEX"
    throttles_arrays = True

    def __init__(
        self,
        session_name: str,
        batch_client: Any = None,
        logging_client: Any = None,
        credentials: Any = None,
        retry_timeout: float = 30.0,
    ) -> None:
        super().__init__("gcp_batch", session_name)
        self.gcp = GcpClients(batch_client, logging_client, credentials, retry_timeout)
        self._list_filter_ok = True
        self._locations: dict[str, set[str]] = {}

    def output_url(self, app_id: str, request: GCPBatchJob) -> str | None:
        return request.outputs

    def _validate(self, app: AppDef, scheduler: str, cfg: GcpBatchOpts | None = None) -> None:
        super()._validate(app, scheduler, cfg)
        if len(app.roles) > 1:
            names = ", ".join(r.name for r in app.roles)
            raise InvalidRunConfigException(
                f"GCP Batch runs one task group per job, and this app has {len(app.roles)} roles"
                f" ({names}): merge them into one role or submit one job per role",
                "roles",
            )

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: GcpBatchOpts) -> None:
        """Every check the request makes, before an image is built."""
        self._validate(app, scheduler, cfg)
        self._check(app, cfg)

    def _check(self, app: AppDef, cfg: GcpBatchOpts) -> _Checked:
        """The project, location, machine and limits the request will use, each checked."""
        project = self._project(cfg.project)
        location = cfg.location
        if not _LOCATION_RE.match(location):
            raise InvalidRunConfigException(
                f"{location!r} is not a GCP location (e.g. us-central1, europe-west4)", "location"
            )
        if len(app.roles) != 1:
            self._validate(app, "gcp_batch", cfg)
        res = app.roles[0].resource
        if res.memMB < 0:
            raise InvalidRunConfigException(
                "GCP Batch needs memory for the role: give it a resource (-h NAME, e.g."
                " gcp_a2-highgpu-1g, or --memMB)",
                "memMB",
            )
        check_labels([_label_key(str(k)) for k in [*app.metadata, *(cfg.labels or {})]])
        model = provisioning(cfg.spot, cfg.provisioning_model)
        if model not in ("STANDARD", "SPOT", "PREEMPTIBLE"):
            raise InvalidRunConfigException(
                f"provisioning_model {cfg.provisioning_model!r}: use standard or spot",
                "provisioning_model",
            )
        seconds = parse_duration(cfg.max_run_duration) if cfg.max_run_duration else None
        return _Checked(
            project, location, machine_type_for(res, cfg.machine_type or None), model, seconds
        )

    def image_opts(self, cfg: GcpBatchOpts, build: bool) -> GcpBatchOpts:
        """An unknown location is found before the image is built and pushed."""
        if build:
            self._check_location(self._project(cfg.project), cfg.location)
        return cfg

    def _project(self, given: Any) -> str:
        """The project given (the ``project`` option), else the environment's."""
        project = str(given or "") or default_project()
        if not project:
            raise InvalidRunConfigException(
                "no GCP project: pass -cfg project=ID, or set GOOGLE_CLOUD_PROJECT (or run"
                " `gcloud config set project ID`)",
                "project",
            )
        if not _PROJECT_RE.match(project):
            raise InvalidRunConfigException(
                f"{project!r} is not a GCP project id (lowercase letters, digits and -)",
                "project",
            )
        return project

    def _submit_dryrun(self, app: AppDef, cfg: GcpBatchOpts) -> AppDryRunInfo[GCPBatchJob]:
        from google.cloud import batch_v1
        from google.protobuf import duration_pb2

        checked = self._check(app, cfg)
        role = app.roles[0]
        name = job_name(app.name)
        values = macros.Values(img_root="", app_id=name, replica_id=TASK_INDEX, rank0_env=RANK0_ENV)
        r = values.apply(role)
        res = r.resource
        outputs = upload_target(cfg.output_path, name, ("gs",))
        ledger = (
            checkpoint_env(
                checkpoint_url(outputs),
                attempt_var="BATCH_TASK_RETRY_ATTEMPT",
                max_retries=max(role.max_retries, 0),
                max_preemptions=cfg.max_preemptions,
            )
            if outputs
            else {}
        )
        retry_count, policies = retries(role.max_retries, cfg.max_preemptions, bool(ledger))
        env = {
            **ledger,
            **(output_env(REMOTE_OUTPUT_DIR, outputs) if outputs else {}),
            **r.env,
            "TORCHX_ROLE_IDX": "0",
            "TORCHX_ROLE_NAME": r.name,
        }
        task_envs = []
        for i in range(role.num_replicas):
            per = macros.Values(
                img_root="", app_id=name, replica_id=str(i), rank0_env=RANK0_ENV
            ).apply(role)
            own = {k: v for k, v in per.env.items() if v != env.get(k)}
            task_envs.append(batch_v1.Environment(variables={"TORCHX_REPLICA_IDX": str(i), **own}))
        volumes, binds, options = _mounts(r)
        if res.memMB > 0:
            options.append(f"--shm-size={res.memMB}m")
        container = batch_v1.Runnable.Container(
            image_uri=r.image,
            commands=task_command([r.entrypoint, *r.args]),
            entrypoint="",
            options=" ".join(["--net host", *options]),
            volumes=binds,
        )
        task_spec = batch_v1.TaskSpec(
            runnables=[
                batch_v1.Runnable(script=batch_v1.Runnable.Script(text=FIREWALL_SCRIPT)),
                batch_v1.Runnable(container=container),
            ],
            environment=batch_v1.Environment(variables=env),
            compute_resource=batch_v1.ComputeResource(
                cpu_milli=max(res.cpu, 1) * 1000, memory_mib=max(res.memMB, 0)
            ),
            max_retry_count=retry_count,
            lifecycle_policies=policies,
            volumes=volumes,
        )
        if checked.max_run_seconds:
            task_spec.max_run_duration = duration_pb2.Duration(seconds=checked.max_run_seconds)
        group = batch_v1.TaskGroup(
            task_count=role.num_replicas,
            task_count_per_node=1,
            parallelism=role.num_replicas,
            require_hosts_file=True,
            task_environments=task_envs,
            task_spec=task_spec,
        )
        labels: dict[str, str] = {}
        for key, value in {**app.metadata, **(cfg.labels or {})}.items():
            labels[_label_key(str(key))] = label_value(str(value))
        # ours last: list finds our jobs by them, so no metadata key may replace them
        labels[LABEL_VERSION] = label_value(__version__.replace(".", "-"))
        labels[LABEL_APP_NAME] = label_value(name)
        labels[LABEL_USER] = label_value(cfg.user or getpass.getuser())
        labels.update(budget_labels(role.max_retries, cfg.max_preemptions, bool(ledger)))
        job = batch_v1.Job(
            task_groups=[group],
            labels=labels,
            logs_policy=batch_v1.LogsPolicy(
                destination=batch_v1.LogsPolicy.Destination.CLOUD_LOGGING
            ),
        )
        policy = self._allocation_policy(res, cfg, checked)
        if policy is not None:
            job.allocation_policy = policy
        return AppDryRunInfo(
            GCPBatchJob(name, checked.project, checked.location, job, outputs), _fmt
        )

    def _allocation_policy(self, res: Resource, cfg: GcpBatchOpts, checked: _Checked) -> Any:
        from google.cloud import batch_v1

        Policy = batch_v1.AllocationPolicy
        mtype, model = checked.machine_type, checked.model
        policy = Policy()
        used = False
        instance = Policy.InstancePolicy()
        if mtype:
            instance.machine_type = mtype
        if model != "STANDARD":
            instance.provisioning_model = getattr(Policy.ProvisioningModel, model)
        if mtype or model != "STANDARD":
            policy.instances = [
                Policy.InstancePolicyOrTemplate(policy=instance, install_gpu_drivers=res.gpu > 0)
            ]
            used = True
        if cfg.service_account:
            policy.service_account = batch_v1.ServiceAccount(email=cfg.service_account)
            used = True
        if cfg.network or cfg.subnetwork:
            policy.network = Policy.NetworkPolicy(
                network_interfaces=[
                    Policy.NetworkInterface(
                        network=cfg.network or "", subnetwork=cfg.subnetwork or ""
                    )
                ]
            )
            used = True
        return policy if used else None

    def schedule(self, dryrun_info: AppDryRunInfo[GCPBatchJob]) -> str:
        from google.api_core import exceptions

        job = dryrun_info.request
        attempts = 0

        def create(**kwargs: Any) -> Any:
            # the job id is ours (random): ALREADY_EXISTS on a retry means an earlier attempt
            # that looked failed (a dropped connection) created it
            nonlocal attempts
            attempts += 1
            try:
                return self.gcp.batch.create_job(retry=None, timeout=self.gcp.timeout, **kwargs)
            except exceptions.Conflict:  # ALREADY_EXISTS (409)
                if attempts > 1:
                    return None
                raise

        try:
            self.gcp.call(
                f"cannot create the GCP Batch job {job.name}",
                create,
                parent=job.parent,
                job=job.job_def,
                job_id=job.name,
            )
        except GcpError as e:
            if e.reason in (*BAD_REQUEST, "NotFound"):
                self._check_location(job.project, job.location)
            raise
        return f"{job.project}:{job.location}:{job.name}"

    def _check_location(self, project: str, location: str) -> None:
        """Refuse a location GCP Batch does not list for the project (once per project); when
        the locations cannot be listed, the API's own error on create will say why."""
        if location in self._locations.get(project, ()):
            return
        try:
            resp = self.gcp.call(
                "cannot list GCP Batch locations",
                self.gcp.batch.list_locations,
                request={"name": f"projects/{project}"},
            )
            found = [loc.location_id for loc in getattr(resp, "locations", resp)]
        except GcpError as e:
            if e.reason in ("PermissionDenied", "Forbidden", "MethodNotImplemented", "NotFound"):
                return
            raise
        self._locations[project] = set(found)
        if found and location not in found:
            raise GcpError(
                f"GCP Batch has no location {location!r} in project {project}: use one of"
                f" {', '.join(sorted(found))} (-cfg location=...)"
            )

    def submit_again(self, app_id: str) -> str:
        """Create a job GCP Batch failed on a Spot preemption past its ``maxRetryCount``
        again, as ``ID-a2`` (``-a3``…) of the same project and location (a sweep's trial,
        ``ID:INDEX``, as a job of its own: ``ID-tINDEX-a2``) — once: its id is the previous
        one's, so ALREADY_EXISTS for a job labelled as following this one (``AGAIN_OF_LABEL``)
        means a watcher that vanished before the job store kept it created it, and that one is
        the next attempt; a job of that id that does not follow it is someone else's, passed
        over for the next id (``TAKEN_IDS`` at most)."""
        from google.api_core import exceptions

        project, location, name, index = parse_trial_id(app_id)
        job = self._get(project, location, name)
        if job is None:
            raise TorchxNbError(f"GCP Batch job {app_id} cannot be created again: it is gone")
        new = next_job_id(name) if index is None else trial_job_id(name, index)
        tasks = [] if has_ledger(job) else self._tasks(job)
        if index is not None:  # a sweep's trial: its own task's failures
            tasks = [t for i, t in _by_index(tasks).items() if i == index]
        body = again_job(job, task_failures(tasks), index)

        def create(**kwargs: Any) -> bool:
            try:
                self.gcp.batch.create_job(retry=None, timeout=self.gcp.timeout, **kwargs)
                return True
            except exceptions.Conflict:  # ALREADY_EXISTS (409): sent before, or not ours
                return False

        passed: list[str] = []
        while True:
            created = self.gcp.call(
                f"cannot create the GCP Batch job {new}",
                create,
                parent=f"projects/{project}/locations/{location}",
                job=body,
                job_id=new,
            )
            there = None if created else self._get(project, location, new)
            if there is None or follows(there, job):
                return f"{project}:{location}:{new}"
            passed.append(new)
            if len(passed) >= TAKEN_IDS:
                raise TorchxNbError(
                    f"GCP Batch job {app_id} cannot be created again: {project}/{location} has"
                    f" jobs {', '.join(passed)} that do not follow it; delete them or run the"
                    " job again"
                )
            new = next_job_id(new)

    def _tasks(self, job: Any) -> list[Any]:
        return list(
            self.gcp.call(
                f"cannot list the tasks of {job.name}",
                self.gcp.batch.list_tasks,
                request={"parent": f"{job.name}/taskGroups/{TASK_GROUP}", "page_size": 1000},
            )
        )

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self._describe([app_id], every_task=True)[app_id]

    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """One list of active jobs per project and location (every page), one get for each job
        that has left that list, and a task list only for jobs whose tasks differ in state,
        that failed (their exit codes tell a preemption past ``maxRetryCount``), that run on
        Spot VMs (their preemptions GCP retried) or that hold sweep trials (one list per job,
        however many of its trials are asked)."""
        return self._describe(app_ids, every_task=False)

    def _describe(
        self, app_ids: list[str], every_task: bool
    ) -> dict[str, DescribeAppResponse | None]:
        out: dict[str, DescribeAppResponse | None] = dict.fromkeys(app_ids)
        groups: dict[tuple[str, str], dict[str, list[tuple[str, int | None]]]] = {}
        for app_id in app_ids:
            project, location, name, index = parse_trial_id(app_id)
            groups.setdefault((project, location), {}).setdefault(name, []).append((app_id, index))
        for (project, location), names in groups.items():
            active = self._active_jobs(project, location) if len(names) > 1 else {}
            for name, ids in names.items():
                job = active.get(name)
                if job is None:
                    job = self.gcp.call(
                        f"cannot describe {ids[0][0]}", self._get, project, location, name
                    )
                if job is None:
                    continue
                trials = any(index is not None for _, index in ids)
                mixed = len([c for c in _counts(job).values() if c]) > 1
                # a failed job's exit codes: preempted past maxRetryCount (50001) or not
                failed = job.status.state.name == "FAILED"
                # a Spot job's preemptions that GCP retried are in its tasks' events only
                listed = trials or mixed or failed or every_task or preemptible(job)
                try:
                    tasks = self._tasks(job) if listed else None
                except GcpError as e:
                    if e.reason != "NotFound":
                        raise
                    continue  # deleted since it was read (deletion runs in the background)
                by_index = _by_index(tasks) if trials else {}  # once for all the job's trials
                for app_id, index in ids:
                    if index is None:
                        out[app_id] = self._response(app_id, job, tasks)
                    else:
                        out[app_id] = self._trial_response(app_id, job, by_index, index)
        return out

    def _list_jobs(self, parent: str, filter_: str) -> Iterator[Any]:
        if filter_ and self._list_filter_ok:
            try:
                yield from self.gcp.call(
                    f"cannot list the jobs of {parent}",
                    self.gcp.batch.list_jobs,
                    request={"parent": parent, "filter": filter_, "page_size": 1000},
                )
                return
            except GcpError as e:
                if e.reason not in BAD_REQUEST:
                    raise
                # an API that does not take this filter: list everything, select here
                self._list_filter_ok = False
        yield from self.gcp.call(
            f"cannot list the jobs of {parent}",
            self.gcp.batch.list_jobs,
            request={"parent": parent, "page_size": 1000},
        )

    def _active_jobs(self, project: str, location: str) -> dict[str, Any]:
        states = " OR ".join(f'status.state="{s}"' for s in ACTIVE_JOB_STATES)
        filter_ = f"labels.{LABEL_VERSION}:* AND ({states})"
        out: dict[str, Any] = {}
        for job in self._list_jobs(f"projects/{project}/locations/{location}", filter_):
            if job.status.state.name in ACTIVE_JOB_STATES:
                out[job.name.rsplit("/", 1)[-1]] = job
        return out

    def _response(self, app_id: str, job: Any, tasks: list[Any] | None) -> DescribeAppResponse:
        state = JOB_STATES.get(job.status.state.name, AppState.UNKNOWN)
        role = _role(job)
        role_name, count = role.name, role.num_replicas
        replicas = self._replicas(job, tasks, role_name, count, state)
        resp = DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max((r.num_restarts for r in replicas), default=0),
            ui_url=_console_url(app_id),
            roles=[role],
            roles_statuses=[RoleStatus(role_name, replicas)],
            metadata=dict(job.labels),
            started=_started(job),
            ended=_ts(job.update_time) if is_terminal(state) else None,
            preemptions=task_preemptions(tasks),
            ended_preempted=ended_preempted(state, replicas),
        )
        failed = [r for r in replicas if r.state == AppState.FAILED]
        if failed:
            resp.msg = "; ".join(f"{role_name}-{r.id}: {r.structured_error_msg}" for r in failed)
        elif job.status.status_events and state != AppState.SUCCEEDED:
            resp.msg = waiting_reason(job.status.status_events[-1].description)
        if job.status.state.name == "CANCELLED" and parse_trial_id(app_id)[3] is None:
            ending = cancel_ending(app_id)
            resp.msg = f"it {ending}"
            for rep in replicas:
                if rep.state == AppState.CANCELLED:
                    rep.ending = ending
        return resp

    def _cancel_existing(self, app_id: str) -> None:
        """``cancel_job`` where the API has it; else (older API versions) delete the job. A
        sweep trial gets a cancel mark in its job's bucket instead: its cell runner looks for
        it every few seconds (and at its start) and ends the task."""
        project, location, name, index = parse_trial_id(app_id)
        if index is not None:
            self._cancel_trial(app_id, project, location, name, index)
            return
        full = f"projects/{project}/locations/{location}/jobs/{name}"
        mark_cancelled("gcp_batch", app_id, canceller())  # GCP Batch keeps no who
        cancel = getattr(self.gcp.batch, "cancel_job", None)
        if cancel is not None:
            try:
                self.gcp.call(f"cannot cancel {app_id}", cancel, name=full)
                return
            except GcpError as e:
                if e.reason != "MethodNotImplemented":
                    raise
        self.gcp.call(f"cannot delete {app_id}", self.gcp.batch.delete_job, name=full)

    def _delete_existing(self, app_id: str) -> None:
        if parse_trial_id(app_id)[3] is not None:
            raise GcpError(
                f"{app_id} is one task of a sweep's job: cancel it, or delete the job"
                f" {app_id.rpartition(':')[0]}"
            )
        self._cancel_existing(app_id)

    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        """Our jobs (labelled ``torchx_version``) in every location (``-``), or in the
        ``location`` given, every page."""
        given = self.given_opts(cfg)
        project = self._project(given.get("project"))
        location = str(given.get("location") or "-")
        out: list[ListAppResponse] = []
        for job in self._list_jobs(
            f"projects/{project}/locations/{location}", f"labels.{LABEL_VERSION}:*"
        ):
            if LABEL_VERSION not in job.labels:
                continue
            parts = job.name.split("/")
            app_id = f"{parts[1]}:{parts[3]}:{parts[5]}"
            out.append(
                ListAppResponse(
                    app_id=app_id,
                    state=JOB_STATES.get(job.status.state.name, AppState.UNKNOWN),
                    name=job.labels.get(LABEL_APP_NAME, parts[5]),
                )
            )
        return out


def create_scheduler(session_name: str, **kwargs: Any) -> GcpBatchScheduler:
    return GcpBatchScheduler(session_name, **kwargs)


def cancel_ending(app_id: str) -> str:
    """Who cancelled a whole job: torchx_nb's cancel leaves a mark saying for whom (on the
    machine that cancelled it); GCP Batch's status events do not say who."""
    return marked_ending("gcp_batch", app_id) or (
        "was cancelled outside torchx_nb here (gcloud batch jobs cancel, the console, or"
        " torchx_nb on another machine: GCP Batch does not say who)"
    )
