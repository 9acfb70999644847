"""The peers we measure against, installed apart from the project: TorchX 0.7.0 in its own
virtualenv (cached, so only the first benchmark run pays for the install)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

TORCHX_VERSION = "0.7.0"


def cache_dir() -> Path:
    explicit = os.environ.get("TORCHX_NB_BENCH_CACHE")
    return Path(explicit) if explicit else Path.home() / ".cache" / "torchx_nb" / "bench"


def ensure_torchx_venv(extras: tuple[str, ...] = ()) -> Path:
    """Path of the ``torchx`` executable of a virtualenv holding ``torchx==0.7.0`` (plus
    ``extras``, e.g. boto3 for its AWS schedulers), made on first use; the extras are
    installed whether the virtualenv is new or was made by an earlier benchmark."""
    root = cache_dir() / f"torchx-{TORCHX_VERSION}"
    exe = root / "bin" / "torchx"
    marker = root / ".installed"
    if not (marker.exists() and exe.exists()):
        print(f"creating a virtualenv with torchx=={TORCHX_VERSION} in {root} ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(root)
        _pip(root, f"torchx=={TORCHX_VERSION}")
        marker.write_text(TORCHX_VERSION)
    for extra in extras:
        flag = root / f".extra-{extra}"
        if not flag.exists():
            _pip(root, extra)
            flag.write_text(extra)
    return exe


def _pip(root: Path, requirement: str) -> None:
    subprocess.run(
        [
            str(root / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ],
        check=True,
    )
