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


def ensure_our_venv(root_of_project: Path) -> Path:
    """Path of a ``torchx-nb`` executable in a virtualenv built as TorchX's is (its own
    site-packages only): torchx_nb's core dependencies installed once (again when they
    change), the checkout itself on the path by a plain ``.pth`` line, as an editable install
    puts it. So both CLIs start from an interpreter that loads only their own packages — run
    from the development machine's Python, ours also paid for every ``.pth`` hook of its
    site-packages (30 ms on a machine whose site imports certifi), the peer for none."""
    import hashlib

    import tomllib

    deps = tomllib.loads((root_of_project / "pyproject.toml").read_text())["project"]
    wanted = sorted(deps["dependencies"])
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    root = cache_dir() / f"torchx_nb-{key}"
    marker = root / ".installed"
    if not marker.exists():
        print(f"creating a virtualenv with torchx_nb's dependencies in {root} ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(root)
        for requirement in wanted:
            _pip(root, requirement)
        marker.write_text("\n".join(wanted))
    python = root / "bin" / "python"
    # a venv's site-packages (POSIX layout), of this Python's version as EnvBuilder makes it
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    (site / "torchx_nb_checkout.pth").write_text(f"{root_of_project}\n")
    exe = root / "bin" / "torchx-nb"
    # the console script pip would write: the entry point pyproject.toml names
    module, _, func = deps["scripts"]["torchx-nb"].partition(":")
    exe.write_text(f"#!{python}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    exe.chmod(0o755)
    return exe
