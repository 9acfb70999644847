"""What a run runs, as a typed field of the prepared run: a component's ``AppDef``, a
notebook cell (its source and how it runs) or a whole notebook (its path and parameters). A
cell is not an AppDef with its source tucked into a role: the runner decides how it reaches
the job (as a script beside the workspace, under the cell runner, or ``python -c`` in the
request when there is no workspace)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchx_nb.specs.api import AppDef


@dataclass(frozen=True)
class CellProgram:
    """A notebook cell run as the job's main program: its Python source, the arguments it
    sees in ``sys.argv[1:]``, and, with ``j``, torchrun's shape (``[min:]NxP``) and its
    rendezvous port."""

    source: str
    script_args: tuple[str, ...] = ()
    j: str | None = None
    rdzv_port: int = 29500

    @property
    def lines(self) -> int:
        return len(self.source.splitlines())

    def script(self) -> tuple[str, bytes]:
        """The file the cell becomes beside the workspace (a name fixed by its content, so a
        rerun of the same cell reuses the image layer), and its bytes."""
        import hashlib

        data = self.source.encode()
        return f".torchx-cell-{hashlib.sha256(data).hexdigest()[:12]}.py", data


@dataclass(frozen=True)
class NotebookProgram:
    """A whole notebook run as the job: its path relative to the workspace (its folder), the
    values injected after its ``parameters`` cell, and each cell's time limit (seconds)."""

    path: str
    parameters: tuple[tuple[str, Any], ...] = ()
    cell_timeout: float | None = None


@dataclass
class CellApp(AppDef):
    """The ``AppDef`` made from a cell or a notebook, for TorchX-style use (the cell
    component's ``python -c``), holding its program: a runner given it runs the program under
    the cell runner."""

    program: CellProgram | NotebookProgram | None = field(default=None, compare=False)


Program = AppDef | CellProgram | NotebookProgram


def program_of(app: AppDef) -> CellProgram | NotebookProgram | None:
    """The cell or notebook program an app was made from, else None."""
    return app.program if isinstance(app, CellApp) else None


__all__ = ["CellApp", "CellProgram", "NotebookProgram", "Program", "program_of"]
