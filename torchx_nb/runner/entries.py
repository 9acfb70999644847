"""The Runner's TorchX-named methods that its parts' composite calls go through.

TorchX users subclass ``Runner`` and override ``schedule``, ``dryrun`` or ``status``;
TorchX's ``run`` is ``dryrun`` then ``schedule``, ``run_component`` is ``dryrun_component``
then ``schedule``, and ``wait`` polls ``status``. So the parts doing those composite calls
make them through the Runner's own (public, overridable) methods, handed to them at
construction as one of these protocols — a part used on its own goes through its own.

The calls are TorchX 0.7.0's, with its arguments only (``dryrun(app, scheduler, cfg=…,
workspace=…, parent_run_id=…)``, ``schedule(dryrun_info)``), so an override written to
TorchX's signatures is called as TorchX calls it; what ``run`` adds (the workspace built, the
environment, the job store's record) reaches the Runner's own ``dryrun`` beneath the
override through ``run_call`` (a context variable), not through extra arguments."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from torchx_nb.specs.api import AppDef, AppDryRunInfo, AppHandle, AppStatus, CfgVal


@dataclass(frozen=True)
class RunCall:
    """What a ``run`` (or ``run_component``) asks of the ``dryrun`` it makes: the workspace
    built and pushed, the environment (``packages``) and the job store's ``record``."""

    build_workspace: bool = False
    packages: str = "auto"
    record: Mapping[str, str | None] = field(default_factory=dict)


_RUN_CALL: contextvars.ContextVar[RunCall | None] = contextvars.ContextVar(
    "torchx_nb_run_call", default=None
)


@contextlib.contextmanager
def run_call(call: RunCall) -> Iterator[None]:
    """Within: the Runner's ``dryrun`` (under a subclass's override called with TorchX's
    arguments only) does what ``call`` asks."""
    token = _RUN_CALL.set(call)
    try:
        yield
    finally:
        _RUN_CALL.reset(token)


def current_run_call() -> RunCall | None:
    """The ``run`` in progress in this context (None: a dry run asked for by itself)."""
    return _RUN_CALL.get()


class SubmitEntries(Protocol):
    """What ``run``, ``run_component`` and ``dryrun_component`` call (TorchX's signatures)."""

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppDryRunInfo[Any]:
        """``Runner.dryrun``."""
        raise NotImplementedError

    def dryrun_component(
        self,
        component: str,
        component_args: list[str] | Mapping[str, Any],
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
    ) -> AppDryRunInfo[Any]:
        """``Runner.dryrun_component``."""
        raise NotImplementedError

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> AppHandle:
        """``Runner.schedule``."""
        raise NotImplementedError


class WatchEntries(Protocol):
    """What ``wait`` calls."""

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """``Runner.status``."""
        raise NotImplementedError
