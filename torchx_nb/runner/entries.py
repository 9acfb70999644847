"""The Runner's TorchX-named methods that its parts' composite calls go through.

TorchX users subclass ``Runner`` and override ``schedule``, ``dryrun`` or ``status``;
TorchX's ``run`` is ``dryrun`` then ``schedule``, ``run_component`` is ``dryrun_component``
then ``schedule``, and ``wait`` polls ``status``. So the parts doing those composite calls
make them through the Runner's own (public, overridable) methods, handed to them at
construction as one of these protocols — a part used on its own goes through its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from torchx_nb.specs.api import AppDef, AppDryRunInfo, AppHandle, AppStatus, CfgVal


class SubmitEntries(Protocol):
    """What ``run``, ``run_component`` and ``dryrun_component`` call."""

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, CfgVal] | None = None,
        workspace: str | None = None,
        parent_run_id: str | None = None,
        build_workspace: bool = False,
        push: bytes | None = None,
        packages: str = "auto",
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
        build_workspace: bool = False,
    ) -> AppDryRunInfo[Any]:
        """``Runner.dryrun_component``."""
        raise NotImplementedError

    def schedule(self, dryrun_info: AppDryRunInfo[Any], **record: str | None) -> AppHandle:
        """``Runner.schedule``."""
        raise NotImplementedError


class WatchEntries(Protocol):
    """What ``wait`` calls."""

    def status(self, app_handle: AppHandle) -> AppStatus | None:
        """``Runner.status``."""
        raise NotImplementedError
