"""Sweeps: one cell (or component) run once per point of a parameter grid, watched and
gathered as one.

A backend that ``SubmitsArrays`` (Slurm, AWS Batch, Kubernetes' Indexed Jobs, GCP Batch's task
count) gets every trial in one native array job: one submit call, one describe per poll round.
Elsewhere each trial is a job of its own, at most ``max_parallel`` at once (a driver thread
submits the next as one ends). Either way each trial has its own handle, logs, state and
cancel, and the job store records it under its sweep, so ``Sweep.attach`` finds the sweep again
after a kernel restart."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from torchx_nb.errors import one_line
from torchx_nb.grid import BadGrid, Grid, Value, env_name, env_value
from torchx_nb.metrics import MetricLog, MetricSpec
from torchx_nb.runner import Runner, RunRequest
from torchx_nb.schedulers.abilities import SubmitsArrays
from torchx_nb.schedulers.ids import random_id
from torchx_nb.specs.api import AppState, AppStatus, TorchxNbError, is_terminal
from torchx_nb.specs.program import program_of

if TYPE_CHECKING:
    import pandas as pd

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
NOT_SUBMITTED = "NOT_SUBMITTED"


def _state_counts(states: Sequence[str], stopped: bool = False) -> str:
    done = states.count("SUCCEEDED")
    failed = sum(states.count(s) for s in ("FAILED", "CANCELLED", "UNKNOWN"))
    unsent = states.count("NOT_SUBMITTED") if stopped else 0
    waiting = sum(states.count(s) for s in ("NOT_SUBMITTED", "SUBMITTED", "PENDING")) - unsent
    running = states.count("RUNNING")
    text = f"{done} done · {failed} failed · {running} running · {waiting} waiting"
    return text + (f" · {unsent} not run" if unsent else "")


def sweep_rows(
    points: Sequence[Mapping[str, object]],
    handles: Sequence[str | None],
    statuses: Sequence[AppStatus | None],
) -> list[tuple[int, Mapping[str, object], str, str | None]]:
    """(trial, parameters, state, handle) per trial."""
    return [
        (i, p, (s.state.name if s else "SUBMITTED") if h else NOT_SUBMITTED, h)
        for i, (p, h, s) in enumerate(zip(points, handles, statuses, strict=True))
    ]


def sweep_summary(states: Sequence[str], stopped: bool = False) -> str:
    """``2 done · 1 failed · 1 running · 0 waiting`` (and, once a sweep was stopped, how
    many trials it never ran)."""
    return _state_counts(states, stopped)


def sweep_text(
    sweep_id: str,
    points: Sequence[Mapping[str, object]],
    handles: Sequence[str | None],
    statuses: Sequence[AppStatus | None],
    array: bool,
    stopped: bool = False,
) -> str:
    """The sweep as text: a summary line, then one line per trial."""
    rows = sweep_rows(points, handles, statuses)
    how = "one native array job" if array else "one job per trial"
    names = list(points[0]) if points else []
    summary = sweep_summary([r[2] for r in rows], stopped)
    lines = [
        f"{sweep_id}: {len(rows)} trials, {how}: {summary}",
        "  trial  " + "  ".join(names) + "  state  handle",
    ]
    for i, p, state, handle in rows:
        values = "  ".join(str(p[n]) for n in names)
        lines.append(f"  {i:>5}  {values}  {state}  {handle or '-'}")
    return "\n".join(lines)


@dataclass
class SweepRequest:
    """A sweep: the run every trial shares, the grid, and how trials are let go."""

    run: RunRequest
    params: Mapping[str, Sequence[Value]] | Sequence[str]
    zipped: bool = False
    max_parallel: int | None = None
    fail_fast: bool = False
    metrics: list[MetricSpec] = field(default_factory=list)


def substitute(
    args: Sequence[str] | Mapping[str, Any], point: Mapping[str, Value]
) -> list[str] | dict[str, Any]:
    """``${name}`` in a component's arguments becomes the trial's value of ``name``."""

    def value(m: re.Match[str]) -> str:
        return env_value(point[m.group(1)])

    if isinstance(args, Mapping):
        return {k: _PLACEHOLDER.sub(value, v) if isinstance(v, str) else v for k, v in args.items()}
    return [_PLACEHOLDER.sub(value, a) for a in args]


def _check_placeholders(args: Sequence[str] | Mapping[str, Any], grid: Grid) -> None:
    texts = [v for v in args.values() if isinstance(v, str)] if isinstance(args, Mapping) else args
    for a in texts:
        for name in _PLACEHOLDER.findall(a):
            if name not in grid.names:
                raise BadGrid(
                    f"${{{name}}} in the arguments is not a -p parameter"
                    f" (parameters: {', '.join(grid.names)})"
                )


class Sweep:
    """The trials of one sweep, in grid order: ``handles``, ``statuses()``, ``wait()``,
    ``cancel()``, ``results()`` (a DataFrame) and ``best(metric)``."""

    def __init__(
        self,
        runner: Runner,
        sweep_id: str,
        points: list[dict[str, Value]],
        handles: list[str | None],
        array: bool = False,
        metrics: Sequence[MetricSpec] = (),
        scheduler: str = "",
    ) -> None:
        self.runner = runner
        self.id = sweep_id
        self.points = points
        self.array = array
        self.scheduler = scheduler
        self.metric_specs = list(metrics)
        self._handles = handles
        self._lock = threading.Lock()
        self._submitting = threading.Lock()  # held while one trial is prepared and submitted
        self._driver: _Driver | None = None
        self.error: str | None = None  # why the driver stopped submitting, if it failed
        self.stopped = False  # cancelled (or --fail-fast): no more trials are submitted
        self.view: Any = None

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for rec in self._records():
            counts[rec] = counts.get(rec, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return f"Sweep({self.id}, {len(self.points)} trials: {summary})"

    def _records(self) -> list[str]:
        by_handle = {r.handle: r.state for r in self.runner.jobstore.trials(self.id)}
        return [by_handle.get(h, NOT_SUBMITTED) if h else NOT_SUBMITTED for h in self.handles]

    @property
    def handles(self) -> list[str | None]:
        """Each trial's handle, in grid order (None: not submitted yet, or never)."""
        with self._lock:
            return list(self._handles)

    @property
    def names(self) -> list[str]:
        return list(self.points[0]) if self.points else []

    def _set_handle(self, i: int, handle: str) -> None:
        with self._lock:
            self._handles[i] = handle

    @property
    def submitting(self) -> bool:
        """Whether trials are still waiting for a free slot."""
        return self._driver is not None and self._driver.is_alive()

    def statuses(self) -> list[AppStatus | None]:
        """Each trial's status (None for one not submitted), one batched call per scheduler."""
        handles = [h for h in self.handles if h]
        found = self.runner.status_many(handles) if handles else {}
        return [found.get(h) if h else None for h in self.handles]

    def done(self) -> bool:
        if self.submitting:
            return False
        return all(s is None or is_terminal(s.state) for s in self.statuses())

    def wait(self, timeout: float | None = None, interval: float = 1.0) -> list[AppStatus | None]:
        """Until every trial has ended (or ``timeout`` seconds); each trial's status. The trials
        are watched through the process's one refresher (the widgets' too): a sweep waited on
        asks its scheduler nothing of its own. ``interval``: how often, at most, it looks for
        trials submitted since."""
        from torchx_nb.refresher import get_refresher

        refresher = get_refresher(self.runner)
        deadline = time.monotonic() + timeout if timeout is not None else None
        heard: dict[str, AppStatus | None] = {}
        changed = threading.Event()
        watches: dict[str, int] = {}

        def hear(handle: str) -> Callable[[AppStatus | None, BaseException | None], None]:
            def callback(status: AppStatus | None, error: BaseException | None) -> None:
                if error is None:
                    heard[handle] = status
                    changed.set()

            return callback

        def ended(handle: str | None) -> bool:
            if handle is None:
                return True
            if handle not in heard:
                return False
            status = heard[handle]
            return status is None or is_terminal(status.state)

        try:
            while True:
                submitting = self.submitting
                handles = self.handles
                for h in handles:
                    if h and h not in watches:
                        watches[h] = refresher.watch(h, hear(h))
                if all(ended(h) for h in handles) and not submitting:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                changed.wait(timeout=interval if left is None else min(interval, left))
                changed.clear()
        finally:
            for watch_id in watches.values():
                refresher.unwatch(watch_id)
        missing = [h for h in self.handles if h and h not in heard]
        if missing:  # ended before the refresher's first look at them, or a timeout
            heard.update(self.runner.status_many(missing))
        statuses = [heard.get(h) if h else None for h in self.handles]
        if self.view is not None:
            self.view.settle(statuses)
        return statuses

    def cancel(self) -> None:
        """Stop submitting trials and cancel every trial not yet ended (a native array in
        one go, where its backend stops a whole array at once). A trial being prepared at
        that moment (a slow image build) is waited for and cancelled with the rest: no
        trial runs on after ``cancel()``."""
        self.stopped = True
        with self._submitting:
            live = [
                handle
                for handle, status in zip(self.handles, self.statuses(), strict=True)
                if handle and (status is None or not is_terminal(status.state))
            ]
        if self.array and live:
            self.runner.cancel_array(live)
            return
        for handle in live:
            # one trial that cannot be cancelled does not keep the others
            with contextlib.suppress(Exception):
                self.runner.cancel(handle)

    def watch(self) -> None:
        """Show the live widgets again in this notebook (after a kernel restart, or in another
        notebook): ``%torchx watch`` for this sweep. Without widgets it follows its trials in text
        until they end."""
        from torchx_nb.watching import watch_in_kernel

        watch_in_kernel(self.id)

    def results(self) -> pd.DataFrame:
        """One row per trial, in grid order: its parameters, ``state``, ``exit_code``,
        ``result`` (the cell's value, for a trial that succeeded), ``error`` (what a failed
        trial raised), the last value of each metric, and ``handle``."""
        import pandas as pd

        rows = []
        for i, (point, handle, status) in enumerate(
            zip(self.points, self.handles, self.statuses(), strict=True)
        ):
            row: dict[str, Any] = {"trial": i, **point}
            row["state"] = status.state.name if status else NOT_SUBMITTED
            codes = [r.exit_code for rs in (status.roles if status else []) for r in rs.replicas]
            row["exit_code"] = next((c for c in codes if c), codes[0] if codes else None)
            row["result"] = None
            row["error"] = None
            if handle and status is not None and is_terminal(status.state):
                try:
                    if status.state == AppState.SUCCEEDED:
                        row["result"] = self.runner.result(handle, status)
                    else:
                        row["error"] = self.runner.result_repr(handle)
                except Exception as e:
                    row["error"] = one_line(e)
            for name, value in self._last_metrics(handle).items():
                row[name] = value
            row["handle"] = handle
            rows.append(row)
        frame = pd.DataFrame(rows)
        for column in ("result", "error"):  # values as they are: no int turned float by a None
            frame[column] = pd.Series([r[column] for r in rows], dtype=object)
        return frame

    def _last_metrics(self, handle: str | None) -> dict[str, float | None]:
        if not self.metric_specs:
            return {}
        log = MetricLog(self.metric_specs)
        if handle:
            try:
                app = self.runner.describe(handle)
                role = app.roles[0].name if app and app.roles else None
                if role:
                    log.feed_all(self.runner.log_lines(handle, role, 0))
            except Exception:
                pass  # a trial whose log cannot be read has no metric values
        series = log.series()
        return {
            m.name: (series[m.name][-1][1] if series.get(m.name) else None)
            for m in self.metric_specs
        }

    def best(self, metric: str, mode: str = "min") -> pd.Series:
        """The row of ``results()`` with the lowest (``mode="min"``) or highest (``"max"``)
        ``metric``: a column (a ``--metric``), or a key of the trials' dict results."""
        if mode not in ("min", "max"):
            raise TorchxNbError(f"best: mode is 'min' or 'max', not {mode!r}")
        frame = self.results()
        if metric in frame.columns and metric not in ("result", "state", "handle"):
            values = frame[metric]
        else:
            values = frame["result"].map(
                lambda r: r.get(metric) if isinstance(r, Mapping) else None
            )
        values = values.map(lambda v: v if isinstance(v, (int, float)) and v == v else None)
        if values.isna().all():
            raise TorchxNbError(
                f"best: no trial has a value for {metric!r} (a --metric name, or a key of the"
                " trials' dict results)"
            )
        index = values.astype(float).idxmin() if mode == "min" else values.astype(float).idxmax()
        return frame.loc[index]

    @classmethod
    def attach(cls, runner: Runner, sweep_id: str) -> Sweep:
        """A sweep found again in the job store (after a kernel restart, from another
        process): its trials, in grid order."""
        records = runner.jobstore.trials(sweep_id)
        if not records:
            raise TorchxNbError(f"no sweep {sweep_id!r} in the job store (see %torchx list)")
        size = max(r.trial or 0 for r in records) + 1
        points: list[dict[str, Value]] = [{} for _ in range(size)]
        handles: list[str | None] = [None] * size
        for r in records:
            i = r.trial or 0
            points[i] = json.loads(r.params or "{}")
            handles[i] = r.handle
        return cls(runner, sweep_id, points, handles, scheduler=records[0].scheduler)


class _Driver(threading.Thread):
    """Submits the trials still waiting as slots free up (``max_parallel``), and with
    ``fail_fast`` cancels the rest when one fails."""

    def __init__(
        self,
        sweep: Sweep,
        pending: list[tuple[int, RunRequest]],
        max_parallel: int | None,
        fail_fast: bool,
        submit: Any,
    ) -> None:
        super().__init__(daemon=True, name=f"torchx-nb-{sweep.id}")
        self.sweep = sweep
        self.pending = pending
        self.max_parallel = max_parallel
        self.fail_fast = fail_fast
        self.submit = submit

    def run(self) -> None:
        sweep = self.sweep
        delay = 0.1
        try:
            while not sweep.stopped:
                statuses = sweep.statuses()
                if self.fail_fast and any(s and s.state == AppState.FAILED for s in statuses):
                    sweep.cancel()
                    return
                running = sum(
                    1
                    for h, s in zip(sweep.handles, statuses, strict=True)
                    if h and (s is None or not is_terminal(s.state))
                )
                if not self.pending and (not self.fail_fast or running == 0):
                    return
                free = (self.max_parallel or len(self.pending)) - running
                while free > 0 and self.pending and not sweep.stopped:
                    with sweep._submitting:
                        if sweep.stopped:
                            break
                        i, request = self.pending.pop(0)
                        sweep._set_handle(i, self.submit(i, request))
                    free -= 1
                    delay = 0.1
                time.sleep(delay)
                delay = min(delay * 1.5, 2.0 if sweep.runner.is_local(sweep.scheduler) else 5.0)
        except Exception as e:
            sweep.error = one_line(e)
            sweep.stopped = True


def _is_cell(run: RunRequest) -> bool:
    """Whether the run is a notebook cell or a whole notebook (its source, its path, or an
    AppDef made from one): only they run under the cell runner, which picks an array task's
    point."""
    return (
        run.cell is not None
        or run.run_notebook is not None
        or (run.app is not None and program_of(run.app) is not None)
    )


@dataclass
class _Plan:
    grid: Grid
    scheduler: str
    array: SubmitsArrays | None  # the scheduler, when the trials go as one native array

    @cached_property
    def points(self) -> list[dict[str, Value]]:
        return self.grid.points()


def _plan(runner: Runner, request: SweepRequest) -> _Plan:
    """The grid's points and how they go, every rule checked (one line each)."""
    grid = Grid.of(request.params, request.zipped)
    if request.max_parallel is not None and request.max_parallel < 1:
        raise BadGrid(f"--max-parallel must be 1 or more, not {request.max_parallel}")
    run = request.run
    _check_placeholders(run.component_args, grid)
    for name in grid.names:
        if name in run.env or env_name(name) in run.env:
            raise BadGrid(f"-p {name} is also set with --env; give it in one place")
    scheduler = runner.request_scheduler(run)
    sched = runner.get_scheduler(scheduler)
    run = replace(run, scheduler=scheduler)
    cell = _is_cell(run)
    if cell and runner.request_workspace(run) is None:
        raise BadGrid(
            "a cell sweep needs a workspace: each trial's values reach the cell through the"
            " runner that ships in it; drop --workspace none (a component sweep takes ${NAME}"
            " in its arguments)"
        )
    use_array = (
        isinstance(sched, SubmitsArrays)
        and cell
        and (request.max_parallel is None or sched.throttles_arrays)
        and sched.can_array(runner.request_app(run), runner.request_opts(run))
    )
    return _Plan(grid, scheduler, sched if use_array else None)  # type: ignore[arg-type]


def _array_request(run: RunRequest, plan: _Plan) -> RunRequest:
    assert plan.array is not None
    env = {
        **run.env,
        "TORCHX_NB_GRID": json.dumps(plan.grid.spec()),
        "TORCHX_NB_TRIAL_FROM": plan.array.array_index_env,
    }
    return replace(run, scheduler=plan.scheduler, env=env)


def _trial_request(run: RunRequest, plan: _Plan, point: dict[str, Value]) -> RunRequest:
    env = {**run.env, **{env_name(k): env_value(v) for k, v in point.items()}}
    if _is_cell(run):
        env["TORCHX_NB_PARAMS"] = json.dumps(point)
    return replace(
        run,
        scheduler=plan.scheduler,
        env=env,
        component_args=substitute(run.component_args, point),
    )


def dryrun(runner: Runner, request: SweepRequest) -> str:
    """What ``start`` would send, built and submitted nothing: the points, and the native
    array's request (or the first trial's), secrets masked."""
    plan = _plan(runner, request)
    run = request.run
    n = len(plan.points)
    if plan.array is not None:
        prepared = runner.prepare(_array_request(run, plan))
        info = plan.array.array_request(prepared.info, n, request.max_parallel)
        how, shown = "one native array job", info
    else:
        prepared = runner.prepare(_trial_request(run, plan, plan.points[0]))
        how = "one job per trial" + (
            f", at most {request.max_parallel} at once" if request.max_parallel else ""
        )
        shown = prepared.info
    names = list(plan.points[0])
    lines = [
        f"{plan.scheduler} sweep of {n} trials, {how} (dryrun; nothing built or submitted):",
        "  trial  " + "  ".join(names),
        *(
            f"  {i:>5}  " + "  ".join(env_value(p[k]) for k in names)
            for i, p in enumerate(plan.points[:20])
        ),
    ]
    if n > 20:
        lines.append(f"  … {n - 20} more")
    label = "the array's request" if plan.array is not None else "trial 0's request"
    text = "\n".join(lines) + f"\n{label}:\n{shown}"
    if prepared.info.workspace_preview:
        text += "\n" + prepared.info.workspace_preview
    return text


def start(runner: Runner, request: SweepRequest) -> Sweep:
    """Check the grid, build once, and submit: one native array where the scheduler has them
    (a cell, one replica), else one job per trial under ``max_parallel``. Every bad input is
    one line, before anything is built or submitted."""
    plan = _plan(runner, request)
    run = request.run
    points = plan.points
    scheduler = plan.scheduler
    sweep_id = f"sweep-{random_id()[:10]}"
    encoded = [json.dumps(p) for p in points]
    if plan.array is not None:
        prepared = runner.prepare(_array_request(run, plan), build=True)
        handles = runner.submit_array(prepared, encoded, request.max_parallel, sweep_id)
        arrayed = Sweep(runner, sweep_id, points, list(handles), True, request.metrics, scheduler)
        if request.fail_fast:  # the driver only watches, and cancels the rest on a failure
            arrayed._driver = _Driver(arrayed, [], None, True, None)
            arrayed._driver.start()
        return arrayed

    requests = [(i, _trial_request(run, plan, p)) for i, p in enumerate(points)]
    # the first trial is checked and built before anything else: a bad run is one line
    first = runner.prepare(requests[0][1], build=True)
    sweep = Sweep(runner, sweep_id, points, [None] * len(points), False, request.metrics, scheduler)

    def submit(i: int, req: RunRequest) -> str:
        prepared = first if i == 0 else runner.prepare(req, build=True)
        return runner.submit(prepared, sweep=sweep_id, trial=str(i), params=encoded[i])

    limit = request.max_parallel or len(requests)
    now, later = requests[:limit], requests[limit:]
    for i, req in now:
        sweep._set_handle(i, submit(i, req))
    if later or request.fail_fast:
        sweep._driver = _Driver(sweep, later, request.max_parallel, request.fail_fast, submit)
        sweep._driver.start()
    return sweep


def sweep(
    params: Mapping[str, Sequence[Value]] | Sequence[str],
    *,
    cell: str | None = None,
    component: str | None = None,
    component_args: Iterable[str] = (),
    scheduler: str | None = None,
    cfg: Sequence[str] = (),
    workspace: str | None = None,
    zipped: bool = False,
    max_parallel: int | None = None,
    fail_fast: bool = False,
    metrics: Sequence[str] = (),
    runner: Runner | None = None,
    **run_fields: Any,
) -> Sweep:
    """The Python API: ``sweep({"lr": [0.1, 0.01]}, cell="...")`` or ``component="utils.sh",
    component_args=["echo", "${lr}"]``; the other fields of a ``RunRequest`` (``env``,
    ``image``, ``name``, ``j``...) pass through."""
    from torchx_nb.metrics import parse_metric
    from torchx_nb.runner import get_runner

    request = SweepRequest(
        RunRequest(
            scheduler=scheduler,
            cfg=list(cfg),
            workspace=workspace,
            cell=cell,
            component=component,
            component_args=list(component_args),
            **run_fields,
        ),
        params,
        zipped,
        max_parallel,
        fail_fast,
        [parse_metric(m) for m in metrics],
    )
    return start(runner or get_runner(), request)
