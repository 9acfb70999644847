"""A sweep planned: the request, its grid and placeholders checked, and whether the trials go
as one native array (a backend that ``SubmitsArrays``) or one job per trial."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from torchx_nb.grid import BadGrid, Grid, Value, env_name, env_value
from torchx_nb.metrics import MetricSpec
from torchx_nb.runner import Runner, RunRequest
from torchx_nb.schedulers.abilities import SubmitsArrays
from torchx_nb.specs.program import program_of

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
    if run.run_notebook is not None:  # as run-notebook's -p: a name the cell lacks is warned
        from torchx_nb.components.notebook import warn_unknown_names

        warn_unknown_names(run.run_notebook, list(grid.names))
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
