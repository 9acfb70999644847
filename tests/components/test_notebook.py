"""A notebook as a job's program: its checks before anything is built, papermill's injection
convention, and the AppDef it runs as."""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from torchx_nb.apps.cell_runner.notebook import inject_parameters
from torchx_nb.components.notebook import notebook_app, notebook_program, parameters_file
from torchx_nb.components.notebook_parameters import (
    ParametersCell,
    declared,
    parameters_cell,
    read_value,
)
from torchx_nb.specs.program import NotebookProgram, program_of


def nested(levels: int) -> list[object]:
    """A list ``levels`` deep (``[]`` is one level)."""
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


DEEP_200, DEEP_20000 = nested(200), nested(20_000)


def test_the_deepest_value_accepted_reads_back_in_the_job(tmp_path: Path) -> None:
    """The deepest list the check lets through is read back from the job's file of values as
    the job reads it."""
    from torchx_nb.apps.cell_runner.notebook import read_literal

    write(tmp_path / "ok.ipynb", new_code_cell("x = 1"))
    program = notebook_program(str(tmp_path / "ok.ipynb"), str(tmp_path), {"x": nested(199)})
    (text,) = parameters_file(program).values()
    assert read_literal(text.decode()) == {"x": nested(199)}


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
        ("ok.ipynb", {1: 2}, None, "-p 1: a parameter's name must be a Python variable name"),
        ("ok.ipynb", {"x": object()}, None, "-p x: a object is not a Python literal"),
        ("ok.ipynb", {"x": 10**5000}, None, "-p x: an int of more than 4300 digits has no text"),
        # 200 levels parse alone but not in the job's dict of values (it failed there, a raw
        # SyntaxError after submit); 20,000 levels have no repr at all
        ("ok.ipynb", {"x": DEEP_200}, None, "-p x: it nests deeper than Python's parser reads"),
        ("ok.ipynb", {"x": DEEP_20000}, None, "-p x: it nests deeper than Python's parser"),
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
    assert role.env == {"A": "1"} and role.metadata == {}  # the values travel in a file
    assert parameters_file(program) == {
        ".torchx-nb/notebook-parameters.txt": b"{'lr': 0.1, 'tag': 'x'}"
    }


def test_the_parameters_cell_is_read_with_pythons_parser() -> None:
    """Names and values exactly as written: multi-line values, ``#`` inside strings,
    underscores, tuples, dicts, sets, bytes, None and annotations."""
    source = (
        "n = 1_000  # a comment\nopts = {'depth': 3,\n        'name': None}\nshape = (2, 3)\n"
        "half = .5\nurl = 'http://x/#frag'\nraw: bytes = b'xy'\nkinds = {1, 2}\n"
        "def f():\n    inner = 1\n"
    )
    assert declared(source) == {
        "n": "1_000",
        "opts": "{'depth': 3,\n        'name': None}",
        "shape": "(2, 3)",
        "half": ".5",
        "url": "'http://x/#frag'",
        "raw": "b'xy'",
        "kinds": "{1, 2}",
    }
    assert declared("x = (") == {}


def test_a_parameters_cell_with_ipython_syntax_is_read_as_the_kernel_runs_it() -> None:
    """A magic or ``!`` line (``%matplotlib inline``) made the cell 'not valid Python': the
    dialog showed no values and every -p name was warned unknown; papermill reads the names."""
    source = "%matplotlib inline\n!echo hi\nlr = 0.1  # rate\nname = 'a # b'\nfiles = !ls\n"
    assert declared(source) == {
        "lr": "0.1",
        "name": "'a # b'",
        "files": "get_ipython().getoutput('ls')",
    }
    cell = {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": source}
    assert parameters_cell({"cells": [cell]}) == ParametersCell(
        True, (("lr", "0.1"), ("name", "'a # b'"), ("files", "get_ipython().getoutput('ls')"))
    )


def test_unpacking_and_chained_assignments_name_every_target() -> None:
    """``a, b = 1, 2`` assigns a and b (``-p a=`` warned "unknown parameter" before): each
    with its own element, a chained target with the shared value, a starred or computed one
    with no value of its own."""
    source = "a, b = 1, 'two'\nc = d = [1]\ne, *f = 1, 2, 3\n(g, (h, i)) = 1, (2, 3)\nj, k = f()\n"
    assert declared(source) == {
        "a": "1",
        "b": "'two'",
        "c": "[1]",
        "d": "[1]",
        "e": "",
        "f": "",
        "g": "1",
        "h": "2",
        "i": "3",
        "j": "",
        "k": "",
    }


def test_the_parameters_cell_for_the_dialog_says_what_it_found() -> None:
    def nb(source: object, tags: object = ("parameters",)) -> dict[str, object]:
        meta = {"tags": list(tags) if isinstance(tags, tuple) else tags}
        return {"cells": [{"cell_type": "code", "metadata": meta, "source": source}]}

    assert parameters_cell(nb(["n = 1\n", "s = '#'"])) == ParametersCell(
        True, (("n", "1"), ("s", "'#'"))
    )
    assert parameters_cell(nb("n = 1", ())) == ParametersCell(False)
    assert parameters_cell(nb("x = (")) == ParametersCell(
        True, error="line 1: '(' was never closed"
    )
    # whatever a hostile file holds, it is no cell, never an exception
    for hostile in (nb([1]), nb("n = 1", 7), {"cells": 3}, {"cells": [None, "x"]}, [1]):
        assert parameters_cell(hostile) == ParametersCell(False), hostile


def test_p_values_are_python_literals_else_the_text_as_given() -> None:
    assert read_value("21") == 21 and read_value("1_000") == 1000
    assert read_value("true") is True and read_value("None") is None
    assert read_value("[1, 2]") == [1, 2] and read_value("(1, 2)") == (1, 2)
    assert read_value('" spaced "') == " spaced "
    assert read_value(" spaced ") == " spaced "  # the shell took the quotes: spaces kept
    assert read_value("a,b") == "a,b" and read_value("1,2") == "1,2"
    assert read_value("http://x/#frag") == "http://x/#frag"
    assert read_value("[" * 100_000) == "[" * 100_000
    # as papermill's -p: nan and inf are the floats (they were the text 'nan')
    assert math.isnan(read_value("nan")) and read_value("-Inf") == -math.inf
    assert read_value("inf") == math.inf == read_value("1e5000")
    assert read_value("'nan'") == "nan" and read_value("nano") == "nano"
    # Python reads '...' as Ellipsis, whose repr is no literal: it was read, then refused
    assert read_value("...") == "..." and read_value("[1, ...]") == "[1, ...]"
    with pytest.raises(ValueError, match="an int of 4301 digits is over Python's limit"):
        read_value("9" * 4301)
    assert read_value("9" * 4300) == int("9" * 4300)


def test_an_unknown_name_warns_and_a_non_python_notebook_is_refused(tmp_path: Path) -> None:
    nb = write(tmp_path / "p.ipynb", new_code_cell("lr = 0.1", metadata={"tags": ["parameters"]}))
    with pytest.warns(UserWarning) as caught:
        notebook_program(str(nb), str(tmp_path), {"lerning_rate": 0.2, "lr": 0.3})
    assert [str(w.message) for w in caught] == [
        "Passed unknown parameter: lerning_rate (the parameters cell assigns lr); it is injected"
        " anyway"
    ]
    r = new_notebook(cells=[new_code_cell("x <- 1")])
    r.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    nbformat.write(r, tmp_path / "r.ipynb")
    with pytest.raises(ValueError) as e:
        notebook_program(str(tmp_path / "r.ipynb"), str(tmp_path))
    assert str(e.value) == (
        f"{str(tmp_path / 'r.ipynb')!r} runs in a kernel for R, not Python: a notebook job runs"
        " Python notebooks only"
    )
