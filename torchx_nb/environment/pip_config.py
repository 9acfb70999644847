"""The kernel's pip settings that say where and how distributions are fetched, as ``pip
config list`` and the ``PIP_*`` variables give them (uv reads neither). pip's reading costs a
third of a second, so it is kept on disk for the next process: one file, the latest state
only, written atomically, and never when a setting holds credentials (nothing on disk keeps
them in clear; such a configuration is read from pip each time)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from functools import lru_cache

from torchx_nb.environment.index import IndexSettings

_KEYS = frozenset(
    {
        "index-url",
        "extra-index-url",
        "find-links",
        "no-index",
        "cert",
        "client-cert",
        "trusted-host",
        "keyring-provider",
    }
)
_SECTIONS = ("global", "install", "download", ":env:")
_HAS_CREDS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]*@")
CACHE_NAME = "pip-config.json"


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
    """A digest of what pip's reading depends on: its files' stamps and the ``PIP_*``
    variables (hashed: a variable may hold a token)."""
    stamps = []
    for path in _config_files(python):
        try:
            st = os.stat(path)
            stamps.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            stamps.append([path, None, None])
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))
    doc = json.dumps([python, stamps, env])
    return hashlib.sha256(doc.encode()).hexdigest()


def _cached(key: str) -> dict[str, str] | None:
    from torchx_nb.paths import data_dir

    try:
        doc = json.loads((data_dir() / CACHE_NAME).read_text())
        if isinstance(doc, dict) and doc.get("key") == key and isinstance(doc["values"], dict):
            return {str(k): str(v) for k, v in doc["values"].items()}
    except (OSError, ValueError, KeyError):
        pass  # none yet, or damaged: read pip again and write it anew
    return None


def _store(key: str, values: dict[str, str]) -> None:
    """Keep pip's reading for ``key``, unless it holds credentials (then drop what is kept)."""
    import shutil

    from torchx_nb.paths import data_dir, private_dir, write_private

    folder = private_dir(data_dir())
    shutil.rmtree(folder / "pip-config", ignore_errors=True)  # one file per state, before
    path = folder / CACHE_NAME
    if any(_HAS_CREDS.search(v) for v in values.values()):
        path.unlink(missing_ok=True)
        return
    write_private(path, json.dumps({"key": key, "values": values}))


@lru_cache(maxsize=8)
def _pip_config(python: str, key: str) -> dict[str, str]:
    """pip's own reading of its configuration (``pip config list``)."""
    values = _cached(key)
    if values is not None:
        return values
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
    _store(key, values)
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
        cert=values.get("cert") or None,
        client_cert=values.get("client-cert") or None,
        trusted_hosts=_split(values.get("trusted-host", "")),
        keyring_provider=values.get("keyring-provider") or None,
    )
