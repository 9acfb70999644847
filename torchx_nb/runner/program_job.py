"""The runner's side of a workspace's use (``workspace.use.ProgramJob``): the cell or notebook
program's files and the role pointed at them (from ``components``), and each image's
environment plan (from ``environment``), which the workspace abilities cannot import."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from torchx_nb.specs.api import AppDef, Role
from torchx_nb.specs.program import CellProgram, NotebookProgram, Program
from torchx_nb.workspace import WorkspaceMixin

if TYPE_CHECKING:  # data types, imported lazily (environment/ and the builders are heavy)
    from torchx_nb.environment.plan import EnvPlan
    from torchx_nb.workspace.builders import EnvironmentLayer


class RunnerProgramJob:
    """What the workspace ability is told of ``program`` run as ``app`` on ``sched``: its
    first role runs a cell or notebook program under the cell runner (with ``push``: the
    kernel's variables); the environment of each image is planned once (``packages``)."""

    def __init__(
        self,
        sched: WorkspaceMixin[Any],
        app: AppDef,
        program: Program,
        workspace: str,
        opts: Any,
        push: bytes | None,
        packages: str,
        build: bool,
    ) -> None:
        self._sched = sched
        self._runs = program if isinstance(program, (CellProgram, NotebookProgram)) else None
        self._program = program
        self._role = app.roles[0] if self._runs is not None and app.roles else None
        self._workspace = workspace
        self._opts = opts
        self._push = push
        self._packages = packages
        self._build = build
        self._plans: dict[str, EnvPlan | None] = {}

    @property
    def role(self) -> Role | None:
        return self._role

    @property
    def pickles(self) -> bool:
        return isinstance(self._runs, CellProgram)

    def files(self) -> dict[str, bytes]:
        from torchx_nb.components.programs import program_files

        assert self._runs is not None
        return program_files(self._runs, self._push)

    def point(self, role: Role, folder: str) -> None:
        from torchx_nb.components.programs import point_at_runner

        assert self._runs is not None
        point_at_runner(role, self._runs, folder, self._push is not None)

    def environment(self, image: str) -> EnvPlan | None:
        if image not in self._plans:
            self._plans[image] = self._plan(image)
        return self._plans[image]

    def environment_files(self, plan: EnvPlan) -> dict[str, bytes]:
        if plan.contents is None:
            return {}
        from torchx_nb.environment.record import PLAN_FILE, plan_file

        return {PLAN_FILE: plan_file(plan)}

    def environment_layer(self, plan: EnvPlan) -> EnvironmentLayer | None:
        from torchx_nb.environment.layer import EnvironmentBuild

        return EnvironmentBuild(plan) if plan.add else None

    def release(self, plan: EnvPlan) -> None:
        plan.drop_head_start()

    def shown_plan(self) -> EnvPlan | None:
        """The environment plan a dry run shows: the first image's that has one."""
        return next((p for p in self._plans.values() if p is not None), None)

    def _plan(self, image: str) -> EnvPlan | None:
        """The environment plan of the program on ``image``; its warnings (a module neither
        the kernel nor the image has) are shown once, before submit."""
        from torchx_nb.environment.plan import plan_environment

        sched, workspace, opts = self._sched, self._workspace, self._opts
        plan = plan_environment(
            self._program,
            workspace,
            image,
            lambda: sched.read_base_image(image, workspace, opts),
            self._packages,
            self._build,
            sched.upload_target(workspace, opts) if self._build else None,
        )
        if plan is not None and self._build:
            for line in plan.warnings:
                warn_plain(line)
        return plan


def _plain(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
    return f"warning: {message}\n"


def warn_plain(line: str) -> None:
    """Warn with ``line`` as the user reads it, ``warning: …``, without Python's
    ``file.py:123: UserWarning:`` prefix and source line (a handler that formats warnings
    its own way, as the CLI's, still does; warning filters still apply)."""
    before = warnings.formatwarning
    warnings.formatwarning = _plain
    try:
        warnings.warn(line, UserWarning, stacklevel=2)
    finally:
        warnings.formatwarning = before
