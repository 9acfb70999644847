"""The ``--packages`` option (auto, none, or a requirements file with names asked for),
checked before anything is built. Light on purpose: every run checks it, and the
requirements machinery (URL fetching, lockfiles) is only imported when a file is read."""

from __future__ import annotations

import re
from pathlib import Path

from torchx_nb.specs.api import TorchxNbError

_ASKED = re.compile(r"^(?P<file>.+?)\[(?P<names>[A-Za-z0-9._,\s-]*)\]$")


def split_option(value: str) -> tuple[Path, tuple[str, ...]]:
    """``FILE[extra,group]`` -> the file and the names asked for."""
    m = _ASKED.match(value.strip())
    if m is None:
        return Path(value.strip()).expanduser(), ()
    names = tuple(n.strip() for n in m["names"].split(",") if n.strip())
    return Path(m["file"]).expanduser(), names


def check_packages_option(value: str) -> str:
    """``auto``, ``none`` or an existing requirements.txt / pyproject.toml / uv.lock; else one
    line naming the fix (before anything is built)."""
    v = value.strip()
    if v.lower() in ("auto", "none"):
        return v.lower()
    path, asked = split_option(v)
    if not path.is_file():
        raise TorchxNbError(
            f"--packages {value!r}: no such file; use auto, none, or a requirements.txt,"
            " pyproject.toml or uv.lock"
        )
    if path.name != "uv.lock" and path.suffix not in (".txt", ".toml", ".in"):
        raise TorchxNbError(
            f"--packages {value!r}: give a requirements.txt, a pyproject.toml or a uv.lock"
        )
    if asked and path.suffix not in (".toml", ".lock"):
        raise TorchxNbError(
            f"--packages {value!r}: [names] (extras, dependency groups) go with a"
            " pyproject.toml or a uv.lock"
        )
    return f"{path}[{','.join(asked)}]" if asked else str(path)
