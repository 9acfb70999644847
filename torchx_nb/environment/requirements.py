"""``--packages FILE``: the distributions a requirements.txt, a pyproject.toml or a uv.lock
names, resolved to exact pins for the image's Python and platform (``uv pip compile`` with
the kernel's index settings; a uv.lock is already pinned) instead of the kernel's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from torchx_nb.environment.index import IndexSettings, uv_message
from torchx_nb.specs.api import TorchxNbError

if TYPE_CHECKING:
    from torchx_nb.workspace.image_contents import ImageContents

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+)")


def check_packages_option(value: str) -> str:
    """``auto``, ``none`` or an existing requirements.txt / pyproject.toml / uv.lock; else one
    line naming the fix (before anything is built)."""
    v = value.strip()
    if v.lower() in ("auto", "none"):
        return v.lower()
    path = Path(v).expanduser()
    if not path.is_file():
        raise TorchxNbError(
            f"--packages {value!r}: no such file; use auto, none, or a requirements.txt,"
            " pyproject.toml or uv.lock"
        )
    if path.name != "uv.lock" and path.suffix not in (".txt", ".toml", ".in"):
        raise TorchxNbError(
            f"--packages {value!r}: give a requirements.txt, a pyproject.toml or a uv.lock"
        )
    return str(path)


def _from_lock(path: Path) -> list[tuple[str, str]]:
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TorchxNbError(f"--packages {path}: not a readable uv.lock ({e})") from None
    out = []
    for pkg in data.get("package", []):
        source = pkg.get("source", {})
        if not isinstance(source, dict) or "editable" in source or "virtual" in source:
            continue  # the project itself travels in the workspace
        if isinstance(pkg.get("name"), str) and isinstance(pkg.get("version"), str):
            out.append((pkg["name"], pkg["version"]))
    return out


def _compile(
    path: Path, contents: ImageContents | None, index: IndexSettings
) -> list[tuple[str, str]]:
    from torchx_nb.environment.wheels import uv_bin

    cmd = [uv_bin(), "pip", "compile", "--no-config", "--no-header", "--no-annotate", "--quiet"]
    if contents is not None and contents.python:
        cmd += ["--python-version", contents.python, "--python-platform", contents.platform]
    cmd += [*index.uv_args(), str(path)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, timeout=600, env=index.uv_env()
    )
    if proc.returncode != 0:
        why = uv_message(proc.stderr, 300)
        raise TorchxNbError(f"--packages {path}: cannot resolve its requirements ({why})")
    return [(m[1], m[2]) for line in proc.stdout.splitlines() if (m := _PIN.match(line.strip()))]


def pins_from_file(
    path: Path, contents: ImageContents | None, index: IndexSettings
) -> list[tuple[str, str]]:
    """The exact pins (name, version) ``path`` gives."""
    return _from_lock(path) if path.name == "uv.lock" else _compile(path, contents, index)
