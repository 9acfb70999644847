"""StructuredOpts: scheduler options declared as a typed dataclass.

A subclass lists its options as fields; ``as_runopts()`` derives the ``runopts`` (types, defaults,
required-ness and help from the attribute docstrings) and ``from_cfg()`` builds an instance from a
cfg mapping, accepting snake_case or camelCase keys."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from torchx_nb.specs.api import CfgVal, InvalidRunConfigException, as_cfg, runopts
from torchx_nb.specs.hints import unwrap_optional

S = TypeVar("S", bound="StructuredOpts")
_RUNOPTS: dict[type, runopts] = {}


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _field_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string literal right after it), read by
    docstring_parser's attribute reader; a subclass's wins over its bases'. The class's own
    docstring is not read for them: a ``Parameters`` or ``Attributes`` section there hid the
    attribute docstrings or overrode them (``parse_from_object``)."""
    from docstring_parser.attrdoc import AttributeDocstrings

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, StructuredOpts) or not dataclasses.is_dataclass(klass):
            continue
        try:
            found = AttributeDocstrings().get_attr_docs(klass)
        except (OSError, TypeError):
            continue
        for name, (description, _type, _default) in found.items():
            if description:
                docs[name] = " ".join(description.split())
    return docs


@dataclasses.dataclass
class StructuredOpts:
    """Base class for typed scheduler options (subclass it as a ``@dataclass``). Read by
    attribute; code written TorchX's way, which reads options as a mapping, gets them through
    ``as_cfg`` (the one adapter)."""

    @classmethod
    def _cfg_key(cls, f: dataclasses.Field[Any]) -> str:
        return str(f.metadata.get("cfg_key", f.name))

    @classmethod
    def as_runopts(cls) -> runopts:
        """The equivalent ``runopts`` for help, validation and ``.torchxconfig`` (built once
        per class: the help comes from the source's attribute docstrings)."""
        cached = _RUNOPTS.get(cls)
        if cached is None:
            cached = _RUNOPTS[cls] = cls._build_runopts()
        opts = runopts()
        opts.update(cached)
        return opts

    @classmethod
    def _build_runopts(cls) -> runopts:
        opts = runopts()
        docs: list[dict[str, str]] = []  # read on the first help asked for, once per class

        def doc_of(name: str) -> Callable[[], str]:
            def read() -> str:
                if not docs:
                    docs.append(_field_docs(cls))
                return docs[0].get(name, "")

            return read

        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            tp = unwrap_optional(hints[f.name])
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            default = None if f.default is dataclasses.MISSING else f.default
            opts.add(
                cls._cfg_key(f),
                type_=tp,
                help=doc_of(f.name),
                default=default,
                required=required,
            )
        return opts

    @classmethod
    def from_cfg(cls: type[S], cfg: Mapping[str, CfgVal]) -> S:
        """Build from a cfg mapping; keys may be snake_case, camelCase or a field's ``cfg_key``.
        Two spellings of one option with different values are an error; a required option
        missing is one. Every field holds its value: what only some options given means is
        ``given()``'s mapping, never an instance with None in a required field."""
        values, extra = cls._by_field(cfg)
        resolved = cls.as_runopts().resolve(
            {cls._cfg_key(f): values[f.name] for f in dataclasses.fields(cls) if f.name in values}
        )
        kwargs = {
            f.name: resolved.get(cls._cfg_key(f))
            for f in dataclasses.fields(cls)
            if not f.name.startswith("_") and resolved.get(cls._cfg_key(f)) is not None
        }
        obj = cls(**kwargs)
        object.__setattr__(obj, "_extra_cfg", extra)
        return obj

    @classmethod
    def _by_field(cls, cfg: Mapping[str, CfgVal]) -> tuple[dict[str, CfgVal], dict[str, CfgVal]]:
        """``cfg``'s values by field name (any spelling of a field), and the keys no field
        declares; two spellings of one field with different values are an error."""
        by_alias: dict[str, str] = {}
        for f in dataclasses.fields(cls):
            for alias in (f.name, snake_to_camel(f.name), cls._cfg_key(f)):
                by_alias[alias] = f.name
        values: dict[str, Any] = {}
        seen_as: dict[str, str] = {}
        extra: dict[str, CfgVal] = {}
        for key, val in cfg.items():
            name = by_alias.get(key)
            if name is None:
                extra[key] = val
                continue
            if name in values and values[name] != val:
                raise InvalidRunConfigException(
                    f"option {name!r} given twice with different values"
                    f" (as {seen_as[name]!r} and {key!r})",
                    key,
                    cfg,
                )
            values[name] = val
            seen_as[name] = key
        return values, extra

    @classmethod
    def given(cls, cfg: Mapping[str, CfgVal]) -> dict[str, CfgVal]:
        """The options given in ``cfg`` and only those, by field name, each cast to its type
        (no default filled in, none required): what ``list`` and previews read, e.g. to
        list every queue when none is given. Its own type, a mapping, since a field may be
        missing here that the full options always hold."""
        values, _ = cls._by_field(cfg)
        relaxed = runopts()  # the same names and types, none required, no default
        for key, opt in cls.as_runopts():
            relaxed.add(key, opt.opt_type, lambda o=opt: o.help)  # type: ignore[misc]
        cast = relaxed.resolve(
            {cls._cfg_key(f): values[f.name] for f in dataclasses.fields(cls) if f.name in values}
        )
        keys = {f.name: cls._cfg_key(f) for f in dataclasses.fields(cls) if f.name in values}
        return {n: cast[k] for n, k in sorted(keys.items()) if cast.get(k) is not None}

    def with_(self: S, **changes: Any) -> S:
        """A copy with some fields changed (the options given and not declared are kept)."""
        obj = dataclasses.replace(self, **changes)
        object.__setattr__(obj, "_extra_cfg", getattr(self, "_extra_cfg", {}))
        return obj

    @property
    def extra(self) -> Mapping[str, CfgVal]:
        """Options given that no field declares (a subclass's own runopts)."""
        return dict(getattr(self, "_extra_cfg", {}))

    def to_cfg(self) -> dict[str, CfgVal]:
        """The options set, as a cfg mapping keyed by option name (``.torchxconfig``'s and
        ``-cfg``'s spelling), the undeclared ones given included."""
        out: dict[str, CfgVal] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not f.name.startswith("_") and value is not None:
                out[self._cfg_key(f)] = value
        return {**out, **self.extra}


@dataclasses.dataclass(kw_only=True)
class PreemptionOpts(StructuredOpts):
    """The preemption limit, one spelling on every backend whose jobs can be preempted (by its
    capacity, or by ``torchx-nb preempt``): a backend's ``*Opts`` derives it (or ``SpotOpts``).
    Keyword-only, so a backend's required options may follow it."""

    max_preemptions: int = 20
    """how many preemptions the job survives before it fails (each resumes from its checkpoint)"""

    def __post_init__(self) -> None:
        if self.max_preemptions is not None and int(self.max_preemptions) < 0:
            raise InvalidRunConfigException(
                f"max_preemptions must be 0 or more, not {self.max_preemptions}",
                "max_preemptions",
            )


@dataclasses.dataclass(kw_only=True)
class SpotOpts(PreemptionOpts):
    """The options every backend that runs on preemptible capacity shares (one spelling):
    ``spot`` and the preemption limit."""

    spot: bool = False
    """run on spot (preemptible) capacity; a preemption never spends max_retries"""


__all__ = [
    "PreemptionOpts",
    "SpotOpts",
    "StructuredOpts",
    "as_cfg",
    "camel_to_snake",
    "snake_to_camel",
]
