"""What a scheduler answers about its apps: ``describe`` (``DescribeAppResponse``) and
``list`` (``ListAppResponse``), TorchX's types (also importable from
``torchx_nb.schedulers.api``, TorchX's path)."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchx_nb.specs.api import NONE, AppState, Role, RoleStatus
from torchx_nb.specs.preemption import Preemption


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
    #: each preemption of this native job, oldest first, from the backend's own record (a
    #: requeue, PREEMPTED, exit 50001, DisruptionTarget), never from a SIGTERM alone: a cancel
    #: is a SIGTERM too. The runner keeps each one as an attempt of the job's handle.
    preemptions: list[Preemption] = field(default_factory=list)
    #: the job ended because it was preempted and its backend will not run it again (Slurm's
    #: PreemptMode=CANCEL, a retry counter spent): the runner submits it again as the next
    #: attempt of the same handle (up to ``max_preemptions``), and does not record ``state``
    ended_preempted: bool = False


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
