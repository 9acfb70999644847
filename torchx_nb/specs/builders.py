"""Turning text into specs: ``parse_mounts``, the role of a container's command, and building an AppDef from a component function and
command-line arguments (``materialize_appdef``), with help taken from the function's docstring."""

from __future__ import annotations

import argparse
import inspect
import os
import typing
from collections.abc import Callable, Mapping
from typing import Any

from torchx_nb.specs.api import (
    AppDef,
    BindMount,
    DeviceMount,
    Mount,
    Role,
    VolumeMount,
    split_key_values,
)
from torchx_nb.specs.api import make_app_handle as make_app_handle  # TorchX imports it from here
from torchx_nb.specs.exceptions import ComponentArgError as ComponentArgError
from torchx_nb.specs.hints import unwrap_optional
from torchx_nb.specs.runopts import parse_bool

_MOUNT_KEYS = {
    "type": "type",
    "src": "src",
    "source": "src",
    "dst": "dst",
    "destination": "dst",
    "target": "dst",
    "readonly": "readonly",
    "read_only": "readonly",
    "perm": "perm",
}


def role_of_command(name: str, image: str, command: list[str] | None, **fields: Any) -> Role:
    """The role a backend describes from a container it runs: ``command``'s first word is the
    entrypoint, the rest its args; no replica counted yet (``fields``: env, resource…)."""
    words = list(command or [""])
    return Role(
        name=name, image=image, entrypoint=words[0], args=words[1:], num_replicas=0, **fields
    )


def parse_mounts(opts: list[str]) -> list[Mount]:
    """Parse comma-split mount options (``["type=bind", "src=/h", "dst=/c", "readonly"]``).

    Each ``type=`` starts a new mount. Bind sources starting with ``~`` are expanded; a device's
    destination defaults to its source and its permissions to ``rwm``."""
    groups: list[dict[str, str]] = []
    for opt in opts:
        key, _, val = opt.partition("=")
        key = key.strip()
        if key not in _MOUNT_KEYS:
            raise KeyError(
                f"unknown mount option {key!r}: use type=, src=, dst=, readonly or perm="
            )
        norm = _MOUNT_KEYS[key]
        if norm == "type":
            groups.append({})
        elif not groups:
            raise KeyError("type must be specified first (e.g. type=bind,src=/a,dst=/b)")
        groups[-1][norm] = val

    mounts: list[Mount] = []
    for g in groups:
        mtype = g.get("type")
        if mtype == "bind":
            mounts.append(
                BindMount(
                    src_path=os.path.expanduser(g["src"]),
                    dst_path=g["dst"],
                    read_only="readonly" in g,
                )
            )
        elif mtype == "volume":
            mounts.append(VolumeMount(src=g["src"], dst_path=g["dst"], read_only="readonly" in g))
        elif mtype == "device":
            perm = g.get("perm", "rwm")
            for ch in perm:
                if ch not in "rwm":
                    raise ValueError(f"device permission {perm!r}: each letter must be r, w or m")
            mounts.append(
                DeviceMount(src_path=g["src"], dst_path=g.get("dst", g["src"]), permissions=perm)
            )
        else:
            raise ValueError(f"unknown mount type {mtype!r}: use bind, volume or device")
    return mounts


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    if not doc:
        return "", {}
    import docstring_parser

    parsed = docstring_parser.parse(doc)
    desc = "\n\n".join(p for p in (parsed.short_description, parsed.long_description) if p)
    return desc, {p.arg_name.lstrip("*"): (p.description or "") for p in parsed.params}


def _bool(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _element(tp: Any) -> Callable[[str], Any]:
    """How one element of a list or dict parameter is read: ``int``, ``float``, ``bool`` or
    ``str`` as annotated (TorchX decodes ``List[int]`` to ints, not strings)."""
    if tp is bool:
        return _bool
    if tp in (int, float):

        def number(text: str) -> Any:
            try:
                return tp(text)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"expected {tp.__name__} values, got {text!r}"
                ) from None

        return number
    return str


def _list_of(item: Any) -> Callable[[str], list[Any]]:
    convert = _element(item)

    def parse(text: str) -> list[Any]:
        return [convert(p) for p in text.split(",") if p]

    return parse


def _dict_of(key: Any, value: Any) -> Callable[[str], dict[Any, Any]]:
    """``K=V,K2=V2``; a value may hold commas (``CUDA_VISIBLE_DEVICES=0,1``), as in TorchX."""
    key_of, value_of = _element(key), _element(value)

    def parse(text: str) -> dict[Any, Any]:
        try:
            pairs = split_key_values(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE pairs: {e}") from None
        return {key_of(k): value_of(v) for k, v in pairs}

    return parse


def _converter(tp: Any) -> tuple[Callable[[str], Any], str]:
    tp = unwrap_optional(tp)
    origin = typing.get_origin(tp) or tp
    if tp is bool:
        return _bool, "BOOL"
    if tp in (int, float):
        return tp, tp.__name__.upper()
    if origin in (list, typing.List):  # noqa: UP006
        (item,) = typing.get_args(tp) or (str,)
        return _list_of(unwrap_optional(item)), "A,B,..."
    if origin in (dict, typing.Dict):  # noqa: UP006
        key, value = typing.get_args(tp) or (str, str)
        return _dict_of(unwrap_optional(key), unwrap_optional(value)), "K=V,..."
    return str, "STR"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        raise ComponentArgError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def component_parser(
    fn: Callable[..., Any], prog: str, with_docs: bool = True
) -> argparse.ArgumentParser:
    """An argparse parser for a component function: one ``--name`` per parameter (required when it
    has no default; one-letter names also take ``-x``, as in ``-j 2x4`` or ``-h gpu.small``),
    ``*args`` as the trailing positional arguments."""
    desc, helps = _docstring(fn) if with_docs else ("", {})
    parser = _Parser(
        prog=prog,
        description=desc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        add_help=False,
    )
    parser.add_argument("--help", action="help", help="show this help and exit")
    hints = typing.get_type_hints(fn)
    for name, param in inspect.signature(fn).parameters.items():
        tp = hints.get(name, str)
        help_text = helps.get(name, "")
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            parser.add_argument(name, nargs=argparse.REMAINDER, help=help_text)
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        conv, metavar = _converter(tp)
        kwargs: dict[str, Any] = {"type": conv, "help": help_text, "metavar": metavar}
        if param.default is inspect.Parameter.empty:
            kwargs["required"] = True
        else:
            kwargs["default"] = param.default
            kwargs["help"] = f"{help_text} (default: {param.default!r})"
        if conv is _bool:
            kwargs.update(nargs="?", const=True)
        flags = [f"-{name}", f"--{name}"] if len(name) == 1 else [f"--{name}"]
        parser.add_argument(*flags, dest=name, **kwargs)
    return parser


def materialize_appdef(
    fn: Callable[..., AppDef],
    args: list[str] | Mapping[str, Any],
    defaults: Mapping[str, str] | None = None,
    prog: str | None = None,
) -> AppDef:
    """Call component ``fn`` with CLI-style ``args`` (or a dict of keyword values), applying
    ``defaults`` (e.g. from ``[component:NAME]`` in .torchxconfig) for options not given."""
    prog = prog or fn.__name__
    sig = inspect.signature(fn)
    var_pos = next(
        (n for n, p in sig.parameters.items() if p.kind is inspect.Parameter.VAR_POSITIONAL), None
    )
    if isinstance(args, Mapping):
        kwargs = dict(args)
        positional = list(kwargs.pop(var_pos, []) if var_pos else [])
        unknown = [k for k in kwargs if k not in sig.parameters]
        if unknown:
            raise ComponentArgError(f"{prog}: unknown argument(s) {', '.join(unknown)}")
        return _call_component(fn, sig, var_pos, positional, kwargs, prog)

    wants_help = "--help" in args
    parser = component_parser(fn, prog, with_docs=wants_help)
    if defaults:
        cli_defaults: dict[str, Any] = {}
        for action in parser._actions:
            convert = action.type
            if action.dest in defaults and callable(convert):
                cli_defaults[action.dest] = convert(defaults[action.dest])
                action.required = False
        parser.set_defaults(**cli_defaults)
    ns = parser.parse_args(list(args))
    values = vars(ns)
    positional = list(values.pop(var_pos, None) or []) if var_pos else []
    if positional and positional[0] == "--":
        positional = positional[1:]
    if var_pos and not positional and defaults and defaults.get(var_pos):
        # as TorchX: a [component:NAME] default for *args, split on whitespace
        positional = str(defaults[var_pos]).split()
    return _call_component(fn, sig, var_pos, positional, values, prog)


def _call_component(
    fn: Callable[..., Any],
    sig: inspect.Signature,
    var_pos: str | None,
    positional: list[Any],
    values: dict[str, Any],
    prog: str,
) -> AppDef:
    """Call ``fn``: parameters that come before ``*args`` are passed by position (else Python
    reports "got multiple values"), the rest by name. A function that does not return an
    AppDef is not a component: one clear error instead of an AttributeError later."""
    args: list[Any] = []
    if var_pos is not None:
        for name, p in sig.parameters.items():
            if name == var_pos:
                break
            if p.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                value = values.pop(name, p.default)
                if value is inspect.Parameter.empty:
                    raise ComponentArgError(f"{prog}: missing argument --{name}")
                args.append(value)
    app = fn(*args, *positional, **values)
    if not isinstance(app, AppDef):
        raise ComponentArgError(
            f"{prog} is not a component: {getattr(fn, '__name__', fn)!s}() returned"
            f" {type(app).__name__}, not an AppDef"
        )
    return app
