"""TorchX's component finder (``torchx.specs.finder`` there; here beside the components it finds,
since ``specs`` is pure data): a component by name, with its description and what the linter
says about it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torchx_nb.components import (
    ComponentNotFoundError,
    builtin_components,
)
from torchx_nb.components import (
    get_component as _get_fn,
)
from torchx_nb.specs.api import AppDef
from torchx_nb.specs.exceptions import ComponentValidationException as ComponentValidationException
from torchx_nb.specs.file_linter import get_fn_docstring, validate

ComponentNotFoundException = ComponentNotFoundError


@dataclass
class _Component:
    """A component: its name, description, function name and function, and the linter's
    findings (for a component in a file)."""

    name: str
    description: str
    fn_name: str
    fn: Callable[..., AppDef]
    validation_errors: list[str] = field(default_factory=list)


def get_component(name: str) -> _Component:
    """The component ``name`` (``utils.echo``, ``path/file.py:fn``, an entry point's)."""
    fn = _get_fn(name)
    errors: list[str] = []
    if ":" in name:
        path, _, fn_name = name.rpartition(":")
        errors = [m.description for m in validate(path, fn_name)]
    description, _ = get_fn_docstring(fn)
    return _Component(name, description, fn.__name__, fn, errors)


def get_components() -> dict[str, _Component]:
    """Every built-in component by name."""
    out = {}
    for name, fn in builtin_components().items():
        description, _ = get_fn_docstring(fn)
        out[name] = _Component(name, description, fn.__name__, fn)
    return out
