"""Component lookup: ``utils.echo``, ``dist.ddp``, ``cell`` (built in), ``path/to/file.py:fn``,
and components registered under the entry-point group ``torchx_nb.components``."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from torchx_nb.specs.api import AppDef
from torchx_nb.specs.exceptions import ComponentNotFoundError as ComponentNotFoundError

BUILTIN_MODULES = ("utils", "dist", "cell")


def is_component(fn: Any) -> bool:
    """A component is a function annotated to return an AppDef; helpers beside it are not."""
    if not inspect.isfunction(fn):
        return False
    ret = inspect.signature(fn).return_annotation
    if isinstance(ret, str):
        return ret.rpartition(".")[2] == "AppDef"
    return isinstance(ret, type) and issubclass(ret, AppDef)


def _public_functions(
    module: Any, components_only: bool = True
) -> dict[str, Callable[..., AppDef]]:
    check = is_component if components_only else inspect.isfunction
    return {
        name: fn
        for name, fn in vars(module).items()
        if check(fn) and not name.startswith("_") and fn.__module__ == module.__name__
    }


def builtin_components() -> dict[str, Callable[..., AppDef]]:
    """Name → function for every built-in component (``utils.echo``, ``dist.ddp``, ``cell``)."""
    out: dict[str, Callable[..., AppDef]] = {}
    for mod_name in BUILTIN_MODULES:
        module = importlib.import_module(f"torchx_nb.components.{mod_name}")
        for name, fn in _public_functions(module).items():
            out[mod_name if name == mod_name else f"{mod_name}.{name}"] = fn
    return out


def _from_file(path: str, fn_name: str) -> Callable[..., AppDef]:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ComponentNotFoundError(f"component file {path!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"_torchx_nb_component_{file.stem}", file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        found = ", ".join(_public_functions(module, components_only=False)) or "none"
        raise ComponentNotFoundError(
            f"{path!r} has no function {fn_name!r} (functions in it: {found})"
        )
    return fn


def get_component(name: str) -> Callable[..., AppDef]:
    """The component function called ``name``; a miss names the closest built-in."""
    if ":" in name:
        path, _, fn_name = name.rpartition(":")
        return _from_file(path, fn_name)
    builtins = builtin_components()
    if name in builtins:
        return builtins[name]
    from importlib.metadata import entry_points

    for ep in entry_points(group="torchx_nb.components"):
        if name == ep.name or name.startswith(ep.name + "."):
            module = ep.load()
            attr = name[len(ep.name) + 1 :] if name != ep.name else ""
            fn: Any = getattr(module, attr, None) if attr else module
            usable = is_component(fn) and not attr.startswith("_") if attr else callable(fn)
            if usable:
                return cast(Callable[..., AppDef], fn)
    close = difflib.get_close_matches(name, list(builtins), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ComponentNotFoundError(
        f"unknown component {name!r}{hint} (built-in: {', '.join(sorted(builtins))};"
        " or use path/to/file.py:function)"
    )
