"""The package index the kernel's pip uses: its ``index-url``, ``extra-index-url`` and
``find-links``, as ``pip config list`` and the ``PIP_*`` variables give them (uv reads
neither, so they are passed to it explicitly), with credentials in a URL masked wherever
they are shown."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

_CREDS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<creds>[^/@\s]+)@")
_KEYS = frozenset({"index-url", "extra-index-url", "find-links", "no-index"})
_SECTIONS = ("global", "install", "download", ":env:")


def mask_url(url: str) -> str:
    """``https://user:token@host/simple`` -> ``https://***@host/simple``."""
    return _CREDS.sub(r"\g<scheme>***@", url)


@dataclass(frozen=True)
class IndexSettings:
    """Where distributions are looked up: pip's primary index (None: pip's default), extra
    indexes and find-links folders or pages."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        elif self.index_url:
            args += ["--index-url", self.index_url]
        if not self.no_index:
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args

    def describe(self) -> str:
        """One line, credentials masked."""
        parts = []
        if self.no_index:
            parts.append("no index")
        else:
            parts.append(mask_url(self.index_url) if self.index_url else "pip's default index")
            parts += [mask_url(u) for u in self.extra_index_urls]
        parts += [f"find-links {mask_url(u)}" for u in self.find_links]
        return ", ".join(parts)


def _split(value: str) -> tuple[str, ...]:
    return tuple(v for v in re.split(r"\s+", value.strip()) if v)


def _parse(listing: str) -> dict[str, str]:
    """``pip config list`` lines (``global.index-url='…'``), later sections winning as pip
    ranks them (install over global, the environment over files)."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        section, _, name = key.rpartition(".")
        if section not in _SECTIONS or name not in _KEYS:
            continue
        try:
            value = " ".join(shlex.split(value))
        except ValueError:
            value = value.strip("'\"")
        rank = _SECTIONS.index(section)
        if name not in found or rank >= found[name][0]:
            found[name] = (rank, value)
    return {k: v for k, (_, v) in found.items()}


def _config_files(python: str) -> list[str]:
    """Where pip looks for its configuration (its ``pip config debug`` list), for the cache
    key: a change to any of them, or to a ``PIP_*`` variable, reads pip's settings again."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
    dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    prefix = os.path.dirname(os.path.dirname(python))
    return [
        "/etc/pip.conf",
        *(os.path.join(d, "pip", "pip.conf") for d in dirs),
        os.path.join(xdg, "pip", "pip.conf"),
        os.path.join(home, ".pip", "pip.conf"),
        os.path.join(prefix, "pip.conf"),
        "/Library/Application Support/pip/pip.conf",
        os.path.join(home, "Library", "Application Support", "pip", "pip.conf"),
        os.environ.get("PIP_CONFIG_FILE", ""),
    ]


def _cache_key(python: str) -> str:
    import hashlib
    import json

    stamps = []
    for path in _config_files(python):
        try:
            st = os.stat(path)
            stamps.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            stamps.append([path, None, None])
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))
    doc = json.dumps([python, stamps, env])
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


@lru_cache(maxsize=8)
def _pip_config(python: str, key: str) -> dict[str, str]:
    """pip's own reading of its configuration (``pip config list``), cached on disk by
    ``key`` (a subprocess costs a third of a second)."""
    import json

    from torchx_nb.paths import data_dir, private_dir, write_private

    cache = private_dir(data_dir() / "pip-config") / f"{key}.json"
    try:
        return dict(json.loads(cache.read_text()))
    except (OSError, ValueError):
        pass
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = _parse(out)
    write_private(cache, json.dumps(values))
    return values


def _only_variables(python: str) -> bool:
    """Whether pip reads no configuration file here (``PIP_CONFIG_FILE`` is the null device,
    which turns them all off, or none of them exists): then its settings are its ``PIP_*``
    variables alone, read without starting pip."""
    if os.environ.get("PIP_CONFIG_FILE") == os.devnull:
        return True
    return not any(path and os.path.exists(path) for path in _config_files(python))


def _variables_listing() -> str:
    """The ``PIP_*`` variables as ``pip config list`` prints them (``:env:.index-url='…'``)."""
    return "\n".join(
        f":env:.{key[4:].lower().replace('_', '-')}={value!r}"
        for key, value in sorted(os.environ.items())
        if key.startswith("PIP_")
    )


def kernel_index(python: str | None = None) -> IndexSettings:
    """The index settings the kernel's pip would use (its config files and ``PIP_*``)."""
    python = python or sys.executable
    if _only_variables(python):
        values = _parse(_variables_listing())
    else:
        values = _pip_config(python, _cache_key(python))
    no_index = values.get("no-index", "").lower() in ("1", "true", "yes", "on")
    return IndexSettings(
        index_url=values.get("index-url") or None,
        extra_index_urls=_split(values.get("extra-index-url", "")),
        find_links=_split(values.get("find-links", "")),
        no_index=no_index,
    )
