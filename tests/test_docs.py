"""The documentation says what the code does: the option tables are generated from the
backends' typed options and current; the pages build with mkdocs in strict mode (every link
and anchor between them resolves); the README's links reach real files; every Python example
parses; every ``torchx-nb`` and ``%torchx`` command in an example is one the tools have."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
_FENCE = re.compile(r"^```([A-Za-z]*)\n(.*?)^```", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def blocks(lang: str) -> list[tuple[Path, str]]:
    return [
        (page, m.group(2))
        for page in [ROOT / "README.md", *PAGES]
        for m in _FENCE.finditer(page.read_text())
        if m.group(1) == lang
    ]


def test_the_option_tables_come_from_the_typed_options() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_options.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, "docs/schedulers/index.md is stale: run scripts/docs_options.py"


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    """mkdocs --strict fails on a page left out of the nav, a link to a missing page or a
    missing anchor."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "schedulers" / "slurm" / "index.html").is_file()


def test_the_readmes_links_reach_real_files() -> None:
    text = (ROOT / "README.md").read_text()
    local = [t for t in _LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]
    assert local, "the README links to the docs"
    missing = [t for t in local if not (ROOT / t.split("#")[0]).exists()]
    assert missing == []
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES}
    linked = {t.split("#")[0] for t in local}
    assert pages - linked - {"docs/index.md"} == set(), "a page the README does not link to"


@pytest.mark.parametrize(("page", "code"), blocks("python"), ids=lambda v: getattr(v, "name", ""))
def test_every_python_example_parses(page: Path, code: str) -> None:
    plain = "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()
    )
    ast.parse(plain)


def test_every_command_in_the_examples_exists() -> None:
    from torchx_nb.cli.parser import build_parser as _build_parser
    from torchx_nb.notebook.magics import COMMANDS

    cli = next(a for a in _build_parser()._actions if a.dest == "cmd").choices  # type: ignore[union-attr]
    said_cli: set[str] = set()
    said_magic: set[str] = set()
    for _, code in blocks("") + blocks("bash") + blocks("python"):
        said_cli |= set(re.findall(r"(?m)^\s*torchx-nb ([a-z-]+)", code))
        said_magic |= set(re.findall(r"(?m)^%%?torchx ([a-z-]+)", code))
    assert said_cli and said_magic
    assert said_cli - set(cli) == set(), "a torchx-nb command the CLI does not have"
    assert said_magic - set(COMMANDS) == set(), "a %torchx command the magic does not have"


_NAMES_ROW = re.compile(r"^\| `(torchx[\w.]*)` \| `(torchx_nb[\w.]*)` \| (.+) \|$", re.M)
_HAS = re.compile(r"`(torchx_nb(?:\.\w+)+)` has ((?:`\w+`(?:,\s+|;|\.|\s+and\s+))+)")
_NAME = re.compile(r"`(\w+)`")


def documented_names() -> list[tuple[str, str, str]]:
    """(page, module, name) for every public name the docs place in a module: the rows of
    "where TorchX's names live" tables (a name's parenthesised note is not a name) and the
    sentences "`torchx_nb.MODULE` has `A`, `B`…"."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in _NAMES_ROW.finditer(text):
            listed = re.sub(r"\([^)]*\)", "", m.group(3))
            found += [(page.name, m.group(2), n) for n in _NAME.findall(listed)]
        for m in _HAS.finditer(text):
            found += [(page.name, m.group(1), n) for n in _NAME.findall(m.group(2))]
    return found


def test_every_name_the_docs_place_in_a_module_imports_from_there() -> None:
    """A name moved to another module (as ``split_lines`` once was) fails here, not in a
    TorchX user's import."""
    import importlib

    found = documented_names()
    modules = {m for _, m, _ in found}
    # the tables and sentences this test is for are there (a reworded page cannot empty it)
    assert {"torchx_nb.schedulers.api", "torchx_nb.workspace.api"} <= modules
    assert ("torchx-differences.md", "torchx_nb.schedulers.api", "split_lines_iterator") in found
    missing = [
        f"{page}: {module}.{name}"
        for page, module, name in found
        if not hasattr(importlib.import_module(module), name)
    ]
    assert not missing, missing
