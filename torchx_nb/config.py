"""``.torchxconfig``: scheduler options, component defaults and CLI defaults from INI files.

Lookup, as in TorchX: ``$TORCHXCONFIG`` alone if set, else ``~/.torchxconfig`` then
``./.torchxconfig``. Values already given (command line, code) always win; earlier files win over
later ones; runopt defaults come last."""

from __future__ import annotations

import configparser
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from torchx_nb.specs.api import CfgVal, InvalidRunConfigException, TorchxNbError, runopts

CONFIG_FILE = ".torchxconfig"
ENV_TORCHXCONFIG = "TORCHXCONFIG"


class ConfigError(TorchxNbError):
    """A .torchxconfig file cannot be read."""


def find_configs(dirs: Iterable[str | os.PathLike[str]] | None = None) -> list[Path]:
    """The config files in effect, highest precedence first."""
    explicit = os.environ.get(ENV_TORCHXCONFIG)
    if explicit is not None:
        if not explicit:
            return []
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"{ENV_TORCHXCONFIG}={explicit} does not exist: create it or unset the variable"
            )
        return [path]
    candidates = [Path(d) / CONFIG_FILE for d in (dirs or [Path.home(), Path.cwd()])]
    seen: set[Path] = set()
    out: list[Path] = []
    for c in candidates:
        key = c.resolve() if c.exists() else c
        if c.is_file() and os.access(c, os.R_OK) and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _load(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read(path)
    except configparser.Error as e:
        raise ConfigError(f"cannot parse {path}: {e.message}") from None
    return parser


def load_sections(
    section: str, dirs: Iterable[str | os.PathLike[str]] | None = None
) -> dict[str, str]:
    """Raw ``key = value`` strings of ``[section]`` merged across config files (first wins)."""
    out: dict[str, str] = {}
    for path in find_configs(dirs):
        parser = _load(path)
        if parser.has_section(section):
            for key, val in parser.items(section):
                out.setdefault(key, val)
    return out


def apply(
    scheduler: str,
    cfg: dict[str, CfgVal],
    opts: runopts,
    dirs: Iterable[str | os.PathLike[str]] | None = None,
) -> dict[str, CfgVal]:
    """Fill ``cfg`` (in place, and returned) from ``[scheduler]`` sections, typed by ``opts``;
    keys already in ``cfg`` are never overridden."""
    for path in find_configs(dirs):
        parser = _load(path)
        if not parser.has_section(scheduler):
            continue
        for key, raw in parser.items(scheduler):
            if key in cfg:
                continue
            opt = opts.get(key)
            if opt is None:
                hint = opts.suggest(key)
                warnings.warn(
                    f"{path}: [{scheduler}] has unknown option {key!r}"
                    + (f"; did you mean {hint!r}?" if hint else ""),
                    stacklevel=2,
                )
                continue
            if raw.strip() in ("None", "") or raw.lstrip().startswith("#FIXME"):
                if opt.is_required and raw.lstrip().startswith("#FIXME"):
                    raise InvalidRunConfigException(
                        f"{path}: [{scheduler}] {key} is still the template's placeholder"
                        f" ({raw.strip()[:40]}…); set a real value there or pass -cfg {key}=VALUE",
                        key,
                        cfg,
                    )
                continue
            try:
                cfg[key] = opt.cast_to_type(raw)
            except (ValueError, TypeError) as e:
                raise InvalidRunConfigException(
                    f"{path}: [{scheduler}] {key} = {raw!r}: {e}", key, cfg
                ) from None
    return cfg


def component_defaults(
    component: str, dirs: Iterable[str | os.PathLike[str]] | None = None
) -> dict[str, str]:
    """``[component:NAME]`` defaults for a component's arguments."""
    return load_sections(f"component:{component}", dirs)


def cli_defaults(cmd: str, dirs: Iterable[str | os.PathLike[str]] | None = None) -> dict[str, str]:
    """``[cli:CMD]`` defaults, e.g. ``[cli:run] scheduler = local_cwd``."""
    return load_sections(f"cli:{cmd}", dirs)


def _fmt_default(val: CfgVal) -> str:
    if isinstance(val, list):
        return ";".join(val)
    if isinstance(val, dict):
        return ";".join(f"{k}:{v}" for k, v in val.items())
    return str(val)


def dump(f: TextIO, schedulers: dict[str, runopts], required_only: bool = False) -> None:
    """Write a ``.torchxconfig`` template: required options as ``#FIXME`` placeholders, optional
    ones (unless ``required_only``) with their defaults."""
    for name, opts in schedulers.items():
        f.write(f"[{name}]\n")
        for key, opt in opts:
            type_name = getattr(opt.opt_type, "__name__", str(opt.opt_type))
            if opt.is_required:
                f.write(f"{key} = #FIXME:({type_name}) {opt.help}\n")
            elif not required_only:
                f.write(f"{key} = {_fmt_default(opt.default)}\n")
        f.write("\n")
