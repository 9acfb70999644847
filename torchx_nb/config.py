"""``.torchxconfig``: scheduler options, component defaults and CLI defaults from INI files.

Lookup, as in TorchX: ``$TORCHXCONFIG`` alone if set (an empty value means no file), else
``~/.torchxconfig`` then ``./.torchxconfig``. Values already given (command line, code) always
win; earlier files win over later ones; runopt defaults come last.

TorchX's ``torchx.runner.config`` functions are here with TorchX's signatures and return types
(``find_configs``, ``load``, ``apply``, ``load_sections``, ``get_configs``, ``get_config``,
``dump``). Our own helpers, which take the runopts instead of creating the scheduler, are
``apply_runopts``, ``read_section``, ``component_defaults``, ``cli_defaults`` and
``dump_runopts``."""

from __future__ import annotations

import configparser
import io
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from torchx_nb.specs.api import (
    CfgVal,
    InvalidRunConfigException,
    get_type_name,
    runopt,
    runopts,
)
from torchx_nb.specs.exceptions import ConfigError as ConfigError
from torchx_nb.specs.exceptions import ConfigNotFoundError as ConfigNotFoundError

CONFIG_FILE = ".torchxconfig"
CONFIG_PREFIX_DELIM = ":"
ENV_TORCHXCONFIG = "TORCHXCONFIG"
DEFAULT_CONFIG_DIRS = [str(Path.home()), str(Path.cwd())]
_IMPORTED_DIRS = list(DEFAULT_CONFIG_DIRS)


def default_dirs() -> list[str]:
    """Where config files are looked for: ``DEFAULT_CONFIG_DIRS`` once a program sets it (as
    TorchX reads it); until then home and the current folder as they are now, so a notebook's
    ``%cd`` takes effect (TorchX fixes the current folder at import)."""
    if DEFAULT_CONFIG_DIRS != _IMPORTED_DIRS:
        return [str(d) for d in DEFAULT_CONFIG_DIRS]
    return [str(Path.home()), str(Path.cwd())]


_NONE = "None"


def find_configs(dirs: Iterable[str | os.PathLike[str]] | None = None) -> list[str]:
    """The config files in effect, highest precedence first: ``$TORCHXCONFIG`` alone when set,
    else ``.torchxconfig`` in each of ``dirs`` (default: ``default_dirs()``)."""
    explicit = os.environ.get(ENV_TORCHXCONFIG)
    if explicit is not None:
        if not explicit:
            return []
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigNotFoundError(
                f"{ENV_TORCHXCONFIG}={explicit} does not exist: create it or unset the variable"
            )
        return [str(path)]
    candidates = [Path(d) / CONFIG_FILE for d in (dirs or default_dirs())]
    seen: set[Path] = set()
    out: list[str] = []
    for c in candidates:
        key = c.resolve() if c.exists() else c
        if c.is_file() and os.access(c, os.R_OK) and key not in seen:
            seen.add(key)
            out.append(str(c))
    return out


def _parse(text: str, origin: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source=origin)
    except configparser.Error as e:
        raise ConfigError(f"cannot parse {origin}: {e.message}") from None
    return parser


def _load(path: str) -> configparser.ConfigParser:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    return _parse(text, path)


def _fill(
    parser: configparser.ConfigParser,
    origin: str,
    scheduler: str,
    cfg: dict[str, CfgVal],
    opts: runopts,
) -> None:
    """Add ``[scheduler]`` values of one file to ``cfg``, typed by ``opts``; keys already in
    ``cfg`` stay; ``None`` and empty values leave the option to its default."""
    if not parser.has_section(scheduler):
        return
    for key, raw in parser.items(scheduler):
        if key in cfg:
            continue
        opt = opts.get(key)
        if opt is None:
            hint = opts.suggest(key)
            warnings.warn(
                f"{origin}: [{scheduler}] has unknown option {key!r}"
                + (f"; did you mean {hint!r}?" if hint else ""),
                stacklevel=3,
            )
            continue
        if raw.strip() in (_NONE, "") or raw.lstrip().startswith("#FIXME"):
            if opt.is_required and raw.lstrip().startswith("#FIXME"):
                raise InvalidRunConfigException(
                    f"{origin}: [{scheduler}] {key} is still the template's placeholder"
                    f" ({raw.strip()[:40]}…); set a real value there or pass -cfg {key}=VALUE",
                    key,
                    cfg,
                )
            continue
        try:
            cfg[key] = opt.cast_to_type(raw)
        except (ValueError, TypeError) as e:
            raise InvalidRunConfigException(
                f"{origin}: [{scheduler}] {key} = {raw!r}: {e}", key, cfg
            ) from None


def apply_runopts(
    scheduler: str,
    cfg: dict[str, CfgVal],
    opts: runopts,
    dirs: Iterable[str | os.PathLike[str]] | None = None,
) -> dict[str, CfgVal]:
    """Fill ``cfg`` (in place, and returned) from ``[scheduler]`` sections, typed by ``opts``;
    keys already in ``cfg`` are never overridden."""
    for path in find_configs(dirs):
        _fill(_load(path), path, scheduler, cfg, opts)
    return cfg


def _scheduler_opts(scheduler: str) -> runopts:
    from torchx_nb.schedulers import get_scheduler_factories

    factories = get_scheduler_factories()
    if scheduler not in factories:
        raise ValueError(
            f"{scheduler!r} is not a registered scheduler (known: {', '.join(factories)})"
        )
    sched = factories[scheduler]("_")
    try:
        return sched.run_opts()
    finally:
        sched.close()


def load(scheduler: str, f: TextIO, cfg: dict[str, CfgVal]) -> None:
    """TorchX's ``load``: add the ``[scheduler]`` section of INI file ``f`` to ``cfg`` (typed by
    the scheduler's runopts), keeping the values ``cfg`` already has."""
    origin = getattr(f, "name", "<config>")
    _fill(_parse(f.read(), str(origin)), str(origin), scheduler, cfg, _scheduler_opts(scheduler))


def apply(scheduler: str, cfg: dict[str, CfgVal], dirs: list[str] | None = None) -> None:
    """TorchX's ``apply``: ``load`` every config file of ``find_configs(dirs)`` into ``cfg``."""
    apply_runopts(scheduler, cfg, _scheduler_opts(scheduler), dirs)


def load_sections(prefix: str, dirs: list[str] | None = None) -> dict[str, dict[str, str]]:
    """TorchX's ``load_sections``: every ``[PREFIX:NAME]`` section as ``{NAME: {key: value}}``,
    merged across config files (the first file wins)."""
    sections: dict[str, dict[str, str]] = {}
    for path in find_configs(dirs):
        parser = _load(path)
        for section_name in parser.sections():
            head, sep, name = section_name.partition(CONFIG_PREFIX_DELIM)
            if sep and head == prefix and head and name:
                section = sections.setdefault(name, {})
                for key, val in parser.items(section_name):
                    section.setdefault(key, val)
    return sections


def get_configs(prefix: str, name: str, dirs: list[str] | None = None) -> dict[str, str]:
    """The values of ``[PREFIX:NAME]``, or ``{}``."""
    return load_sections(prefix, dirs).get(name, {})


def get_config(prefix: str, name: str, key: str, dirs: list[str] | None = None) -> str | None:
    """The value of ``key`` in ``[PREFIX:NAME]``, or None."""
    return get_configs(prefix, name, dirs).get(key)


def read_section(
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


def component_defaults(
    component: str, dirs: Iterable[str | os.PathLike[str]] | None = None
) -> dict[str, str]:
    """``[component:NAME]`` defaults for a component's arguments."""
    return read_section(f"component:{component}", dirs)


def cli_defaults(cmd: str, dirs: Iterable[str | os.PathLike[str]] | None = None) -> dict[str, str]:
    """``[cli:CMD]`` defaults, e.g. ``[cli:run] scheduler = local_cwd``."""
    return read_section(f"cli:{cmd}", dirs)


def _fmt_default(val: CfgVal) -> str:
    if isinstance(val, list):
        return ";".join(val) if val else _NONE
    if isinstance(val, dict):
        return ";".join(f"{k}:{v}" for k, v in val.items()) if val else _NONE
    return str(val)


def _fixme_placeholder(opt: runopt, max_len: int = 60) -> str:
    text = f"#FIXME:({get_type_name(opt.opt_type)}) {opt.help}"
    return text if len(text) <= max_len else f"{text[:max_len]}..."


def dump_runopts(f: TextIO, schedulers: Mapping[str, runopts], required_only: bool = False) -> None:
    """Write a ``.torchxconfig`` template in TorchX's format: required options as ``#FIXME``
    placeholders, optional ones (unless ``required_only``) with their defaults."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    for name, opts in schedulers.items():
        parser.add_section(name)
        for key, opt in opts:
            if opt.is_required:
                parser.set(name, key, _fixme_placeholder(opt))
            elif not required_only:
                parser.set(name, key, _fmt_default(opt.default))
    buf = io.StringIO()
    parser.write(buf, space_around_delimiters=True)
    f.write(buf.getvalue())


def dump(f: TextIO, schedulers: list[str] | None = None, required_only: bool = False) -> None:
    """TorchX's ``dump``: a template for the named schedulers (default: every registered one
    whose SDK is installed)."""
    from torchx_nb.schedulers import get_scheduler_factories

    names = schedulers or list(get_scheduler_factories())
    opts: dict[str, runopts] = {}
    for name in names:
        try:
            opts[name] = _scheduler_opts(name)
        except ModuleNotFoundError:
            if schedulers:
                raise
    dump_runopts(f, opts, required_only)
