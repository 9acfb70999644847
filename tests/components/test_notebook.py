"""A notebook as a job's program: its checks before anything is built, papermill's injection
convention, and the AppDef it runs as."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from torchx_nb.apps.notebook_main import inject_parameters
from torchx_nb.components.notebook import NOTEBOOK_PARAMS, notebook_app, notebook_program
from torchx_nb.specs.program import NotebookProgram, program_of


def write(path: Path, *cells: object) -> Path:
    nbformat.write(new_notebook(cells=list(cells)), path)
    return path


def test_values_go_after_the_parameters_cell_replacing_an_earlier_injection() -> None:
    nb = new_notebook(
        cells=[
            new_markdown_cell("# t"),
            new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
            new_code_cell("n = 5", metadata={"tags": ["injected-parameters"]}),
            new_code_cell("print(n)"),
        ]
    )
    inject_parameters(nb, {"n": 3, "label": "a,b'\nimport os"})
    sources = [c.source for c in nb.cells]
    assert sources == [
        "# t",
        "n = 1",
        '# Parameters\nn = 3\nlabel = "a,b\'\\nimport os"\n',
        "print(n)",
    ]
    assert nb.cells[2].metadata["tags"] == ["injected-parameters"]


def test_with_no_parameters_cell_the_values_go_first() -> None:
    nb = new_notebook(cells=[new_code_cell("print(n)")])
    inject_parameters(nb, {"n": 2})
    assert [c.source for c in nb.cells] == ["# Parameters\nn = 2\n", "print(n)"]
    inject_parameters(nb, {})  # none given: an earlier injection is dropped, nothing added
    assert [c.source for c in nb.cells] == ["print(n)"]


@pytest.mark.parametrize(
    ("name", "params", "timeout", "error"),
    [
        ("report.txt", {}, None, "'{p}' is not a notebook: give a .ipynb file"),
        ("missing.ipynb", {}, None, "notebook '{p}' does not exist"),
        ("broken.ipynb", {}, None, "'{p}' cannot be read as a notebook: "),
        ("ok.ipynb", {"1x": 1}, None, "-p 1x: a parameter's name must be a Python variable"),
        ("ok.ipynb", {"__class__": 1}, None, "-p __class__: a parameter's name must be"),
        ("ok.ipynb", {"x": object()}, None, "-p x: a object is not a Python literal"),
        ("ok.ipynb", {"x": float("nan")}, None, "-p x: a float is not a Python literal"),
        ("ok.ipynb", {}, -1.0, "--cell-timeout must be more than 0 seconds, not -1"),
    ],
)
def test_bad_notebooks_and_parameters_are_one_line_before_anything(
    tmp_path: Path, name: str, params: dict[str, object], timeout: float | None, error: str
) -> None:
    (tmp_path / "report.txt").write_text("x")
    (tmp_path / "broken.ipynb").write_text("{not json")
    write(tmp_path / "ok.ipynb", new_code_cell("x = 1"))
    path = str(tmp_path / name)
    with pytest.raises(ValueError) as info:
        notebook_program(path, str(tmp_path), params, timeout)
    assert str(info.value).startswith(error.format(p=path)), info.value
    assert "\n" not in str(info.value)


def test_a_notebook_outside_its_workspace_is_refused(tmp_path: Path) -> None:
    nb = write(tmp_path / "nb.ipynb", new_code_cell("x = 1"))
    (tmp_path / "ws").mkdir()
    with pytest.raises(ValueError, match="is outside the workspace"):
        notebook_program(str(nb), str(tmp_path / "ws"))
    link = tmp_path / "ws" / "link.ipynb"
    link.symlink_to(nb)  # a link inside pointing outside is outside too
    with pytest.raises(ValueError, match="is outside the workspace"):
        notebook_program(str(link), str(tmp_path / "ws"))


def test_the_app_runs_the_cell_runner_on_the_notebook(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    nb = write(tmp_path / "sub" / "train.ipynb", new_code_cell("x = 1"))
    program = notebook_program(str(nb), str(tmp_path), {"lr": 0.1, "tag": "x"}, 30)
    assert program == NotebookProgram("sub/train.ipynb", (("lr", 0.1), ("tag", "x")), 30)
    app = notebook_app(program, env={"A": "1"})
    assert program_of(app) is program and app.name == "train"
    (role,) = app.roles
    assert role.args == [
        ".torchx-nb/cell_main.py",
        "--notebook",
        "sub/train.ipynb",
        "--cell-timeout",
        "30",
    ]
    assert json.loads(role.env[NOTEBOOK_PARAMS]) == {"lr": 0.1, "tag": "x"}
    assert role.env["A"] == "1" and role.metadata == {}
