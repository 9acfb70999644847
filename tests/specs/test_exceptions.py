"""One error tree, one table: every exception class torchx_nb raises on purpose is defined in
``torchx_nb/specs/exceptions.py`` (importable where it was before), ``ANSWERS`` maps it to the
REST API's status and the CLI's exit code, and the server's handlers map no error themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchx_nb.specs import exceptions as ex

PACKAGE = Path(ex.__file__).parents[1]
# control flow that never leaves its module (and the job-side runner, which ships alone and
# imports only the standard library)
INTERNAL = {
    ("workspace/layers.py", "LayerAborted"),
    ("apps/cell_runner/notebook.py", "_OverLimit"),
    ("notebook/magic_line.py", "HelpShown"),
}


def exception_classes(path: Path) -> list[str]:
    """The classes ``path`` defines whose bases name an Exception, Error or a class of
    ``torchx_nb.specs.exceptions``."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
        if any(b.endswith(("Error", "Exception")) or hasattr(ex, b) for b in bases if b):
            found.append(node.name)
    return found


def test_every_error_class_is_defined_in_the_one_module() -> None:
    elsewhere = [
        (str(path.relative_to(PACKAGE)), name)
        for path in PACKAGE.rglob("*.py")
        if path != Path(ex.__file__)
        for name in exception_classes(path)
        if (str(path.relative_to(PACKAGE)), name) not in INTERNAL
    ]
    assert elsewhere == []


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("torchx_nb.cli", "CliError"),
        ("torchx_nb.config", "ConfigNotFoundError"),
        ("torchx_nb.workspace.registry", "RegistryError"),
        ("torchx_nb.schedulers.aws_common", "AwsError"),
        ("torchx_nb.specs.api", "AppStatusError"),
        ("torchx_nb.server.submit", "BadSubmission"),
        ("torchx_nb.runner", "NoSuchReplica"),
    ],
)
def test_a_moved_class_is_still_importable_where_it_was(module: str, name: str) -> None:
    import importlib

    assert getattr(importlib.import_module(module), name) is getattr(ex, name)


def test_the_table_maps_by_the_nearest_listed_class() -> None:
    assert ex.http_status(ex.BadCursor("x")) == 400
    assert ex.http_status(ex.UnknownAppException("local_cwd://s/a")) == 404
    assert ex.http_status(ex.JobEnded("h", "SUCCEEDED")) == 409
    assert ex.http_status(ex.UpstreamUnavailable("x")) == 503
    assert ex.http_status(ex.UpstreamError("x")) == 502
    assert ex.http_status(ex.RegistryError("x")) is None
    assert ex.http_status(RuntimeError("x")) is None
    assert ex.exit_status(ex.CliError("x")) == 2
    assert ex.exit_status(ex.ComponentArgError("x")) == 2
    assert ex.exit_status(ex.RegistryError("x")) == 1
    assert ex.exit_status(RuntimeError("x")) == 1


def _mappings(path: Path) -> list[str]:
    """Where ``path`` maps an error itself: an ``HTTPError`` made with a status, a call of the
    table's functions (``http_status``, ``refuses``) outside ``Base``'s answering methods, or
    an ``except`` that raises another error in place of the one it caught."""
    answering = {"answer", "log_exception", "_status"}
    found = []
    tree = ast.parse(path.read_text())
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in answering:
            allowed.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name == "HTTPError" and node.args and isinstance(node.args[0], ast.Constant):
                found.append(f"{path.name}:{node.lineno} HTTPError")
            if name in ("http_status", "refuses") and id(node) not in allowed:
                found.append(f"{path.name}:{node.lineno} {name}")
        if isinstance(node, ast.ExceptHandler):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Raise) and inner.exc is not None:
                    found.append(f"{path.name}:{inner.lineno} raises in place of what it caught")
    return found


def test_the_server_handlers_and_job_service_map_no_error_themselves() -> None:
    """Errors become answers only in ``Base.write_error`` (through ``Base.answer`` and the
    table): the handlers and the job service raise what they meet and map none; before,
    ``Base.work`` and ``JobService.submit_notebook`` turned errors into others."""
    server = PACKAGE / "server"
    paths = [server / "handlers.py", *sorted(server.glob("jobs*.py")), *server.glob("feed*.py")]
    assert [m for p in paths for m in _mappings(p)] == []
