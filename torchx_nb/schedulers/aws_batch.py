"""``aws_batch``: an app becomes one multinode AWS Batch job (a node range per role), its image
patched with the workspace and pushed to ``image_repo``; logs come from CloudWatch
``/aws/batch/job``.

boto3 is imported when a client is first needed; clients can be injected, and boto3's standard
settings (``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``, profiles) apply."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from torchx_nb.schedulers.abilities import (
    DescribesMany,
    StoresOutputs,
    SubmitsAgain,
    SubmitsArrays,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import (
    DescribeAppResponse,
    GivenOpts,
    ListAppResponse,
    LogQuery,
    Scheduler,
)
from torchx_nb.schedulers.aws_batch_options import AwsBatchOpts
from torchx_nb.schedulers.aws_batch_request import BatchJob as BatchJob
from torchx_nb.schedulers.aws_batch_request import container as role_container
from torchx_nb.schedulers.aws_batch_request import format_request, job_name
from torchx_nb.schedulers.aws_batch_runnable import GRACE_S, runnable_reason
from torchx_nb.schedulers.aws_batch_spot import (
    AGAIN_OF_TAG,
    MAX_TAKEN,
    again_request,
    budget_tags,
    ended_reclaimed,
    own_tag_line,
    reclaims,
    retry_strategy,
    spot_note,
    taken,
)
from torchx_nb.schedulers.aws_batch_status import (
    STATES,
    apply_exits,
    cancel_ending,
    node_exits,
    time_limit,
)
from torchx_nb.schedulers.aws_common import (
    TAG_APP_NAME,
    TAG_VERSION,
    AwsClients,
    aws_error,
    call,
    cloudwatch_events,
    job_tags,
    pages,
)
from torchx_nb.schedulers.cancellers import canceller
from torchx_nb.schedulers.ids import make_unique
from torchx_nb.schedulers.logs import tail_wait
from torchx_nb.schedulers.outputs import checkpoint_env, checkpoint_url, upload_target
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    InvalidRunConfigException,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    is_terminal,
    macros,
)
from torchx_nb.specs.builders import role_of_command
from torchx_nb.specs.exceptions import TorchxNbError
from torchx_nb.workspace import WorkspaceMixin

RANK0_ENV = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
NODE_INDEX = "$AWS_BATCH_JOB_NODE_INDEX"
MAX_ROLES = 5
CANCEL_REASON = "cancelled by torchx_nb"
LOG_GROUP = "/aws/batch/job"


class AwsBatchScheduler(
    AwsClients,
    TakesTypedOptions,
    WorkspaceMixin,
    DescribesMany,
    StoresOutputs,
    SubmitsArrays,
    SubmitsAgain,
    Scheduler[AwsBatchOpts],
):
    """Multinode AWS Batch jobs; lists every queue without the 100-job cap. A sweep's trials
    go as one array job, each child ``QUEUE:NAME:INDEX``."""

    rank0_env = RANK0_ENV

    array_index_env = "AWS_BATCH_JOB_ARRAY_INDEX"

    service = "batch"

    def __init__(
        self,
        session_name: str,
        client: Any = None,
        log_client: Any = None,
        region: str | None = None,
    ) -> None:
        super().__init__("aws_batch", session_name)
        self._init_clients(client, log_client, region)
        self._job_ids: dict[str, str] = {}

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        return call(what, fn, **kwargs)

    def output_url(self, app_id: str, request: BatchJob) -> str | None:
        return request.outputs

    def array_request(
        self, info: AppDryRunInfo[BatchJob], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[BatchJob]:
        """An array job (``arrayProperties.size``) of a container job definition: AWS Batch
        runs no array of multi-node jobs, and the app is one node. The queue's compute
        environment bounds how many run at once."""
        job = info.request
        node = job.job_def["nodeProperties"]["nodeRangeProperties"][0]["container"]
        container = {k: v for k, v in node.items() if k != "instanceType"}
        container["environment"] = [
            e for e in container["environment"] if e["name"] != "TORCHX_RANK0_HOST"
        ]
        job_def = {k: v for k, v in job.job_def.items() if k not in ("nodeProperties", "type")}
        job_def.update(type="container", containerProperties=container)
        return AppDryRunInfo(
            dataclasses.replace(job, job_def=job_def, array_size=size), format_request
        )

    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """``QUEUE:NAME:INDEX``: the child jobs ``PARENTID:INDEX`` of the array."""
        return [f"{app_id}:{i}" for i in range(size)]

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: AwsBatchOpts) -> None:
        """The user's tags (the AppDef's metadata) may not use torchx_nb's own keys."""
        line = own_tag_line(app.metadata)
        if line:
            raise InvalidRunConfigException(line, "metadata")

    def _validate(self, app: AppDef, scheduler: str, cfg: AwsBatchOpts | None = None) -> None:
        super()._validate(app, scheduler, cfg)
        if len(app.roles) > MAX_ROLES:
            raise InvalidRunConfigException(
                f"AWS Batch takes at most {MAX_ROLES} roles (node groups); this app has"
                f" {len(app.roles)}: merge roles",
                "roles",
            )
        if cfg is None:  # TorchX's ``_validate(app, scheduler)``: no options to check
            return
        timeout = cfg.timeout
        if timeout is not None and timeout < 60:
            raise InvalidRunConfigException(
                f"timeout={timeout}: AWS Batch stops an attempt no sooner than 60 seconds;"
                " give -cfg timeout=60 or more",
                "timeout",
            )
        if cfg.priority and not cfg.share_id:
            raise InvalidRunConfigException(
                "priority needs share_id (it only applies to fair-share queues): add"
                " -cfg share_id=ID or drop priority",
                "priority",
            )

    def _submit_dryrun(self, app: AppDef, cfg: AwsBatchOpts) -> AppDryRunInfo[BatchJob]:
        share_id = cfg.share_id or None
        priority = cfg.priority
        name = job_name(make_unique(app.name + (f"-{share_id}" if share_id else "")))
        outputs = upload_target(cfg.output_path, name, ("s3",))
        max_retries = max(r.max_retries for r in app.roles)
        ledger = (
            checkpoint_env(
                checkpoint_url(outputs),
                attempt_var="AWS_BATCH_JOB_ATTEMPT",
                max_retries=max_retries,
                max_preemptions=cfg.max_preemptions,
                grace=30,  # ECS's stopTimeout: SIGTERM, then SIGKILL 30 s later
            )
            if outputs
            else {}
        )
        ranges: list[dict[str, Any]] = []
        start = 0
        for role_idx, role in enumerate(app.roles):
            values = macros.Values(
                img_root="", app_id=name, replica_id=NODE_INDEX, rank0_env=RANK0_ENV
            )
            r = values.apply(role)
            container = role_container(r, role_idx, cfg, outputs)
            container["environment"] += [{"name": k, "value": v} for k, v in ledger.items()]
            n = role.num_replicas
            if role_idx == 0:
                rank0 = {
                    **container,
                    "environment": [
                        *container["environment"],
                        {"name": "TORCHX_RANK0_HOST", "value": "localhost"},
                    ],
                }
                ranges.append({"targetNodes": "0:0" if n > 1 else "0", "container": rank0})
                if n > 1:
                    ranges.append({"targetNodes": f"1:{n - 1}", "container": container})
            else:
                ranges.append({"targetNodes": f"{start}:{start + n - 1}", "container": container})
            start += n
        tags = job_tags(app.name, cfg.user, app.metadata)
        job_def: dict[str, Any] = {
            "jobDefinitionName": name,
            "type": "multinode",
            "nodeProperties": {"numNodes": start, "mainNode": 0, "nodeRangeProperties": ranges},
            "retryStrategy": retry_strategy(max_retries, cfg.max_preemptions, bool(ledger)),
            "tags": tags,
        }
        if share_id:
            job_def["schedulingPriority"] = priority
        if cfg.timeout:
            job_def["timeout"] = {"attemptDurationSeconds": cfg.timeout}
        job = BatchJob(
            name=name,
            queue=cfg.queue,
            share_id=share_id,
            priority=priority,
            job_def=job_def,
            tags={**tags, **budget_tags(max_retries, cfg.max_preemptions, bool(ledger))},
            outputs=outputs,
            notes=self._spot_notes(cfg),
        )
        return AppDryRunInfo(job, format_request)

    def _spot_notes(self, cfg: AwsBatchOpts) -> tuple[str, ...]:
        """With ``spot``, what the queue's compute environments say (read, never changed)."""
        if not cfg.spot:
            return ()
        note = spot_note(cfg.queue, self._environments(cfg.queue))
        return (note,) if note else ()

    def schedule(self, dryrun_info: AppDryRunInfo[BatchJob]) -> str:
        job = dryrun_info.request
        self._call(
            f"cannot register the job definition {job.name}",
            self.client.register_job_definition,
            **job.job_def,
        )
        resp = self._call(
            f"cannot submit to queue {job.queue!r}", self.client.submit_job, **job.submit_args()
        )
        app_id = f"{job.queue}:{job.name}"
        self._job_ids[app_id] = resp["jobId"]
        return app_id

    def submit_again(self, app_id: str) -> str:
        """Submit a job Batch ended with a reclaimed host (its ``attempts`` spent) again, as
        ``QUEUE:NAME-aN`` (``aws_batch_spot.again_request``) — once: a job of that name in
        the queue tagged as following this one (sent by a watcher that vanished before the job
        store kept it) is the one sent, and no other is; a name another job has (the user's
        own) is passed over for the next, ``MAX_TAKEN`` at most."""
        job_id = self._job_id(app_id)
        jobs = self._describe_jobs([job_id]) if job_id else []
        if not jobs:
            raise TorchxNbError(f"Batch job {app_id} cannot be submitted again: it is gone")
        job = jobs[0]
        parent, _, index = app_id.rpartition(":")
        if ":" in parent and index.isdigit():  # an array's child: its tags are the array's
            parent_id = self._job_id(parent)
            for array in self._describe_jobs([parent_id]) if parent_id else []:
                job = {**job, "tags": {**(array.get("tags") or {}), **(job.get("tags") or {})}}
        new_id, args = again_request(app_id, job)
        queue = args["jobQueue"]
        passed: list[str] = []
        while True:
            ids = self._named(queue, args["jobName"])
            named = self._describe_jobs(ids) if ids else []
            ours = [j for j in named if (j.get("tags") or {}).get(AGAIN_OF_TAG) == job["jobId"]]
            if ours:  # already sent
                self._job_ids[new_id] = str(ours[0]["jobId"])
                return new_id
            if not named:
                break
            passed.append(str(args["jobName"]))
            if len(passed) == MAX_TAKEN:
                # said after the runner's "submitting it again failed: "; Batch deletes no job
                raise TorchxNbError(
                    f"queue {queue!r} already has jobs named {', '.join(passed)} that do not"
                    f" follow {app_id} (Batch cannot delete jobs): run the job again"
                )
            new_id, args = taken(new_id, args)
        resp = self._call(f"cannot submit to queue {queue!r}", self.client.submit_job, **args)
        self._job_ids[new_id] = resp["jobId"]
        return new_id

    def _job_id(self, app_id: str) -> str | None:
        if app_id in self._job_ids:
            return self._job_ids[app_id]
        parent, _, index = app_id.rpartition(":")
        if ":" in parent and index.isdigit():  # an array's child: QUEUE:NAME:INDEX
            parent_id = self._job_id(parent)
            return f"{parent_id}:{index}" if parent_id else None
        queue, _, name = app_id.partition(":")
        try:
            found = self._named(queue, name)
        except Exception as e:
            if re.search(r"job ?queue\b.*\bnot\b", str(e), re.I | re.S):
                return None  # its queue is gone (Batch says JobQueue / Job queue … not …)
            raise aws_error(e, f"cannot look up {app_id}") from None
        if found:
            self._job_ids[app_id] = found[0]
        return found[0] if found else None

    def _named(self, queue: str, name: str) -> list[str]:
        """The ids of the jobs of ``queue`` named ``name`` (ListJobs' filter ignores case)."""
        paginator = self.client.get_paginator("list_jobs")
        named = paginator.paginate(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [name]}])
        return [
            str(summary["jobId"])
            for page in named
            for summary in page.get("jobSummaryList", [])
            if summary.get("jobName") == name
        ]

    def _describe_jobs(self, job_ids: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(job_ids), 100):
            resp = self._call(
                "cannot describe jobs", self.client.describe_jobs, jobs=job_ids[i : i + 100]
            )
            out.extend(resp.get("jobs", []))
        return out

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self.describe_many([app_id]).get(app_id)

    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """Describe many apps with one ``describe_jobs`` call per 100 jobs."""
        ids = {app_id: self._job_id(app_id) for app_id in app_ids}
        jobs = {j["jobId"]: j for j in self._describe_jobs([i for i in ids.values() if i])}
        out = {
            app_id: (self._to_response(app_id, jobs[jid]) if jid in jobs else None)
            for app_id, jid in ids.items()
        }
        envs: dict[str, list[dict[str, Any]]] = {}  # one look per queue per round

        def environments_of(queue: str) -> list[dict[str, Any]]:
            if queue not in envs:
                envs[queue] = self._environments(queue)
            return envs[queue]

        for app_id, jid in ids.items():
            resp = out.get(app_id)
            if resp is not None and jid in jobs and is_terminal(resp.state):
                with contextlib.suppress(Exception):  # exit codes are extra: never fail it
                    exits = self._exits(jobs[jid])
                    for rs in resp.roles_statuses:
                        apply_exits(rs.replicas, exits)
            if resp is not None and jid in jobs:
                with contextlib.suppress(Exception):  # a reason is extra: never fail describe
                    why = runnable_reason(jobs[jid], environments_of, grace=self.runnable_grace)
                    if why:
                        resp.msg = why
        return out

    runnable_grace = GRACE_S

    def _exits(self, job: dict[str, Any]) -> dict[int, tuple[int | None, float | None]]:
        def summaries(queue: str, name: str) -> Iterator[dict[str, Any]]:
            filters = [{"name": "JOB_NAME", "values": [name]}]
            named = self.client.get_paginator("list_jobs").paginate(jobQueue=queue, filters=filters)
            for page in named:
                yield from page.get("jobSummaryList", [])

        return node_exits(job, self._describe_jobs, summaries)

    def _environments(self, queue: str) -> list[dict[str, Any]]:
        """The compute environments of a job queue (by name or ARN)."""
        found = self._call(
            "cannot describe the job queue", self.client.describe_job_queues, jobQueues=[queue]
        ).get("jobQueues", [])
        order = [
            e["computeEnvironment"] for q in found for e in q.get("computeEnvironmentOrder", [])
        ]
        if not order:
            return []
        return list(
            self._call(
                "cannot describe the compute environments",
                self.client.describe_compute_environments,
                computeEnvironments=order,
            ).get("computeEnvironments", [])
        )

    def _state(self, job: dict[str, Any]) -> AppState:
        state = STATES.get(job.get("status", ""), AppState.UNKNOWN)
        if state == AppState.FAILED and cancel_ending(job, CANCEL_REASON):
            return AppState.CANCELLED
        return state

    def _to_response(self, app_id: str, job: dict[str, Any]) -> DescribeAppResponse:
        state = self._state(job)
        region = self.client.meta.region_name
        roles: dict[str, Role] = {}
        replicas: dict[str, list[ReplicaStatus]] = {}
        ranges = (job.get("nodeProperties") or {}).get("nodeRangeProperties", [])
        if not ranges and job.get("container"):  # a container job (an array's child)
            ranges = [{"targetNodes": "0", "container": job["container"]}]
        for rng in ranges:
            c = rng.get("container", {})
            env = {e["name"]: e["value"] for e in c.get("environment", [])}
            name = env.get("TORCHX_ROLE_NAME", "node")
            lo, _, hi = str(rng.get("targetNodes", "0")).partition(":")
            first, last = int(lo or 0), int(hi) if hi else int(lo or 0)
            reqs = {r["type"]: int(r["value"]) for r in c.get("resourceRequirements", [])}
            role = roles.get(name)
            if role is None:
                role = role_of_command(
                    name,
                    c.get("image", ""),
                    c.get("command"),
                    env=env,
                    resource=Resource(
                        cpu=reqs.get("VCPU", 1), gpu=reqs.get("GPU", 0), memMB=reqs.get("MEMORY", 0)
                    ),
                )
                roles[name] = role
            for node in range(first, last + 1):
                role.num_replicas += 1
                reps = replicas.setdefault(name, [])
                reps.append(ReplicaStatus(len(reps), state, name, f"node-{node}"))
        resp = DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max(len(job.get("attempts", [])) - 1, 0),
            ui_url=(
                f"https://{region}.console.aws.amazon.com/batch/home?region={region}"
                + (
                    f"#jobs/mnp-job/{job['jobId']}"
                    if job.get("nodeProperties")
                    else f"#jobs/detail/{job['jobId']}"
                )
            ),
            roles=list(roles.values()),
            roles_statuses=[RoleStatus(n, reps) for n, reps in replicas.items()],
            metadata=dict(job.get("tags") or {}),
            started=job["startedAt"] / 1000 if job.get("startedAt") else None,
            ended=job["stoppedAt"] / 1000 if job.get("stoppedAt") and is_terminal(state) else None,
            preemptions=reclaims(job),
            ended_preempted=ended_reclaimed(job),
        )
        if job.get("statusReason"):
            resp.msg = str(job["statusReason"])
        ending = cancel_ending(job, CANCEL_REASON)
        if ending:
            resp.msg = f"it {ending}"
            for reps in replicas.values():
                for rep in reps:
                    rep.ending = ending
        limit = time_limit(job)
        if limit is not None:
            for reps in replicas.values():
                for rep in reps:
                    rep.ending, rep.next_step = limit
        return resp

    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        """Every job of ours in every queue (or ``cfg.queue``): pages through list_jobs with
        no cap and keeps the jobs tagged by torchx, describing 100 per call."""
        queue = self.given_opts(cfg).get("queue")
        if queue:
            queues = [str(queue)]
        else:
            queues = [
                q["jobQueueName"]
                for page in pages("cannot list job queues", self.client, "describe_job_queues")
                for q in page.get("jobQueues", [])
            ]
        summaries: list[tuple[str, dict[str, Any]]] = []
        for q in queues:
            for page in pages(
                f"cannot list the jobs of queue {q!r}",
                self.client,
                "list_jobs",
                jobQueue=q,
                filters=[{"name": "AFTER_CREATED_AT", "values": ["0"]}],
                PaginationConfig={"PageSize": 1000},
            ):
                summaries.extend((q, s) for s in page.get("jobSummaryList", []))
        by_id = {s["jobId"]: (q, s) for q, s in summaries}
        out: list[ListAppResponse] = []
        for job in self._describe_jobs(list(by_id)):
            if TAG_VERSION not in (job.get("tags") or {}):
                continue
            q = by_id[job["jobId"]][0]
            app_id = f"{q}:{job['jobName']}"
            self._job_ids[app_id] = job["jobId"]
            out.append(
                ListAppResponse(
                    app_id=app_id,
                    state=self._state(job),
                    name=(job.get("tags") or {}).get(TAG_APP_NAME, ""),
                )
            )
        return out

    def _cancel_existing(self, app_id: str) -> None:
        job_id = self._job_id(app_id)
        if job_id:
            self._call(
                f"cannot cancel {app_id}",
                self.client.terminate_job,
                jobId=job_id,
                reason=f"{CANCEL_REASON}: {canceller()}"[:1000],
            )

    #: why ``--streams`` cannot pick a stream here
    combined_only = "AWS Batch keeps one combined log per node"

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """CloudWatch events of replica ``k`` of ``role_name`` (combined stream only)."""
        job_id = self._job_id(q.app_id)
        if job_id is None:
            raise ValueError(f"unknown app {q.app_id!r}")
        return self._log_lines(q.app_id, job_id, q.role, q.k, q.since, q.until, q.tail)

    def _stream_name(self, job: dict[str, Any], role_name: str, k: int) -> str | None:
        if not job.get("nodeProperties"):  # a container job: its own stream
            return _log_stream(job)
        start = 0
        for rng in (job.get("nodeProperties") or {}).get("nodeRangeProperties", []):
            env = {e["name"]: e["value"] for e in rng.get("container", {}).get("environment", [])}
            if env.get("TORCHX_ROLE_NAME") == role_name:
                lo = str(rng.get("targetNodes", "0")).partition(":")[0]
                start = int(lo or 0)
                break
        node_jobs = self._describe_jobs([f"{job['jobId']}#{start + k}"])
        return _log_stream(node_jobs[0] if node_jobs else job)

    def _log_lines(
        self,
        app_id: str,
        job_id: str,
        role_name: str,
        k: int,
        since: datetime | None,
        until: datetime | None,
        should_tail: bool,
    ) -> Iterator[str]:
        token: list[str | None] = [None]
        stream: str | None = None
        while True:
            job = self._describe_jobs([job_id])
            if not job:
                return
            terminal = is_terminal(self._state(job[0]))
            if stream is None:
                stream = self._stream_name(job[0], role_name, k)
            if stream is not None:
                yield from cloudwatch_events(
                    self.log_client, LOG_GROUP, stream, since, until, token
                )
            if not should_tail or terminal:
                return
            if tail_wait(1.0):
                return


def _log_stream(target: dict[str, Any]) -> str | None:
    """The CloudWatch stream of one node's (or container job's) latest attempt."""
    if target.get("status") == "RUNNING" and target.get("container", {}).get("logStreamName"):
        return str(target["container"]["logStreamName"])
    attempts = target.get("attempts") or []
    if attempts and attempts[-1].get("container", {}).get("logStreamName"):
        return str(attempts[-1]["container"]["logStreamName"])
    name = target.get("container", {}).get("logStreamName")
    return str(name) if name else None


def create_scheduler(
    session_name: str, client: Any = None, log_client: Any = None, region: str | None = None
) -> AwsBatchScheduler:
    return AwsBatchScheduler(session_name, client=client, log_client=log_client, region=region)
