"""An editable project the index also serves at the same version: the kernel imports its
source folder, so the job must run that folder's code, not the index's wheel of that
version. Both editable forms: ``setup.py develop`` (an ``.egg-info`` in the source folder and
an ``.egg-link``, no ``direct_url.json``: it was taken for an index install before) and
pip's PEP 660 ``pip install -e``; and ``setup.py develop`` of a src layout (its ``.egg-info`` in
``src/``, the ``.egg-link``'s second line leading back to the project's folder). A real pypiserver index, a kernel virtualenv whose pip uses
it, a job on local_docker built by the registry builder."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.environment.cells import plan_rows
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.fixtures import missing
from tests.infra.kernel_venv import download_wheels, pip_isolated, with_this_tree
from tests.infra.pypi_index import PypiIndex, make_wheel, pypiserver_available, start_index

CELL = (
    "import tnbdev, tnbpep, tnbsrcdev\n"
    "print('dev', tnbdev.BODY, 'pep', tnbpep.BODY, 'src', tnbsrcdev.BODY)\n"
)


class Kernel:
    def __init__(self, root: Path, index: PypiIndex) -> None:
        self.root, self.index = root, index
        self.python = root / "venv" / "bin" / "python"

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = with_this_tree(pip_isolated(PIP_INDEX_URL=self.index.url))
        env.pop("VIRTUAL_ENV", None)
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            cwd=cwd,
            check=False,
        )


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """tnbdev 1.0 (``setup.py develop``) and tnbpep 1.0 (``pip install -e``) in the kernel,
    their folders saying BODY 'kernel-edited'; the index serves both at 1.0 with BODY
    'index', and setuptools (the folders' build backend)."""
    reason = pypiserver_available()
    if reason:
        missing(reason)
    root = tmp_path_factory.mktemp("editable-served")
    for name in ("tnbdev", "tnbpep", "tnbsrcdev"):
        make_wheel(root / "index", name, "1.0", body="index")
    download_wheels(root / "index", "setuptools>=61,<80")
    index = start_index(root / "index")
    # a venv with its own pip and setuptools (ensurepip's, offline): one whose
    # `setup.py develop` still writes an .egg-link, as older setuptools and conda's do
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    k = Kernel(root, index)
    for name in ("tnbdev", "tnbpep"):
        src = root / name
        src.mkdir()
        (src / f"{name}.py").write_text("VERSION = '1.0'\nBODY = 'kernel-edited'\n")
        (src / "setup.py").write_text(
            f"from setuptools import setup\nsetup(name={name!r}, version='1.0',"
            f" py_modules=[{name!r}])\n"
        )
    proc = k.run("setup.py", "-q", "develop", "--no-deps", cwd=root / "tnbdev")
    assert proc.returncode == 0, proc.stderr
    # a src layout: the folder on sys.path (and its .egg-info) is src/, the project's above
    src = root / "tnbsrcdev"
    (src / "src" / "tnbsrcdev").mkdir(parents=True)
    (src / "src" / "tnbsrcdev" / "__init__.py").write_text("BODY = 'kernel-edited'\n")
    (src / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='tnbsrcdev', version='1.0',"
        " package_dir={'': 'src'}, packages=['tnbsrcdev'])\n"
    )
    proc = k.run("setup.py", "-q", "develop", "--no-deps", cwd=src)
    assert proc.returncode == 0, proc.stderr
    assert (src / "src" / "tnbsrcdev.egg-info").is_dir()
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (site / "tnbdev.egg-link").is_file() and (root / "tnbdev" / "tnbdev.egg-info").is_dir()
    (root / "tnbpep" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    proc = k.run("-m", "pip", "install", "-q", "-e", str(root / "tnbpep"))  # from the index
    assert proc.returncode == 0, proc.stderr
    (root / "ws").mkdir()
    yield k
    index.stop()


def test_an_editable_project_the_index_also_serves_runs_the_kernel_s_folder(
    kernel: Kernel, python_in_registry: str, registry: Registry, docker_env: DockerDaemon
) -> None:
    args = [
        "-m",
        "torchx_nb.cli",
        "run",
        "-s",
        "local_docker",
        "--workspace",
        str(kernel.root / "ws"),
        "-cfg",
        f"network=host,builder=registry,image_repo={registry.host}/editable-served",
        "cell",
        "--image",
        python_in_registry,
        "--source",
        CELL,
    ]
    dry = kernel.run(*args[:3], "--dryrun", "--json", *args[3:])
    assert dry.returncode == 0, dry.stderr
    rows = plan_rows(dry.stdout)
    for name in ("tnbdev", "tnbpep", "tnbsrcdev"):
        assert rows[name].endswith("missing; built from the kernel's editable install"), rows
    proc = kernel.run(*args[:3], "--wait", *args[3:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = next(w for w in proc.stdout.split() if w.startswith("local_docker://"))
    log = kernel.run("-m", "torchx_nb.cli", "log", handle).stdout
    assert "dev kernel-edited pep kernel-edited src kernel-edited" in log, log
