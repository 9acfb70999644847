"""How a run uses its workspace: the one value a workspace ability makes of it
(``WorkspaceMixin.use_workspace``: patched onto images; ``DirWorkspaceMixin``'s: the folder the
job runs from), kept in the prepared run; and what the runner tells the ability about the
program it runs (``ProgramJob``), so that the ability needs to know nothing of cells,
notebooks or environment plans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from torchx_nb.specs.api import Role

if TYPE_CHECKING:
    from torchx_nb.workspace.builders import EnvironmentLayer


class ProgramJob(Protocol):
    """The runner's side of a workspace's use: which role runs the program under the cell
    runner (None: the app runs as it is), the files that go beside the workspace for it, how
    that role is pointed at them, and the environment each image gets."""

    @property
    def role(self) -> Role | None:
        """The role that runs the program under the cell runner (None: none does)."""
        ...

    @property
    def pickles(self) -> bool:
        """Whether the files hold what this kernel pickled (the image's Python must match)."""
        ...

    def files(self) -> dict[str, bytes]:
        """The program's files (paths relative to the folder they go into)."""
        ...

    def point(self, role: Role, folder: str) -> None:
        """Point ``role`` at the files in ``folder`` (the job's working folder when empty)."""
        ...

    def environment(self, image: str) -> Any:
        """The environment plan of the program on ``image`` (made once per image), or None."""
        ...

    def environment_files(self, plan: Any) -> dict[str, bytes]:
        """What the job is told of ``plan`` (it warns when what it has differs)."""
        ...

    def environment_layer(self, plan: Any) -> EnvironmentLayer | None:
        """The environment layer ``plan`` adds to the image, or None."""
        ...

    def release(self, plan: Any) -> None:
        """Done with ``plan`` for one role: a head start the build did not take is dropped."""
        ...


@dataclass(frozen=True)
class WorkspaceUse:
    """How a run uses its workspace (``path``): what a dry run shows would ship
    (``preview``; None for a build, or when nothing is copied) and whether the program runs
    under the cell runner, its files beside the workspace (``runs_program``)."""

    #: whether the workspace is patched onto images (a build then takes time before submit)
    patches_images: ClassVar[bool] = False

    path: str
    preview: str | None
    runs_program: bool


@dataclass(frozen=True)
class ImageWorkspace(WorkspaceUse):
    """The workspace patched onto each role's image (``WorkspaceMixin``): planned for a dry
    run, built and pushed for a run."""

    patches_images: ClassVar[bool] = True


__all__ = ["ImageWorkspace", "ProgramJob", "WorkspaceUse"]
