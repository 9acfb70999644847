"""A new user's first run, from a fresh copy of the repository: ``bash scripts/demo`` runs the
quickstart in its own virtualenv, kernel and job store and leaves the user's alone; a source
install without Node.js installs everything but the panel and says how to get it, in one line;
plain and editable installs enable the server extension, which reports its version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_copy, isolated_env

pytestmark = pytest.mark.slow

NO_PANEL = "torchx_nb: installed without the JupyterLab panel"


NODE = {"node", "nodejs", "npm", "npx", "corepack"}


def without_node(path: str, shadow: Path) -> str:
    """PATH as it is, but where a folder holds Node.js, a copy of it (of links) without it."""
    dirs = []
    for i, d in enumerate(p for p in path.split(os.pathsep) if p):
        folder = Path(d)
        if not any((folder / name).exists() for name in NODE):
            dirs.append(d)
            continue
        copy = shadow / str(i)
        copy.mkdir(parents=True)
        for entry in folder.iterdir():
            if entry.name not in NODE:
                (copy / entry.name).symlink_to(entry)
        dirs.append(str(copy))
    return os.pathsep.join(dirs)


@pytest.mark.timeout(1200)
def test_the_demo_and_source_installs_as_a_new_user(tmp_path: Path) -> None:
    repo = clean_copy(tmp_path / "repo")
    assert not (repo / "torchx_nb" / "labextension").exists()
    home = tmp_path / "home"
    # the user's own kernel spec and job store, which the demo must not touch
    kernel = home / ".local/share/jupyter/kernels/python3/kernel.json"
    kernel.parent.mkdir(parents=True)
    kernel.write_text('{"argv": ["/users/own/python"], "display_name": "mine"}')
    store = home / ".local/share/jupyter/torchx_nb/jobs.sqlite"
    store.parent.mkdir(parents=True, mode=0o700)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from torchx_nb.jobstore import JobStore, JobRecord;"
            " JobStore(sys.argv[1]).add(JobRecord('local_cwd://torchx/users-own-job',"
            " 'local_cwd', 'torchx', 'users-own-job', 'mine', '', 1.0, 'SUCCEEDED', 1.0))",
            str(store),
        ],
        check=True,
    )
    before = (kernel.read_bytes(), store.read_bytes())
    path = without_node(os.environ["PATH"], tmp_path / "bin")
    env = isolated_env(home, PYTHON=sys.executable, PATH=path)
    assert shutil.which("npm", path=path) is None

    def sh(*cmd: str, cwd: Path = repo, ok: bool = True) -> str:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        if ok:
            assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
        return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)

    out = sh("bash", "scripts/demo")
    assert "Traceback" not in out and "sum of y: 6" in out, out
    listed = re.findall(r"local_cwd://torchx/[a-z0-9-]+", out)
    assert listed and "local_cwd://torchx/users-own-job" not in listed
    assert (kernel.read_bytes(), store.read_bytes()) == before, "the demo changed the user's setup"
    venv = repo / ".demo" / "venv"
    vpy = str(venv / "bin" / "python")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{path}"  # jupyter finds its subcommands on PATH
    kernels = sh(vpy, "-m", "jupyter", "kernelspec", "list")
    assert "torchx-nb-demo" in kernels and str(venv) in kernels, kernels
    again = sh("bash", "scripts/demo")
    assert re.findall(r"local_cwd://torchx/[a-z0-9-]+", again).count(listed[0]) == 0, (
        "a second demo run lists only its own jobs"
    )

    # a plain source install, no Node.js: everything but the panel, and one line saying so
    plain = sh(vpy, "-m", "pip", "install", "-v", "--no-deps", "--force-reinstall", ".")
    said = [line for line in plain.splitlines() if NO_PANEL in line]
    assert len(said) >= 1 and "install Node.js and reinstall" in said[0], plain[-3000:]
    extensions = sh(vpy, "-m", "jupyter", "server", "extension", "list")
    assert re.search(r"torchx_nb\.server 0\.1\.0 OK", extensions), extensions
    assert "torchx-nb" not in sh(vpy, "-m", "jupyter", "labextension", "list")
    log = sh(
        vpy,
        "-c",
        "from torchx_nb.server.app import NO_PANEL, panel_installed;"
        " print(panel_installed(), NO_PANEL)",
    )
    assert log.startswith("False torchx_nb: the JupyterLab panel is not installed")

    # an editable install enables the server extension too
    sh(vpy, "-m", "pip", "install", "-q", "--no-deps", "-e", ".")
    where = sh(vpy, "-c", "import torchx_nb; print(torchx_nb.__file__)", cwd=home)
    assert where.strip() == str(repo / "torchx_nb" / "__init__.py"), where
    extensions = sh(vpy, "-m", "jupyter", "server", "extension", "list")
    assert re.search(r"torchx_nb\.server 0\.1\.0 OK", extensions), extensions


def test_a_source_install_with_node_builds_the_panel(tmp_path: Path) -> None:
    """With npm on PATH, a wheel built from a fresh copy carries the panel, once."""
    import zipfile

    if shutil.which("npm") is None:
        from tests.infra.fixtures import missing

        missing("building the JupyterLab extension needs Node.js with npm")
    repo = clean_copy(tmp_path / "repo")
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
            str(tmp_path / "dist"),
            str(repo),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    (wheel,) = (tmp_path / "dist").glob("torchx_nb-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    lab = "torchx_nb-0.1.0.data/data/share/jupyter/labextensions/torchx-nb/"
    assert lab + "package.json" in names and lab + "install.json" in names
    assert not [n for n in names if n.startswith("torchx_nb/labextension/")], "shipped twice"
    assert "torchx_nb-0.1.0.dist-info/licenses/LICENSE" in names
