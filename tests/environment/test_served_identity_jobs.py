"""Same name, same version, other contents, on an index: the kernel installed one build of a
distribution, and the index now serves another at that version (a private index that let it
be uploaded again, or a second index with its own build). The job runs the kernel's build,
as the kernel does: a real pypiserver index, a kernel virtualenv whose pip uses it, a job on
local_docker built by the registry builder."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.fixtures import missing
from tests.infra.kernel_venv import pip_isolated, with_this_tree
from tests.infra.pypi_index import PypiIndex, make_wheel, pypiserver_available, start_index


class Kernel:
    def __init__(self, root: Path, index: PypiIndex) -> None:
        self.root, self.index = root, index
        self.python = root / "venv" / "bin" / "python"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = with_this_tree(pip_isolated(PIP_INDEX_URL=self.index.url))
        env.pop("VIRTUAL_ENV", None)
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, env=env, timeout=900
        )


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """tnbr 1.0 in the kernel (its first build, BODY 'first'); the index serves tnbr 1.0
    rebuilt (BODY 'rebuilt'), and tnbq 1.0 as the kernel has it."""
    reason = pypiserver_available()
    if reason:
        missing(reason)
    root = tmp_path_factory.mktemp("served-identity")
    make_wheel(root / "first", "tnbr", "1.0", body="first")
    make_wheel(root / "index", "tnbq", "1.0", body="same")
    index = start_index(root / "index")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    k = Kernel(root, index)
    for args in (["--no-index", "--find-links", str(root / "first"), "tnbr==1.0"], ["tnbq"]):
        proc = k.run("-m", "pip", "install", "-q", *args)
        assert proc.returncode == 0, proc.stderr
    make_wheel(root / "index", "tnbr", "1.0", body="rebuilt")  # uploaded again, same version
    (root / "ws").mkdir()
    yield k
    index.stop()


def test_the_job_runs_the_kernels_build_when_the_index_serves_another_at_that_version(
    kernel: Kernel, python_in_registry: str, registry: Registry, docker_env: DockerDaemon
) -> None:
    proc = kernel.run(
        "-m",
        "torchx_nb.cli",
        "run",
        "-s",
        "local_docker",
        "--workspace",
        str(kernel.root / "ws"),
        "--wait",
        "-cfg",
        f"network=host,builder=registry,image_repo={registry.host}/served-identity",
        "cell",
        "--image",
        python_in_registry,
        "--source",
        "import tnbr, tnbq\nprint('bodies', tnbr.BODY, tnbq.BODY)\n",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = next(w for w in proc.stdout.split() if w.startswith("local_docker://"))
    log = kernel.run("-m", "torchx_nb.cli", "log", handle).stdout
    assert "bodies first same" in log, log
