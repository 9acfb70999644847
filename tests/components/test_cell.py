from __future__ import annotations

from pathlib import Path

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


def test_a_cell_is_a_typed_program_not_role_metadata() -> None:
    """``cell()`` returns an AppDef for TorchX-style use (``python -c``) that holds its cell
    program as a typed field; no role carries the source in its metadata."""
    from torchx_nb.specs.program import CellProgram, program_of

    app = cell("a", source="print(1)\n", j="2", rdzv_port=29600)
    assert program_of(app) == CellProgram("print(1)\n", ("a",), "2", 29600)
    assert all(role.metadata == {} for role in app.roles)


def test_the_cli_dry_run_of_a_cell_ships_it_as_a_script_or_says_python_c(
    tmp_path: Path,
) -> None:
    """``torchx-nb run cell --source`` with a workspace: the cell goes into the image as a
    script run by the cell runner, and its source is nowhere in the request; with
    ``--workspace none`` it travels in the request as ``python -c``."""
    from tests.conftest import cli

    (tmp_path / "mod.py").write_text("X = 1\n")
    source = "print('marker-4711')"
    base = ["run", "--dryrun", "-s", "local_docker"]
    code, out, err = cli(*base, "--workspace", str(tmp_path), "cell", "--source", source)
    assert code == 0, err
    assert "program:   a cell of 1 line, run by the cell runner" in out, out
    code, whole, err = cli(
        *base, "--json", "--workspace", str(tmp_path), "cell", "--source", source
    )
    assert code == 0, err
    assert "marker-4711" not in whole and "cell_main.py" in whole and ".torchx-cell-" in whole
    code, out, err = cli(*base, "--workspace", "none", "cell", "--source", source)
    assert code == 0, err
    assert "program:   a cell of 1 line, run by python -c" in out, out
    code, whole, err = cli(*base, "--json", "--workspace", "none", "cell", "--source", source)
    assert code == 0, err
    assert "marker-4711" in whole and "cell_main.py" not in whole
