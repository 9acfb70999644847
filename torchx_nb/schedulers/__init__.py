"""Scheduler discovery: built-in backends plus any registered under the entry-point group
``torchx_nb.schedulers``. Backend modules are imported only when a scheduler is created."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from torchx_nb.schedulers.api import Scheduler

ENTRY_POINT_GROUP = "torchx_nb.schedulers"

DEFAULT_SCHEDULER_MODULES: dict[str, str] = {
    "local_cwd": "torchx_nb.schedulers.local_cwd",
    "local_docker": "torchx_nb.schedulers.local_docker",
    "aws_batch": "torchx_nb.schedulers.aws_batch",
    "aws_sagemaker": "torchx_nb.schedulers.aws_sagemaker",
    "slurm": "torchx_nb.schedulers.slurm",
    "gcp_batch": "torchx_nb.schedulers.gcp_batch",
    "kubernetes": "torchx_nb.schedulers.kubernetes",
}


class SchedulerFactory(Protocol):
    def __call__(self, session_name: str, **kwargs: Any) -> Scheduler[Any]: ...


def _lazy_module_factory(module: str) -> SchedulerFactory:
    def factory(session_name: str, **kwargs: Any) -> Scheduler[Any]:
        return importlib.import_module(module).create_scheduler(session_name, **kwargs)

    factory.module = module  # type: ignore[attr-defined]
    return factory


def _lazy_entry_point_factory(load: Callable[[], Any], module: str) -> SchedulerFactory:
    def factory(session_name: str, **kwargs: Any) -> Scheduler[Any]:
        return load()(session_name, **kwargs)

    factory.module = module  # type: ignore[attr-defined]
    return factory


def builtin_scheduler_factories() -> dict[str, SchedulerFactory]:
    """Factories of the backends shipped in this package (no entry-point scan: fast)."""
    return {name: _lazy_module_factory(mod) for name, mod in DEFAULT_SCHEDULER_MODULES.items()}


def get_scheduler_factories() -> dict[str, SchedulerFactory]:
    """Name → factory for every known backend; the first is the default."""
    from importlib.metadata import entry_points

    factories = builtin_scheduler_factories()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in factories:
            continue  # built-in names are never shadowed by plugins
        factories[ep.name] = _lazy_entry_point_factory(ep.load, ep.module)
    return factories


def get_default_scheduler_name() -> str:
    return "local_cwd"
