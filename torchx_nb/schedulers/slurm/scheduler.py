"""``SlurmScheduler``: submit, describe, cancel, list, logs and job arrays on a Slurm cluster."""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torchx_nb.apps.cell_runner.common import REPLICA_ID_ENV
from torchx_nb.schedulers.abilities import (
    DescribesMany,
    DirWorkspaceMixin,
    LocalWorkspace,
    StoresOutputs,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import DescribeAppResponse, GivenOpts, ListAppResponse, Scheduler
from torchx_nb.schedulers.ids import make_unique
from torchx_nb.schedulers.slurm.again import SlurmPreempts
from torchx_nb.schedulers.slurm.arrays import SlurmArrays
from torchx_nb.schedulers.slurm.cancel import cancel_job
from torchx_nb.schedulers.slurm.commands import (
    _APP_ID,
    CMD_OPTS,
    OUTPUTS_FOLDER,
    RANK0_ENV,
    SCRIPT_NAME,
    WORKSPACE_EXCLUDES,
    SlurmError,
    _not_on_path,
    run_slurm,
)
from torchx_nb.schedulers.slurm.exits import (
    COLUMNS,
    Ending,
    before_end,
    parse_endings,
    unsettled,
)
from torchx_nb.schedulers.slurm.exits import add_endings as _add_endings
from torchx_nb.schedulers.slurm.exits import replica_state as _replica_state
from torchx_nb.schedulers.slurm.fit import Node, never_fits, parse_sinfo
from torchx_nb.schedulers.slurm.jobs import Job, combined_state, errors, parse_jobs
from torchx_nb.schedulers.slurm.logs import SlurmLogs
from torchx_nb.schedulers.slurm.options import SlurmOpts, check_time, memory_mb
from torchx_nb.schedulers.slurm.preemptions import Run, add_preemptions, parse_runs
from torchx_nb.schedulers.slurm.reasons import pending_reason
from torchx_nb.schedulers.slurm.request import (
    SlurmBatchRequest,
    SlurmReplicaRequest,
    _add_steps,
    _fmt_request,
    _id_order,
    _index_dir,
    _memory_allowed,
    check_job_id,
)
from torchx_nb.specs.api import (
    NONE,
    NULL_RESOURCE,
    AppDef,
    AppDryRunInfo,
    AppState,
    ReplicaStatus,
    Role,
    RoleStatus,
    is_terminal,
    macros,
)


def _restarted(job: Job) -> bool:
    """Slurm ran the job before (requeued, preempted): sacct has its earlier runs."""
    return any(c.restarts for c in job.components)


class SlurmScheduler(
    SlurmArrays,
    SlurmLogs,
    SlurmPreempts,
    TakesTypedOptions,
    DirWorkspaceMixin,
    DescribesMany,
    StoresOutputs,
    Scheduler[SlurmOpts],
):
    """Submits with sbatch, describes with one squeue call (sacct once a job left the queue),
    cancels with scancel and reads logs from the job folder on the shared filesystem. A
    sweep's trials go as one job array, each task ``ARRAYID_INDEX``."""

    rank0_env = RANK0_ENV
    array_index_env = "SLURM_ARRAY_TASK_ID"
    throttles_arrays = True

    def __init__(self, session_name: str, env: Mapping[str, str] | None = None) -> None:
        super().__init__("slurm", session_name)
        self._env = dict(env) if env is not None else None
        self._accounting: bool | None = None

    def output_url(self, app_id: str, request: SlurmBatchRequest) -> str | None:
        """The job's folder under the job folder (or the workspace), on the shared
        filesystem."""
        return f"file://{request.outputs_root}/{app_id}"

    # ---- workspace -----------------------------------------------------------------------
    def copies_workspace(self, cfg: SlurmOpts) -> bool:
        """With ``job_dir`` the workspace (secrets left out) and the cell are copied into a
        new job folder; without, the job runs in the workspace itself."""
        return bool(cfg.job_dir)

    def files_folder(self, workspace: str, cfg: SlurmOpts) -> Path:
        """In the workspace's hidden outputs folder: on the shared filesystem, where every
        node can read it, and shipped by no workspace."""
        return Path(workspace).resolve() / OUTPUTS_FOLDER / "cells"

    def preview_workspace(self, workspace: str, cfg: Any = None) -> str | None:
        """What ``job_dir`` would receive (the same rules as images)."""
        if not self.given_opts(cfg).get("job_dir"):
            return None
        from torchx_nb.workspace.collect import collect_workspace
        from torchx_nb.workspace.scan import default_cache

        files = collect_workspace(
            workspace, extra_excludes=WORKSPACE_EXCLUDES, scan=default_cache().readonly()
        )
        files.warn()
        return files.preview()

    # ---- validation ----------------------------------------------------------------------
    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: SlurmOpts) -> None:
        job_dir = cfg.job_dir
        if job_dir:
            target = Path(str(job_dir)).expanduser().absolute()
            parent = target
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
            if not parent.is_dir():
                raise ValueError(f"job_dir {str(job_dir)!r}: {parent} is not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise PermissionError(
                    f"job_dir {str(job_dir)!r}: {parent} is not writable; choose a folder on"
                    " the shared filesystem that you can write"
                )

    def _validate(self, app: AppDef, scheduler: str, cfg: SlurmOpts | None = None) -> None:
        # values land in #SBATCH lines and a script comment: a space would add an option, a
        # newline a shell command. The Runner passes the options it resolved; a call without
        # them (TorchX's ``_validate(app, scheduler)``) checks the defaults. An empty value
        # (``-cfg time=``) is the option left out, as the request leaves it
        cfg = SlurmOpts() if cfg is None else cfg
        for key, value in cfg.to_cfg().items():
            if (
                isinstance(value, str)
                and value
                and (
                    "\n" in value
                    or "\r" in value
                    or (key not in CMD_OPTS and value.split() != [value])
                )
            ):
                raise ValueError(
                    f"slurm option {key}={value!r} holds a space or line break; Slurm takes one"
                    " word here"
                )
        check_time(cfg.time)
        for role in app.roles:
            if role.resource != NULL_RESOURCE:
                memory_mb(role.name, role.resource.memMB)
        count = sum(r.num_replicas for r in app.roles)
        if count < 1:
            raise ValueError("the app has no replicas to run")
        nodes = cfg.nodelist or ""
        if nodes and len(nodes.split(",")) != count:
            raise ValueError(
                f"nodelist names {len(nodes.split(','))} nodes for {count} replicas: give one"
                " node per replica, in order"
            )

    # ---- request -------------------------------------------------------------------------
    def _submit_dryrun_in(
        self, app: AppDef, cfg: SlurmOpts, workspace: LocalWorkspace | None
    ) -> AppDryRunInfo[SlurmBatchRequest]:
        """The sbatch request, run in ``workspace`` (or, with ``job_dir``, in a copy of it with
        its files written beside it), else in the current folder. sinfo is asked whether the
        partition tracks memory (a read, as TorchX does)."""
        cmd = ["sbatch", "--parsable"]
        for key, value in (
            ("comment", cfg.comment),
            ("mail-user", cfg.mail_user),
            ("mail-type", cfg.mail_type),
        ):
            if value:
                cmd.append(f"--{key}={value}")
        memory = _memory_allowed(cfg.partition or None)
        nodes = [n for n in (cfg.nodelist or "").split(",") if n]
        job_dir = cfg.job_dir or None
        if job_dir:
            target = Path(job_dir).expanduser().absolute()
            workdir = str(target / make_unique(app.name) if target.exists() else target)
        else:
            workdir = workspace.path if workspace else os.getcwd()
        # the job's checkpoint store: in its folder, its own (a folder holds many jobs' runs),
        # kept across requeues and a resubmission of the same script (spot.md)
        store = f"{workdir}/{OUTPUTS_FOLDER}/checkpoints/{make_unique(app.name)}"
        replicas: dict[str, SlurmReplicaRequest] = {}
        sbatch_opts = {
            "partition": cfg.partition,
            "time": cfg.time,
            "constraint": cfg.constraint,
            "qos": cfg.qos,
            "account": cfg.account,
        }
        for role in app.roles:
            for i in range(role.num_replicas):
                name = f"{role.name}-{i}"
                r = macros.Values(
                    img_root=role.image, app_id=_APP_ID, replica_id=str(i), rank0_env=RANK0_ENV
                ).apply(role)
                sbatch: dict[str, str | None] = {"job-name": name, "requeue": None}
                sbatch.update((k, v) for k, v in sbatch_opts.items() if v)
                sbatch["ntasks-per-node"] = "1"
                res = role.resource
                if res != NULL_RESOURCE:
                    if res.cpu > 0:
                        sbatch["cpus-per-task"] = str(res.cpu)
                    if memory and res.memMB > 0:
                        sbatch["mem"] = str(memory_mb(role.name, res.memMB))
                    if res.gpu > 0:
                        gpu_key = "gpus-per-node" if cfg.gpus_per_node else "gpus-per-task"
                        sbatch[gpu_key] = str(res.gpu)
                if cfg.exclusive:
                    sbatch["exclusive"] = None
                if nodes:
                    sbatch["nodelist"] = nodes[len(replicas)]
                if cfg.exclude:
                    sbatch["exclude"] = cfg.exclude
                replicas[name] = SlurmReplicaRequest(
                    name=name,
                    entrypoint=r.entrypoint,
                    args=list(r.args),
                    srun_opts={
                        "output": f"slurm-{_APP_ID}-{name}.out",
                        "error": f"slurm-{_APP_ID}-{name}.err",
                        "wait": "60",
                        "kill-on-bad-exit": "1",
                    },
                    sbatch_opts=sbatch,
                    # each rank's own checkpoint folder
                    env={REPLICA_ID_ENV: str(i), **r.env},
                )
        req = SlurmBatchRequest(
            cmd=cmd,
            replicas=replicas,
            job_dir=job_dir,
            max_retries=min((r.max_retries for r in app.roles), default=0),
            workdir=workdir,
            workspace=workspace.path if workspace else None,
            cell_files=dict(workspace.files) if workspace else {},
            app_name=app.name,
            roles={r.name: r.num_replicas for r in app.roles},
            checkpoint=store,
        )
        return AppDryRunInfo(req, _fmt_request)

    # ---- submit --------------------------------------------------------------------------
    def _make_job_dir(self, req: SlurmBatchRequest) -> Path:
        """Create the job folder and copy the workspace and the cell into it."""
        target = Path(req.workdir)
        try:
            target.mkdir(mode=0o700, parents=True, exist_ok=False)
        except FileExistsError:
            raise FileExistsError(
                f"job folder {target} already exists: job_dir must name a new folder or a parent"
                " folder for job folders"
            ) from None
        except OSError as e:
            raise PermissionError(
                f"cannot create job folder {target}: {e.strerror}; choose a job_dir you can write"
            ) from None
        from torchx_nb.paths import mark_log_folder
        from torchx_nb.workspace.collect import collect_workspace

        if req.workspace:
            files = collect_workspace(req.workspace, extra_excludes=WORKSPACE_EXCLUDES)
            files.warn()
            files.copy_to(target)
        mark_log_folder(target)
        for name, data in req.cell_files.items():
            (target / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            (target / name).write_bytes(data)
        return target

    def schedule(self, dryrun_info: AppDryRunInfo[SlurmBatchRequest]) -> str:
        req = dryrun_info.request
        env = self._command_env()
        if shutil.which("sbatch", path=env.get("PATH")) is None:
            raise _not_on_path("sbatch")  # before a job folder is made for nothing
        script_text = req.materialize()
        if req.job_dir:
            workdir = self._make_job_dir(req)
            script = workdir / SCRIPT_NAME
            script.write_text(script_text)
        else:
            workdir = Path(req.workdir)
            from torchx_nb.paths import private_dir

            folder = private_dir(_index_dir(self.session_name) / "scripts")
            script = folder / f"{make_unique(req.app_name or 'app')}.sh"
            script.write_text(script_text)
        out = run_slurm([*req.cmd, f"--chdir={workdir}", str(script)], env)
        job_id = out.strip().split(";", 1)[0]
        check_job_id(job_id)
        self._remember(job_id, req, str(workdir), str(script))
        return job_id

    # ---- describe ------------------------------------------------------------------------
    def _sacct(self, ids: Iterable[str], extra: list[str] | None = None) -> dict[str, Job] | None:
        """Jobs from accounting; None when accounting is off."""
        argv = ["sacct", "--json", *(extra or [])]
        wanted = list(ids)
        if wanted:
            argv += ["-j", ",".join(wanted)]
        try:
            out = run_slurm(argv, self._command_env())
        except SlurmError as e:
            if "accounting storage is disabled" in str(e).lower():
                self._accounting = False
                return None
            raise
        self._accounting = True
        doc = json.loads(out or "{}")
        for err in errors(doc):
            if "disabled" in err.lower():
                self._accounting = False
                return None
        return parse_jobs(doc, accounting=True)

    def _endings(
        self, ids: list[str], runs: dict[str, list[Run]] | None = None
    ) -> dict[str, Ending]:
        """How each component of these jobs ended, from sacct's text columns (the JSON's
        exit code says SUCCESS/0 for failed steps on 22.05): one call; empty when accounting
        has no answer. Every run of a requeued job is asked for: ``runs`` gets them."""
        argv = ["sacct", "--duplicates", "--parsable2", "--noheader", "-o", ",".join(COLUMNS)]
        try:
            text = run_slurm([*argv, "-j", ",".join(ids)], self._command_env())
        except SlurmError:
            return {}
        if runs is not None:
            runs.update(parse_runs(text))
        return parse_endings(text)

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self.describe_many([app_id]).get(app_id)

    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """Many jobs with one squeue call, and for those that ended one ``sacct --json`` call
        (their records) and one ``sacct --duplicates --parsable2`` call (exit codes, every
        run): two sacct calls at most per round, however many jobs and arrays."""
        ids = [check_job_id(a) for a in app_ids]
        out: dict[str, DescribeAppResponse | None] = dict.fromkeys(ids)
        if not ids:
            return out
        queued = self._squeue()
        # sacct for jobs that left the queue, and for finished ones still in it: only sacct
        # has each replica's own outcome (its srun step), squeue has the job's
        ask = [
            a
            for a in ids
            if a not in queued or is_terminal(combined_state(c.state for c in queued[a].components))
        ]
        finished: dict[str, Job] = {}
        accounting_off = self._accounting is False
        endings: dict[str, Ending] = {}
        runs: dict[str, list[Run]] = {}  # every run of each job (preemptions.py)
        late: set[str] = set()
        if ask and not accounting_off:
            # one sacct --json and one sacct text call per round, each for every id at once:
            # the jobs that ended, and their arrays' own ids (an array's tasks that never
            # started are one record, ``41_[1-3%1]``, that sacct finds by the array's id only)
            arrays = [a.partition("_")[0] for a in ask if "_" in a]
            wanted = list(dict.fromkeys([*ask, *arrays]))
            try:
                got = self._sacct(wanted)
            except SlurmError:
                # slurmdbd down or restarting: squeue still knows a job that ended less than
                # MinJobAge ago (its exit code, in the wait status); only the others need sacct
                if any(a not in queued for a in ask):
                    raise
                got, ask = {}, []
            accounting_off = got is None
            # an array's tasks still in the queue read from squeue, as when not asked
            finished = {k: v for k, v in (got or {}).items() if k not in queued or k in ask}
            if not accounting_off and ask:
                # the requeued jobs still in the queue ride along: their earlier runs
                again = [a for a in ids if a not in ask and a in queued and _restarted(queued[a])]
                endings = self._endings([*wanted, *again], runs)
                for a in again:
                    runs.setdefault(a, [])  # asked: add_preemptions need not ask again
                # slurmdbd lags behind the controller a moment: no waiting here, the next
                # poll round asks again (exits.before_end)
                late = set(unsettled([a for a in ask if a in queued], endings))
        nodes: dict[str | None, tuple[str, list[Node]]] = {}  # one sinfo per round
        now = time.time()
        asked = set(ask)
        held: dict[str, Job] = {}  # ended by squeue, not yet by slurmdbd: as before its end
        for a in ids:
            job = queued.get(a)
            done = finished.get(a)
            if job is None:
                job = done
            elif done is not None:
                _add_steps(job, done)
            if job is not None and a in late and (before := before_end(job, now)) is not None:
                job = held[a] = before
            if job is not None:
                if a in asked and a not in held:
                    _add_endings(job, a, endings)
                out[a] = self._response(a, job)
                resp = out[a]
                if resp is not None and resp.state == AppState.PENDING:
                    why = self._never_fits(a, nodes)
                    if why:
                        resp.msg = f"pending: it can never start: {why} (Slurm says {job.components[0].reason or 'nothing'}); ask for less, or pick another -cfg partition"
            elif accounting_off and self._recall(a) is not None:
                out[a] = DescribeAppResponse(
                    app_id=a,
                    state=AppState.UNKNOWN,
                    msg="the job left the queue and Slurm accounting is off (no sacct), so"
                    " its end state is unknown; its logs are in its folder",
                )
            elif "_" in a:
                out[a] = self.removed_task(a, [*queued, *finished])
        if not accounting_off:
            add_preemptions(out, {**finished, **queued, **held}, runs, self._endings)
        return out

    def _never_fits(
        self, app_id: str, nodes: dict[str | None, tuple[str, list[Node]]]
    ) -> str | None:
        """Why the job can never start on its partition, from the needs remembered at
        submit and the partition's nodes (sinfo asked once per partition per round)."""
        known = self._recall(app_id) or {}
        needs = known.get("needs")
        if not needs or "_" in app_id:  # an array task: its array's needs are one replica's
            return None
        partition = known.get("partition")
        if partition not in nodes:
            try:
                text = run_slurm(
                    ["sinfo", "-N", "-h", "--format", "%N|%P|%c|%m|%G"], self._command_env()
                )
            except SlurmError:
                return None
            nodes[partition] = parse_sinfo(text, partition)
        name, found = nodes[partition]
        return never_fits(needs, name, found)

    def _response(self, app_id: str, job: Job) -> DescribeAppResponse:
        known = self._recall(app_id) or {}
        roles: dict[str, list[ReplicaStatus]] = {}
        for comp in job.components:
            role, _, idx = comp.name.rpartition("-")
            if not role or not idx.isdigit():
                role, idx = comp.name or "job", str(comp.offset)
            state = _replica_state(comp)
            msg = NONE
            if state == AppState.FAILED:
                code = f" (exit code {comp.exit_code})" if comp.exit_code else ""
                msg = f"{comp.state_text}{code}" + (f": {comp.reason}" if comp.reason else "")
            elif state == AppState.CANCELLED and comp.ending:
                msg = comp.ending
            roles.setdefault(role, []).append(
                ReplicaStatus(
                    id=int(idx),
                    state=state,
                    role=role,
                    hostname=comp.node,
                    structured_error_msg=msg,
                    exit_code=comp.exit_code if is_terminal(state) and comp.ran else None,
                    num_restarts=comp.restarts,
                    oom="OUT_OF_MEMORY" in comp.state_text,
                    signal=comp.signal if is_terminal(state) and comp.ran else None,
                    ended=comp.step_end if is_terminal(state) else None,
                    ending=comp.ending,
                    next_step=comp.next_step,
                )
            )
        state = combined_state(c.state for c in job.components)
        if state == AppState.CANCELLED and any(c.state == AppState.RUNNING for c in job.components):
            # a cancelled heterogeneous job's components end one after another: it has ended
            # once all have (the one still ending would read RUNNING, or FAILED on its 143)
            state = AppState.RUNNING
        lead = job.components[0]
        msg = NONE
        if state == AppState.FAILED:
            failed = [
                f"{c.name}: {c.state_text}" + (f" (exit code {c.exit_code})" if c.exit_code else "")
                for c in job.components
                if _replica_state(c) == AppState.FAILED
            ]
            msg = "; ".join(failed) or lead.state_text
            limit = next((c for c in job.components if c.next_step), None)
            if limit is not None:
                msg = f"{msg}: it {limit.ending}; {limit.next_step}"
        elif state == AppState.CANCELLED and lead.ending:
            msg = f"it {lead.ending}"
        elif state == AppState.PENDING and lead.reason:
            msg = pending_reason(lead.reason, app_id)
        ends = [c.end for c in job.components if c.end]
        return DescribeAppResponse(
            app_id=app_id,
            state=state,
            num_restarts=max(c.restarts for c in job.components),
            msg=msg,
            roles_statuses=[RoleStatus(r, sorted(v, key=lambda x: x.id)) for r, v in roles.items()],
            roles=[Role(name=r, image="", num_replicas=len(v)) for r, v in roles.items()],
            metadata={"workdir": known.get("workdir") or lead.workdir},
            # a job cancelled while it waited has start == end in Slurm's books: it never ran
            started=float(lead.start)
            if lead.start and state != AppState.PENDING and any(c.ran for c in job.components)
            else None,
            ended=float(max(ends)) if ends and is_terminal(state) else None,
        )

    # ---- list / cancel -------------------------------------------------------------------
    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        """The user's jobs of the last 7 days from sacct; without accounting, the ones still in
        the queue (a warning says so)."""
        jobs = self._sacct([], ["--starttime", "now-7days"])
        if jobs is None:
            warnings.warn(
                "Slurm accounting is off (sacct has no data): listing only the jobs still in"
                " the queue",
                stacklevel=2,
            )
            jobs = self._squeue()
        out = []
        for job_id, job in sorted(jobs.items(), key=lambda kv: _id_order(kv[0])):
            known = self._recall(job_id) or {}
            out.append(
                ListAppResponse(
                    app_id=job_id,
                    state=combined_state(c.state for c in job.components),
                    name=str(known.get("name") or job.components[0].name),
                )
            )
        return out

    def _cancel_existing(self, app_id: str) -> None:
        traps = bool((self._recall(app_id) or {}).get("term_cancel"))
        cancel_job(check_job_id(app_id), self._command_env(), script_traps=traps)


def create_scheduler(
    session_name: str, env: Mapping[str, str] | None = None, **_: Any
) -> SlurmScheduler:
    return SlurmScheduler(session_name, env=env)
