"""``run_notebook(...)``: a whole notebook as a job from Python, through the submit path the
CLI's ``run-notebook`` and ``%torchx run-notebook`` take."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from torchx_nb.notebook.handle import JobHandle
from torchx_nb.runner import Runner, RunRequest


def run_notebook(
    path: str | os.PathLike[str],
    parameters: Mapping[str, Any] | None = None,
    *,
    scheduler: str | None = None,
    cfg: Mapping[str, Any] | None = None,
    workspace: str | None = None,
    image: str | None = None,
    name: str | None = None,
    resource: str | None = None,
    env: Mapping[str, str] | None = None,
    cell_timeout: float | None = None,
    packages: str | None = None,
    runner: Runner | None = None,
) -> JobHandle:
    """Run the notebook at ``path`` as a job: its folder is the workspace (``workspace``
    names another folder holding it), ``parameters`` are injected after its ``parameters``
    cell (values Python literals: numbers, text, booleans, None, lists and dicts of them),
    ``cfg`` the scheduler's options, ``packages`` the environment (auto, none or a
    requirements file). Returns the job; ``.wait()`` then ``.notebook()``
    fetches the executed notebook."""
    runner = runner or Runner()
    request = RunRequest(
        run_notebook=os.fspath(path),
        parameters=dict(parameters or {}),
        cell_timeout=cell_timeout,
        scheduler=scheduler,
        workspace=workspace,
        image=image,
        name=name,
        resource=resource,
        env=dict(env or {}),
        packages=packages,
    )
    if cfg:
        request.scheduler_defaults = {runner.request_scheduler(request): dict(cfg)}
    prepared = runner.prepare(request, build=True)
    return JobHandle(runner.submit(prepared), runner)


__all__ = ["run_notebook"]
