"""Sweeps: one cell (or component) run once per point of a parameter grid, watched and
gathered as one.

A backend that ``SubmitsArrays`` (Slurm, AWS Batch, Kubernetes' Indexed Jobs, GCP Batch's task
count) gets every trial in one native array job: one submit call, one describe per poll round.
Elsewhere each trial is a job of its own, at most ``max_parallel`` at once (a driver thread
submits the next as one ends). Either way each trial has its own handle, logs, state and
cancel, and the job store records it under its sweep, so ``Sweep.attach`` finds the sweep again
after a kernel restart.

One module per concern: ``plan`` (the request, its grid and how trials go), ``handle`` (the
``Sweep``), ``driver`` (the thread that submits trials as slots free up) and ``text`` (the
states as rows and a summary); this module starts a sweep from them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from torchx_nb.errors import one_line
from torchx_nb.grid import Value, env_value
from torchx_nb.runner import Runner, RunRequest
from torchx_nb.schedulers.ids import random_id
from torchx_nb.sweeps.driver import Driver
from torchx_nb.sweeps.handle import Sweep, SweepPartlySubmitted, TrialsNotCancelled
from torchx_nb.sweeps.interrupt import SweepInterrupted, deferred_interrupt
from torchx_nb.sweeps.plan import (
    SweepRequest,
    _array_request,
    _plan,
    _trial_request,
    substitute,
)
from torchx_nb.sweeps.text import NOT_SUBMITTED, sweep_rows, sweep_summary, sweep_text


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
    if prepared.preview:
        text += "\n" + prepared.preview
    return text


def start(runner: Runner, request: SweepRequest) -> Sweep:
    """Check the grid, build once, and submit: one native array where the scheduler has them
    (a cell, one replica), else one job per trial under ``max_parallel``. Every bad input is
    one line, before anything is built or submitted. An interrupt while trials are submitted
    lets the trial in flight finish its submit, cancels every trial submitted and raises
    ``SweepInterrupted`` (a ``KeyboardInterrupt`` holding the sweep). A trial that cannot be
    submitted (its backend refuses it) stops the sweep there: the trials before it stay
    submitted, in the job store and cancellable, and ``SweepPartlySubmitted`` (holding the
    sweep) says which were submitted and why that one was not."""
    plan = _plan(runner, request)
    run = request.run
    points = plan.points
    scheduler = plan.scheduler
    sweep_id = f"sweep-{random_id()[:10]}"
    encoded = [json.dumps(p) for p in points]
    if plan.array is not None:
        prepared = runner.prepare(_array_request(run, plan), build=True)
        with deferred_interrupt() as interrupted:
            handles = runner.submit_array(prepared, encoded, request.max_parallel, sweep_id)
        arrayed = Sweep(runner, sweep_id, points, list(handles), True, request.metrics, scheduler)
        if interrupted:
            _cancel_interrupted(arrayed)
        if request.fail_fast:  # the driver only watches, and cancels the rest on a failure
            arrayed._driver = Driver(arrayed, [], None, True, None)
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
    failed: tuple[int, Exception] | None = None
    with deferred_interrupt() as interrupted:
        for i, req in now:
            try:
                sweep._set_handle(i, submit(i, req))
            except Exception as e:  # the trials before it are submitted: they are said
                failed = (i, e)
                break
            if interrupted:
                break
    if interrupted:
        _cancel_interrupted(sweep)
    if failed is not None:
        sweep.stopped = True
        if not any(sweep.handles):
            raise failed[1]  # nothing was submitted: the error as it is
        raise SweepPartlySubmitted(sweep, failed[0], one_line(failed[1])) from failed[1]
    if later or request.fail_fast:
        sweep._driver = Driver(sweep, later, request.max_parallel, request.fail_fast, submit)
        sweep._driver.start()
    return sweep


def _cancel_interrupted(sweep: Sweep) -> NoReturn:
    """Cancel what an interrupted sweep submitted and raise ``SweepInterrupted``, naming the
    trials whose cancel failed (they may still run)."""
    submitted = sum(h is not None for h in sweep.handles)
    try:
        sweep.cancel()
    except TrialsNotCancelled as e:
        raise SweepInterrupted(sweep, submitted, e.failed) from None
    raise SweepInterrupted(sweep, submitted)


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


__all__ = [
    "NOT_SUBMITTED",
    "Sweep",
    "SweepInterrupted",
    "SweepPartlySubmitted",
    "SweepRequest",
    "TrialsNotCancelled",
    "dryrun",
    "start",
    "substitute",
    "sweep",
    "sweep_rows",
    "sweep_summary",
    "sweep_text",
]
