"""local_cwd's status from its files: the request and ``state.json`` that the supervisor
writes (``local_supervisor/``), read into a ``DescribeAppResponse`` by any process."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from torchx_nb.schedulers.api import DescribeAppResponse
from torchx_nb.schedulers.cancellers import cancel_ending
from torchx_nb.schedulers.local_cwd_request import role_from_json
from torchx_nb.schedulers.local_supervisor import is_same_process, kill_orphans
from torchx_nb.specs.api import NONE, AppState, ReplicaStatus, RoleStatus
from torchx_nb.specs.preemption import Preemption, stopping_line

PREEMPT_WHY = "torchx-nb preempt"  # the only preemption local_cwd knows


def read_pidfile(path: Path) -> tuple[int | None, int | None]:
    """(pid, start ticks) from ``supervisor.pid`` (``PID TICKS``; older files hold a pid only)."""
    try:
        parts = path.read_text().split()
        return int(parts[0]), (int(parts[1]) if len(parts) > 1 else None)
    except (FileNotFoundError, ValueError, IndexError):
        return None, None


def state_now(state_dir: Path) -> dict[str, Any] | None:
    """The job's ``state.json`` as it is now (None: not written yet, or not readable)."""
    try:
        with open(state_dir / "state.json") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def response_from_files(
    app_id: str,
    state_dir: Path,
    request: dict[str, Any],
    state: dict[str, Any] | None,
    again: bool = True,
) -> tuple[DescribeAppResponse, tuple[int | None, int | None]]:
    """The response, and the supervisor's pid and start time it was judged by. A supervisor
    found gone is judged on the state as it is then (``again``): it writes its final state and
    exits, both of which may have happened since ``state`` was read — a job that ended was
    read as one whose supervisor was killed."""
    resp = DescribeAppResponse(
        app_id=app_id,
        num_restarts=0,
        ui_url=f"file://{request['log_dir']}",
        roles=[role_from_json(r) for r in request["roles"]],
    )
    sup_pid, sup_ticks = read_pidfile(state_dir / "supervisor.pid")
    sup_alive = is_same_process(sup_pid, sup_ticks)
    if state is None:
        if (state_dir / "cancel").exists() and not sup_alive:
            resp.state = AppState.CANCELLED
            with contextlib.suppress(OSError, ValueError, AttributeError):
                by = json.loads((state_dir / "cancel").read_text()).get("by")
                resp.msg = f"it {cancel_ending({'cancelled_by': by}, None)} before it started"
        elif sup_pid is not None and not sup_alive:
            fresh = state_now(state_dir) if again else None
            if fresh is not None:  # written since the first read
                return response_from_files(app_id, state_dir, request, fresh, again=False)
            resp.state = AppState.FAILED
            resp.msg = (
                f"the job's supervisor exited before starting it: see {state_dir}/supervisor.log"
            )
        else:
            resp.state = AppState.PENDING
        resp.roles_statuses = [
            RoleStatus(
                role,
                [ReplicaStatus(i, resp.state, role, "localhost") for i in range(len(params))],
            )
            for role, params in request["role_params"].items()
        ]
        return resp, (sup_pid, sup_ticks)
    replica_states: list[AppState] = []
    preempting = state.get("preempting")
    for role, reps in state["roles"].items():
        statuses = []
        for i, rep in enumerate(reps):
            code = rep["exitcode"]
            if preempting and not state.get("final_state"):
                rs = AppState.RUNNING  # stopped to run again
            elif code is None:
                rs = AppState.CANCELLED if state["final_state"] == "CANCELLED" else AppState.RUNNING
            elif code == 0:
                rs = AppState.SUCCEEDED
            elif state["cancelled"]:
                rs = AppState.CANCELLED
            else:
                rs = AppState.FAILED
            replica_states.append(rs)
            statuses.append(
                ReplicaStatus(
                    i,
                    rs,
                    role,
                    "localhost",
                    structured_error_msg=error_msg(rep),
                    exit_code=code,
                    # Popen's return code: -N is signal N; a positive code is the
                    # process's own (os._exit(139) is not a SIGSEGV)
                    signal=None if code is None else max(0, -code),
                    ended=rep.get("ended"),
                )
            )
        resp.roles_statuses.append(RoleStatus(role, statuses))
    resp.started = state.get("started")
    resp.num_restarts = len(state.get("attempts") or [])
    resp.preemptions = preemptions(state)
    supervisor = (state.get("supervisor_pid"), state.get("supervisor_start_ticks", sup_ticks))
    final = state.get("final_state")
    if final:
        resp.state = AppState[final]
        ends = [rep.get("ended") for reps in state["roles"].values() for rep in reps]
        resp.ended = max((e for e in ends if e), default=None) or state.get("ended")
    elif not is_same_process(*supervisor):
        fresh = state_now(state_dir) if again else None
        if fresh is not None and fresh.get("final_state"):  # it ended since the first read
            return response_from_files(app_id, state_dir, request, fresh, again=False)
        stopped = kill_orphans(state)
        if (state_dir / "cancel").exists():
            resp.state = AppState.CANCELLED
        else:
            resp.state = AppState.FAILED
            resp.msg = "the job's supervisor was killed" + (
                f"; {stopped} leftover processes were stopped" if stopped else ""
            )
    elif state["cancelled"]:
        resp.state = AppState.RUNNING
        resp.msg = "cancelling"
    elif isinstance(preempting, (int, float)):
        resp.state = AppState.RUNNING
        resp.msg = stopping_line(preempting, int(state.get("attempt") or 1) + 1)
    else:
        resp.state = AppState.RUNNING
    ending = cancel_ending(state, supervisor[0])
    if resp.state == AppState.CANCELLED and ending:
        resp.msg = f"it {ending}"
        for role_status in resp.roles_statuses:
            for rep in role_status.replicas:
                if rep.state == AppState.CANCELLED:
                    rep.ending = ending
    failed = [
        f"{role}/{i} exited with code {rep['exitcode']}"
        for role, reps in state["roles"].items()
        for i, rep in enumerate(reps)
        if rep["exitcode"] not in (None, 0) and not state["cancelled"] and not preempting
    ]
    if failed and resp.msg == NONE:
        resp.msg = "; ".join(failed)
    log_errors = sorted(
        {
            f"{role}/{i} {rep['log_error']}"
            for role, reps in state["roles"].items()
            for i, rep in enumerate(reps)
            if rep.get("log_error")
        }
    )
    if log_errors:
        resp.msg = "; ".join(([] if resp.msg == NONE else [resp.msg]) + log_errors)
    errors = [
        r.structured_error_msg
        for rs in resp.roles_statuses
        for r in rs.replicas
        if r.structured_error_msg != NONE
    ]
    if errors:
        resp.structured_error_msg = errors[0]
    return resp, supervisor


def error_msg(rep: dict[str, Any]) -> str:
    if rep.get("error"):
        return str(rep["error"])
    err_file = Path(rep["combined"]).with_name("error.json")
    if err_file.exists():
        try:
            return err_file.read_text()
        except OSError:
            return NONE
    return NONE


def preemptions(state: dict[str, Any]) -> list[Preemption]:
    """The preempted attempts the supervisor recorded, each with when the next one started."""
    done = [a for a in state.get("attempts") or [] if isinstance(a, dict)]
    starts = [a.get("started") for a in done[1:]] + [state.get("attempt_started")]
    out = []
    for attempt, resumed in zip(done, starts, strict=False):  # no attempts: none
        at = attempt.get("preempted_at") or attempt.get("ended")
        if isinstance(at, (int, float)):
            resumed_at = float(resumed) if isinstance(resumed, (int, float)) else None
            out.append(Preemption(at=float(at), why=PREEMPT_WHY, resumed_at=resumed_at))
    return out
