"""A kernel with packages no index serves: a virtualenv (seeing this Python's packages, so
torchx_nb runs in it) holding

- ``tnbprobe`` 1.0 (pure; requires ``tnbdep``; ships a ``.pth`` file that adds a folder holding
  ``tnbhidden``) and ``tnbdep`` 1.0, pip-installed from a private wheel folder no index serves;
- ``tnbedit`` 1.0, an editable install of a source folder (setuptools);
- ``tnbserved`` 1.0, installed from the find-links folder the kernel's pip is configured with;
- ``tnbnative`` 1.0, a "compiled" distribution (platform tag, a ``.so``) from the private folder;
- ``tnbevil``, whose installed METADATA gives a version holding shell and path characters;
- ``tnbpathedit`` 1.0, editable the way hatchling installs it: a ``.pth`` file naming its source
  folder, its RECORD listing no module of its own.

pip's configuration is isolated (these machines set find-links, extra indexes and a
constraints file globally): the kernel's pip sees only ``PIP_FIND_LINKS=served`` and
``PIP_NO_INDEX=1``. Test wheels are built with this Python's pip and setuptools, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class KernelVenv:
    root: Path
    python: Path
    served: Path
    private: Path
    edit_src: Path

    @property
    def env(self) -> dict[str, str]:
        """What the kernel runs with (read now, so a test's DOCKER_HOST and data folder
        reach it): its pip configuration isolated to the served find-links folder."""
        env = pip_isolated(PIP_FIND_LINKS=str(self.served), PIP_NO_INDEX="1")
        env.pop("VIRTUAL_ENV", None)
        return env

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "torchx_nb.cli", *args, timeout=timeout)

    def install_into(self, target: Path, *requirements: str) -> None:
        """pip install ``requirements`` into the folder ``target``, from the kernel's index."""
        proc = self.run("-m", "pip", "install", "-q", "--target", str(target), *requirements)
        assert proc.returncode == 0, proc.stderr


REPO = Path(__file__).resolve().parents[2]


def with_this_tree(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this source tree's torchx_nb first on the path: the venv sees the base
    interpreter's packages, where another checkout may be the one installed."""
    paths = [str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def pip_isolated(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _project(
    root: Path, name: str, version: str, requires: list[str], files: dict[str, str]
) -> Path:
    src = root / f"{name}-{version}-src"
    src.mkdir(parents=True)
    deps = ", ".join(f'"{r}"' for r in requires)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{deps}]\n'
        f'[tool.setuptools]\npy-modules = ["{name}"]\n'
    )
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def build_wheel(src: Path, out: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        env=pip_isolated(),
        capture_output=True,
    )


def _add_pth(wheel: Path, pth: str, extra: dict[str, str]) -> None:
    """Add a ``.pth`` file and the folder it names to a built wheel (RECORD need not list
    them for pip to install them)."""
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(tmp, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, zin.read(item))
        zout.writestr(pth, "tnbprobe_extra\n")
        for rel, text in extra.items():
            zout.writestr(rel, text)
    tmp.replace(wheel)


def _native_wheel(out: Path) -> None:
    """A wheel tagged for this platform with a (fake) extension module: no index serves it."""
    name = "tnbnative-1.0-cp311-cp311-linux_x86_64.whl"
    info = "tnbnative-1.0.dist-info"
    with zipfile.ZipFile(out / name, "w") as zf:
        zf.writestr("tnbnative/__init__.py", "VERSION = '1.0'\n")
        zf.writestr("tnbnative/_speed.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tnbnative\nVersion: 1.0\n")
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
            "Tag: cp311-cp311-linux_x86_64\n",
        )
        zf.writestr(f"{info}/top_level.txt", "tnbnative\n")
        zf.writestr(f"{info}/RECORD", "")


def download_wheels(dest: Path, *requirements: str) -> None:
    """Wheels (no dependencies) into ``dest``, fetched with this machine's own pip settings."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
            str(dest),
            *requirements,
        ],
        check=True,
        capture_output=True,
    )


def make_kernel_venv(root: Path) -> KernelVenv:
    private, served, build = root / "private", root / "served", root / "build"
    for d in (private, served, build):
        d.mkdir(parents=True)
    build_wheel(_project(build, "tnbdep", "1.0", [], {"tnbdep.py": "VERSION = '1.0'\n"}), private)
    build_wheel(
        _project(
            build,
            "tnbprobe",
            "1.0",
            ["tnbdep"],
            {"tnbprobe.py": "import tnbdep\nVERSION = '1.0'\nDEP = tnbdep.VERSION\n"},
        ),
        private,
    )
    _add_pth(
        next(private.glob("tnbprobe-*.whl")),
        "tnbprobe-extra.pth",
        {"tnbprobe_extra/tnbhidden.py": "FOUND = 'via a .pth file'\n"},
    )
    _native_wheel(private)
    for version in ("0.9", "1.0"):
        build_wheel(
            _project(
                build / version,
                "tnbserved",
                version,
                [],
                {"tnbserved.py": f"VERSION = {version!r}\n"},
            ),
            served,
        )
    # the build backend of the editable install, for the kernel's index (uv build needs it)
    download_wheels(served, "setuptools>=61")
    edit_src = _project(root, "tnbedit", "1.0", [], {"tnbedit.py": "VERSION = 'edited-1'\n"})
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    python = venv / "bin" / "python"
    env = pip_isolated(PIP_FIND_LINKS=str(served), PIP_NO_INDEX="1")
    env.pop("VIRTUAL_ENV", None)
    pip = [str(python), "-m", "pip", "install", "-q", "--no-warn-script-location"]
    subprocess.run(
        [*pip, "--find-links", str(private), "tnbprobe", "tnbnative"],
        check=True,
        env=env,
        capture_output=True,
    )
    subprocess.run([*pip, "tnbserved==1.0"], check=True, env=env, capture_output=True)
    subprocess.run(
        [*pip, "--no-build-isolation", "-e", str(edit_src)],
        check=True,
        env=env,
        capture_output=True,
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    # the torchx_nb under test, ahead of any other the base interpreter has installed (a
    # venv made from a worktree's venv sees the base's site-packages, not the worktree's)
    import torchx_nb

    (site / "_torchx_nb_under_test.pth").write_text(f"{Path(torchx_nb.__file__).parent.parent}\n")
    (site / "tnbevil.py").write_text("X = 1\n")
    evil = site / "tnbevil-1.0.dist-info"
    evil.mkdir()
    (evil / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tnbevil\nVersion: 1.0;touch PWNED;../../etc\n"
    )
    (evil / "top_level.txt").write_text("tnbevil\n")
    (evil / "RECORD").write_text("tnbevil.py,,\n")
    path_src = _project(root, "tnbpathedit", "1.0", [], {"src/tnbpathedit.py": "V = 'path'\n"})
    (site / "_tnbpathedit.pth").write_text(f"{path_src / 'src'}\n")
    info = site / "tnbpathedit-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tnbpathedit\nVersion: 1.0\n")
    (info / "RECORD").write_text("_tnbpathedit.pth,,\ntnbpathedit-1.0.dist-info/METADATA,,\n")
    url = {"url": path_src.as_uri(), "dir_info": {"editable": True}}
    (info / "direct_url.json").write_text(json.dumps(url))
    return KernelVenv(root, python, served, private, edit_src)
