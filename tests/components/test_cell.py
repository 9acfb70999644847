from __future__ import annotations

import pytest

from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.specs import AppState


def test_plain_cell_runs_as_python_c() -> None:
    role = cell("a1", source="print('$x')").roles[0]
    assert role.entrypoint == "python"
    assert role.args == ["-c", "print('$$x')", "a1"]


def test_distributed_cell_uses_torchrun_without_python() -> None:
    app = cell(source="print(1)", j="2x3", name="train")
    role = app.roles[0]
    assert role.entrypoint == "bash" and role.num_replicas == 2
    assert "--no-python python -c 'print(1)'" in role.args[1]
    assert "--nnodes 2 --nproc_per_node 3" in role.args[1]


def test_empty_and_huge_cells_are_refused() -> None:
    with pytest.raises(ValueError, match="the cell is empty"):
        cell(source="  \n")
    with pytest.raises(ValueError, match="move the code into a .py file"):
        cell(source="x = 1\n" * 20000)


def test_cell_runs_on_local_cwd_with_dollars_and_argv() -> None:
    src = "import sys, os\nprint('cost: $5', sys.argv[1:], os.environ['TORCHX_JOB_ID'])\n"
    with get_runner() as runner:
        handle = runner.run_component("cell", {"source": src, "script_args": ["x"]}, "local_cwd")
        status = runner.wait(handle, wait_interval=0.2)
        assert status is not None and status.state == AppState.SUCCEEDED
        out = "".join(runner.log_lines(handle, "cell"))
    assert out == f"cost: $5 ['x'] {handle}\n"
