"""Scheduler options as TorchX declares them: ``runopt`` and ``runopts`` (types, defaults,
required options, help, ``-cfg`` strings parsed and cast, an unknown key's closest name),
``CfgVal``, and ``as_cfg``, the one adapter from typed options to the mapping TorchX's code
reads. Importable from ``torchx_nb.specs.api`` as in TorchX."""

from __future__ import annotations

import copy
import difflib
import json
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torchx_nb.specs.exceptions import InvalidRunConfigException

CfgVal = str | int | float | bool | list[str] | dict[str, str] | None


def as_cfg(cfg: Any) -> dict[str, CfgVal]:
    """Options as TorchX's code reads them, a plain dict keyed by option name: the one adapter
    between typed options (a ``StructuredOpts``, which ``to_cfg()``) and code written
    TorchX's way (a scheduler without typed options, ``AppDryRunInfo.cfg``); a mapping is
    copied, None is empty."""
    if cfg is None:
        return {}
    to_cfg = getattr(cfg, "to_cfg", None)
    if callable(to_cfg):
        return dict(to_cfg())
    return dict(cfg)


_TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool"}


def get_type_name(tp: Any) -> str:
    """A type's name as TorchX prints it: ``int`` for classes, ``typing.List[str]`` for
    generics."""
    if getattr(tp, "__module__", "typing") != "typing" and hasattr(tp, "__name__"):
        return str(tp.__name__)
    return str(tp)


def _type_name(t: Any) -> str:
    if t in _TYPE_NAMES:
        return _TYPE_NAMES[t]
    return str(t).replace("typing.", "")


def _split(value: str) -> list[str]:
    return [p for p in re.split(r"[,;]", value) if p]


class runopt:
    """One scheduler option: default, type, whether required, help. ``help`` may be given
    as a function, called the first time it is read: typed options take their help from
    their source's docstrings, which only ``--help``, previews and errors need (reading them
    cost a run ~90 ms)."""

    __slots__ = ("_help", "_help_of", "default", "is_required", "opt_type")
    _help: str
    _help_of: Callable[[], str] | None

    def __init__(
        self,
        default: CfgVal,
        opt_type: Any,
        is_required: bool,
        help: str | Callable[[], str] = "",
    ) -> None:
        self.default = default
        self.opt_type = opt_type
        self.is_required = is_required
        self.help = help  # the setter takes a function too

    @property
    def help(self) -> str:
        if self._help_of is not None:
            self._help, self._help_of = self._help_of(), None
        return self._help

    @help.setter
    def help(self, value: str | Callable[[], str]) -> None:
        if callable(value):
            self._help_of, self._help = value, ""
        else:
            self._help_of, self._help = None, value

    def __repr__(self) -> str:
        return (
            f"runopt(default={self.default!r}, opt_type={self.opt_type!r},"
            f" is_required={self.is_required!r}, help={self.help!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, runopt):
            return NotImplemented
        return (self.default, self.opt_type, self.is_required, self.help) == (
            other.default,
            other.opt_type,
            other.is_required,
            other.help,
        )

    __hash__ = None  # type: ignore[assignment]  # as a dataclass's: mutable, unhashable

    @property
    def is_type_list_of_str(self) -> bool:
        return self.opt_type in (list[str], list, typing.List[str])  # noqa: UP006

    @property
    def is_type_dict_of_str(self) -> bool:
        return self.opt_type in (dict[str, str], dict, typing.Dict[str, str])  # noqa: UP006

    def cast_to_type(self, value: str) -> CfgVal:
        """Parse ``value`` (text from a command line or config file) as this option's type."""
        if self.opt_type is bool:
            return parse_bool(value)
        if self.is_type_list_of_str:
            return _split(value)
        if self.is_type_dict_of_str:
            out: dict[str, str] = {}
            for pair in _split(value):
                key, sep, val = pair.partition(":")
                if not sep:
                    raise ValueError(f"expected KEY:VALUE pairs, got {pair!r}")
                out[key] = val
            return out
        return self.opt_type(value)


def _matches_type(value: Any, opt: runopt) -> bool:
    if opt.opt_type is bool:
        return isinstance(value, bool)
    if opt.opt_type is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if opt.opt_type is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if opt.is_type_list_of_str:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if opt.is_type_dict_of_str:
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    if isinstance(opt.opt_type, type):
        return isinstance(value, opt.opt_type)
    return True


def _check_utf8(key: str, raw: str) -> None:
    """An option (its name or value) holding a byte that is not UTF-8 (a command line's
    ``$'\\xff'``, which Python reads as a lone surrogate) is one line naming it: it failed
    later as "'utf-8' codec can't encode character", naming nothing."""
    fix = "(check the shell's quoting and the terminal's encoding)"
    if not _is_utf8(key):
        raise InvalidRunConfigException(
            f"an option name holds a byte that is not UTF-8 ('{_shown(key)}'): write it as"
            f" UTF-8 text {fix}",
            _shown(key),
        )
    if not _is_utf8(raw):
        raise InvalidRunConfigException(
            f"option {key!r} holds a byte that is not UTF-8 ('{_shown(raw)}'): give"
            f" -cfg {key}=VALUE as UTF-8 text {fix}",
            key,
        )


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(text: str) -> str:
    """``text`` printable: a byte a command line gave that is not UTF-8 as ``\\xNN``, any
    other lone surrogate as ``\\uNNNN``."""
    return (
        "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
        .encode("utf-8", "backslashreplace")
        .decode()
    )


def split_key_values(text: str, delims: str = ",") -> list[tuple[str, str]]:
    """Split ``k=v,k2=a;b,k3="x,y"`` into pairs; a delimiter starts a new pair only before
    ``key=`` (so ``CUDA_VISIBLE_DEVICES=0,1`` is one pair, as in TorchX). Scheduler options pass
    ``delims=",;"``: TorchX reads ``K=a;b;J=d`` as ``K=a;b`` and ``J=d``. Raises ValueError."""
    pairs: list[tuple[str, str]] = []
    key: str | None = None
    buf: list[str] = []
    quote: str | None = None
    i = 0
    text = text.strip()

    def flush() -> None:
        nonlocal key, buf
        val = "".join(buf)
        if key is None:
            if val.strip():
                raise ValueError(f"expected KEY=VALUE, got {val.strip()!r}")
        else:
            pairs.append((key.strip(), val.strip()))
        key, buf = None, []

    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
            else:
                buf.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == "=" and key is None:
            key = "".join(buf)
            buf = []
            if not key.strip():
                raise ValueError(f"missing key before '=' in {text!r}")
        elif ch in delims:
            rest = text[i + 1 :]
            if key is None or re.match(r"\s*[\w.\-]+\s*=", rest) or not rest.strip():
                flush()
            else:
                buf.append(ch)
        else:
            buf.append(ch)
        i += 1
    if quote:
        raise ValueError(f"unterminated quote in {text!r}")
    flush()
    return pairs


class runopts:
    """The set of options a scheduler accepts, with types, defaults and help."""

    def __init__(self) -> None:
        self._opts: dict[str, runopt] = {}

    def __iter__(self) -> Iterator[tuple[str, runopt]]:
        return iter(self._opts.items())

    def __len__(self) -> int:
        return len(self._opts)

    def __contains__(self, key: object) -> bool:
        return key in self._opts

    @staticmethod
    def is_type(obj: CfgVal, tp: Any) -> bool:
        """``isinstance`` that also takes ``List[str]``/``Dict[str, str]``: any list of strings or
        dict of strings matches a generic type (TorchX's rule)."""
        try:
            return isinstance(obj, tp)
        except TypeError:
            if isinstance(obj, list):
                return all(isinstance(e, str) for e in obj)
            if isinstance(obj, dict):
                return all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items())
            return False

    def add(
        self,
        cfg_key: str,
        type_: Any,
        help: str | Callable[[], str],
        default: CfgVal = None,
        required: bool = False,
    ) -> None:
        """Declare an option; a required option cannot have a default."""
        if required and default is not None:
            raise ValueError(f"required option {cfg_key!r} cannot have a default ({default!r})")
        opt = runopt(default, type_, required, help)
        if default is not None and not runopts.is_type(default, type_):
            raise TypeError(
                f"option {cfg_key!r}: default {default!r} is not of type {_type_name(type_)}"
            )
        self._opts[cfg_key] = opt

    def get(self, name: str) -> runopt | None:
        return self._opts.get(name)

    def update(self, other: runopts) -> None:
        self._opts.update(other._opts)

    def resolve(self, cfg: Mapping[str, CfgVal]) -> dict[str, CfgVal]:
        """A copy of ``cfg`` with defaults filled in; missing required options and wrong types
        raise InvalidRunConfigException. Unknown keys are kept."""
        resolved: dict[str, CfgVal] = dict(cfg)
        for key, opt in self._opts.items():
            val = resolved.get(key)
            if val is None or (opt.is_required and isinstance(val, str) and not val.strip()):
                if opt.is_required:
                    raise InvalidRunConfigException(
                        f"missing required option {key!r} ({_type_name(opt.opt_type)}: {opt.help});"
                        f" pass it with -cfg {key}=VALUE or set it in .torchxconfig",
                        key,
                        cfg,
                    )
                resolved[key] = copy.copy(opt.default)
            elif not _matches_type(val, opt):
                if isinstance(val, str):
                    try:
                        resolved[key] = opt.cast_to_type(val)
                        continue
                    except (ValueError, TypeError):
                        pass
                raise InvalidRunConfigException(
                    f"option {key!r} expects {_type_name(opt.opt_type)}, got {val!r}",
                    key,
                    cfg,
                )
        return resolved

    def unknown_keys(self, cfg: Mapping[str, Any]) -> list[str]:
        return [k for k in cfg if k not in self._opts]

    def suggest(self, key: str) -> str | None:
        close = difflib.get_close_matches(key, list(self._opts), n=1)
        return close[0] if close else None

    def cfg_from_str(self, cfg_str: str, strict: bool = False) -> dict[str, CfgVal]:
        """Parse ``"k=v,k2=a;b"`` into typed values. Unknown keys are dropped with a warning, or
        raise InvalidRunConfigException when ``strict``."""
        import warnings

        cfg: dict[str, CfgVal] = {}
        try:
            pairs = split_key_values(cfg_str, delims=",;")
        except ValueError as e:
            raise InvalidRunConfigException(
                f"cannot parse scheduler options {cfg_str!r}: {e}; write them as KEY=VALUE,KEY=VALUE",
                "",
            ) from None
        for key, raw in pairs:
            _check_utf8(key, raw)
            opt = self._opts.get(key)
            if opt is None:
                hint = self.suggest(key)
                msg = f"unknown option {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
                msg += f" (known: {', '.join(self._opts) or 'none'})"
                if strict:
                    raise InvalidRunConfigException(msg, key)
                warnings.warn(msg, stacklevel=2)
                continue
            try:
                cfg[key] = None if raw == "None" else opt.cast_to_type(raw)
            except (ValueError, TypeError) as e:
                raise InvalidRunConfigException(
                    f"option {key!r} expects {_type_name(opt.opt_type)}: {e}", key
                ) from None
        return cfg

    def cfg_from_json_repr(self, json_repr: str) -> dict[str, CfgVal]:
        """Parse a JSON object of options, casting strings to each option's type."""
        raw = json.loads(json_repr)
        out: dict[str, CfgVal] = {}
        for key, val in raw.items():
            opt = self._opts.get(key)
            out[key] = opt.cast_to_type(val) if opt and isinstance(val, str) else val
        return out

    def __repr__(self) -> str:
        required = [(k, o) for k, o in self._opts.items() if o.is_required]
        optional = [(k, o) for k, o in self._opts.items() if not o.is_required]
        lines: list[str] = []
        if required:
            lines.append("    required arguments:")
            for k, o in required:
                lines.append(f"        {k}={k.upper()} ({_type_name(o.opt_type)})")
                lines.append(f"            {o.help}")
        if optional:
            lines.append("    optional arguments:")
            for k, o in optional:
                lines.append(f"        {k}={k.upper()} ({_type_name(o.opt_type)}, {o.default})")
                lines.append(f"            {o.help}")
        return "\n".join(lines) if lines else "    (no options)"


TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def parse_bool(text: str) -> bool:
    """A yes/no value as a command line or config file writes it (``-cfg``, a component's
    ``--flag``): the one reading, so both say the same about a typo."""
    low = text.strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false (or yes/no, on/off, 1/0), got {text[:80]!r}")
