"""TorchX's component linter on source files: each rule, a syntax error, a missing function;
the docstring reader and the help formatter."""

from __future__ import annotations

import argparse
from pathlib import Path

from torchx_nb.specs.file_linter import (
    LinterMessage,
    TorchXArgumentHelpFormatter,
    get_fn_docstring,
    validate,
)

GOOD = '''
from typing import Dict, List, Optional
import torchx_nb.specs as specs

def train(lr: float, tags: List[str], env: Optional[Dict[str, str]] = None, *args: str) -> specs.AppDef:
    """Trains.

    Args:
        lr: the learning rate
    """
    ...

def untyped(lr, n: int) -> "AppDef":
    ...

def wrong(lr: float) -> int:
    ...

def bare(lr: float):
    ...

def nested(x: List[List[int]], y: Dict[str, List[int]], z: Tuple[int, int]) -> AppDef:
    ...
'''


def lint(tmp_path: Path, fn: str, source: str = GOOD) -> list[LinterMessage]:
    path = tmp_path / "comp.py"
    path.write_text(source)
    return validate(str(path), fn)


def test_rules(tmp_path: Path) -> None:
    assert lint(tmp_path, "train") == []
    (untyped,) = lint(tmp_path, "untyped")
    assert (untyped.description, untyped.line) == ("Arg lr missing type annotation", 13)
    assert [m.description for m in lint(tmp_path, "wrong")] == [
        "Function: wrong has incorrect return annotation, supported annotation: AppDef"
    ]
    assert [m.description for m in lint(tmp_path, "bare")] == [
        "Function: bare missing return annotation or has unknown annotations. Supported"
        " return annotation: AppDef"
    ]
    assert [m.description for m in lint(tmp_path, "nested")] == [
        "List can only have primitive types",
        "Dict can only have primitive types",
        "`nested` allows only Dict, List as complex types.Argument `z` has: Tuple",
    ]
    (missing,) = lint(tmp_path, "nope")
    assert (missing.name, missing.description) == ("TorchXValidator", "Function nope not found")
    (syntax,) = lint(tmp_path, "train", "def broken(:\n")
    assert syntax.name == "TorchXValidator" and syntax.line == 1


def test_docstring_and_help_formatter() -> None:
    def comp(lr: float, n: int = 3) -> None:
        """Does things.

        In detail.

        Args:
            lr: the rate
        """

    desc, args = get_fn_docstring(comp)
    assert desc == "Does things.\nIn detail." and args == {"lr": "the rate", "n": " "}

    def bare(x: int) -> None: ...

    desc, args = get_fn_docstring(bare)
    assert desc.startswith("bare TIP: improve this help string") and args == {"x": " "}
    parser = argparse.ArgumentParser(formatter_class=TorchXArgumentHelpFormatter)
    parser.add_argument("--lr", type=float, required=True, help="the rate")
    parser.add_argument("--n", type=int, default=3, help="count")
    text = parser.format_help()
    assert "the rate (required)" in text and "count (default: 3)" in text
