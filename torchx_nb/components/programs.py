"""How a cell or notebook program reaches its job: the files that go beside the workspace
(the cell runner, the cell as a script, pushed variables) and its role pointed at them."""

from __future__ import annotations

from torchx_nb import specs
from torchx_nb.components.cell import cell_files, run_with_runner, runner_files
from torchx_nb.components.notebook import parameters_file, run_notebook_with_runner
from torchx_nb.specs.program import CellProgram, NotebookProgram


def program_files(program: CellProgram | NotebookProgram, push: bytes | None) -> dict[str, bytes]:
    """The files ``program`` needs beside its workspace (paths relative to their folder)."""
    if isinstance(program, NotebookProgram):
        if push is not None:
            raise ValueError("--push sends variables into a cell; a notebook job takes -p values")
        # a notebook job needs the runner and its values beside its workspace
        return {**runner_files(), **parameters_file(program)}
    return cell_files(program, push)


def point_at_runner(
    role: specs.Role, program: CellProgram | NotebookProgram, folder: str, push: bool
) -> None:
    """Point ``role`` at the cell runner and ``program``'s files in ``folder`` (the job's
    working folder when empty)."""
    if isinstance(program, NotebookProgram):
        run_notebook_with_runner(role, program, folder)
    else:
        run_with_runner(role, program, folder, push)


__all__ = ["point_at_runner", "program_files"]
