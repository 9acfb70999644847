"""What a scheduler answers about its apps: ``describe`` (``DescribeAppResponse``) and
``list`` (``ListAppResponse``), TorchX's types (also importable from
``torchx_nb.schedulers.api``, TorchX's path)."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchx_nb.specs.api import NONE, AppState, Role, RoleStatus


@dataclass
class DescribeAppResponse:
    """What a scheduler knows about one app."""

    app_id: str = "<NOT_SET>"
    state: AppState = AppState.UNSUBMITTED
    num_restarts: int = -1
    msg: str = NONE
    structured_error_msg: str = NONE
    ui_url: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    roles_statuses: list[RoleStatus] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None


@dataclass
class ListAppResponse:
    """One row of ``Scheduler.list()``; ``app_handle`` is filled in by the Runner."""

    app_id: str
    state: AppState
    app_handle: str = "<NOT_SET>"
    name: str = ""

    def __hash__(self) -> int:
        return hash((self.app_id, self.app_handle, self.state))


__all__ = ["DescribeAppResponse", "ListAppResponse"]
