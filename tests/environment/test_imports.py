"""What a program imports, read without running it: nested imports, notebook cells with
IPython syntax, workspace modules followed, a component's script or ``-m`` module."""

from __future__ import annotations

import json
from pathlib import Path

from torchx_nb.environment.imports import program_imports, python_source
from torchx_nb.specs.api import AppDef, Role
from torchx_nb.specs.program import CellProgram, NotebookProgram


def test_a_cell_s_imports_nested_ones_included_stdlib_and_relative_left_out(tmp_path: Path) -> None:
    source = (
        "import os, json\n"
        "import numpy.linalg as la\n"
        "from pandas import DataFrame\n"
        "from . import sibling\n"
        "def f():\n"
        "    import scipy\n"
        "class C:\n"
        "    try:\n"
        "        import yaml\n"
        "    except ImportError:\n"
        "        pass\n"
        "from __future__ import annotations\n"
    )
    found = program_imports(CellProgram(source), str(tmp_path))
    assert found.modules == {
        "numpy": "cell line 2",
        "pandas": "cell line 3",
        "scipy": "cell line 6",
        "yaml": "cell line 9",
    }


def test_workspace_modules_are_followed_not_listed(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("import requests\nfrom pkg import util\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "util.py").write_text("import helpers\nimport tqdm\n")  # a cycle
    found = program_imports(CellProgram("import helpers\n"), str(tmp_path))
    assert found.modules == {"requests": "helpers.py line 1", "tqdm": "pkg/util.py line 2"}
    assert found.workspace_modules == {"helpers", "pkg"}


def test_notebook_cells_skip_magics_and_shell_escapes_and_add_the_runner_s_needs(
    tmp_path: Path,
) -> None:
    cells = [
        {"cell_type": "code", "source": ["%pip install foo\n", "import requests\n"]},
        {"cell_type": "markdown", "source": "import notthis"},
        {"cell_type": "code", "source": "!ls\nfiles = !ls\nimport tqdm\n%time import yaml\n"},
        {"cell_type": "code", "source": "%%bash\nimport nope\n"},
        {"cell_type": "code", "source": "def broken(:\n"},
    ]
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": cells, "nbformat": 4}))
    found = program_imports(NotebookProgram("nb.ipynb"), str(tmp_path))
    assert found.modules == {
        "requests": "nb.ipynb cell 1 line 2",
        "tqdm": "nb.ipynb cell 2 line 3",
        "nbclient": "the notebook runner",
        "nbformat": "the notebook runner",
        "ipykernel": "the notebook runner",
    }
    assert python_source("%%time\nimport x\n") == ""


def test_a_component_s_script_or_module_is_scanned(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import tqdm\n")
    app = AppDef("a", roles=[Role("r", "img", entrypoint="python", args=["train.py", "--lr"])])
    assert program_imports(app, str(tmp_path)).modules == {"tqdm": "train.py line 1"}
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__main__.py").write_text("import yaml\n")
    app = AppDef("a", roles=[Role("r", "img", entrypoint="python", args=["-m", "trainer.main"])])
    assert program_imports(app, str(tmp_path)).modules == {"yaml": "trainer/__main__.py line 1"}
    outside = AppDef("a", roles=[Role("r", "img", entrypoint="python", args=["../../x.py"])])
    assert program_imports(outside, str(tmp_path)).modules == {}
