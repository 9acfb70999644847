"""The environment layer against real indexes: pypiserver on 127.0.0.1 (a private index behind
basic auth, with a password holding '@', and an open extra index listing older versions),
a kernel virtualenv whose pip uses them, jobs on local_docker built by the registry builder
(no daemon) and the docker builder. The job gets the best version across every index, as pip
does; a failed install names what the index said; no credential shows in any process's
command line or in what torchx_nb writes to disk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.environment.cells import job_log, last_line, run_cell
from tests.infra.cmdlines import CommandLines
from tests.infra.dockerd import DockerDaemon, Registry, free_port
from tests.infra.fixtures import missing
from tests.infra.kernel_venv import _project, download_wheels, pip_isolated, with_this_tree
from tests.infra.pypi_index import PypiIndex, make_wheel, pypiserver_available, start_index

USER, PASSWORD = "alice", "s3cr@t-pw"
QUOTED = "s3cr%40t-pw"


@dataclass
class IndexKernel:
    root: Path
    python: Path
    private: PypiIndex
    open: PypiIndex

    def env(self, index_url: str | None = None) -> dict[str, str]:
        env = pip_isolated(
            PIP_INDEX_URL=index_url or self.private.auth_url,
            PIP_EXTRA_INDEX_URL=self.open.url,
        )
        env.pop("VIRTUAL_ENV", None)
        return with_this_tree(env)

    def run(self, *args: str, index_url: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            env=self.env(index_url),
            timeout=900,
            check=False,
        )

    def cli(self, *args: str, index_url: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "torchx_nb.cli", *args, index_url=index_url)

    def pip(self, *args: str) -> None:
        proc = self.run("-m", "pip", "install", "-q", "--no-warn-script-location", *args)
        assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexKernel]:
    """tnbx 2.0 on the private index, 1.0 on the open one; tnbc 1.0 on the private index
    only for macOS (the kernel has a Linux build from elsewhere); tnbv 1.0 on the private
    index, 3.0 (compiled) in the kernel from elsewhere."""
    reason = pypiserver_available()
    if reason:
        missing(reason)
    root = tmp_path_factory.mktemp("index-kernel")
    make_wheel(root / "private", "tnbx", "2.0", body="private")
    make_wheel(root / "open", "tnbx", "1.0", body="open")
    make_wheel(root / "private", "tnbc", "1.0", "cp311-cp311-macosx_11_0_arm64")
    make_wheel(root / "private", "tnbv", "1.0")
    make_wheel(root / "elsewhere", "tnbc", "1.0", "cp311-cp311-linux_x86_64")
    make_wheel(root / "elsewhere", "tnbv", "3.0", "cp311-cp311-linux_x86_64")
    # the build backend of the editable install, on the private index (uv build fetches it)
    download_wheels(root / "private", "setuptools>=61")
    private = start_index(root / "private", USER, PASSWORD)
    open_ = start_index(root / "open")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    k = IndexKernel(root, venv / "bin" / "python", private, open_)
    k.pip("tnbx==2.0")
    k.pip("--no-index", "--find-links", str(root / "elsewhere"), "tnbc", "tnbv")
    edit = _project(root, "tnbe", "1.0", [], {"tnbe.py": "BODY = 'editable'\n"})
    k.pip("--no-index", "--no-build-isolation", "-e", str(edit))
    yield k
    private.stop()
    open_.stop()


def _cell(
    k: IndexKernel, image: str, repo: str, source: str, builder: str = "registry", **kw: Any
) -> subprocess.CompletedProcess[str]:
    cfg = f"network=host,builder={builder},image_repo={repo}"
    return run_cell(partial(k.cli, **kw), k.root / "ws", image, cfg, source, "--wait")


@pytest.mark.parametrize("builder", ["registry", "docker"])
def test_the_best_version_across_every_index_and_no_credential_in_sight(
    kernel: IndexKernel,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
    builder: str,
) -> None:
    """The open extra index lists tnbx 1.0, the private primary 2.0 (the kernel's): pip takes
    2.0, and so does the job (uv's default would stop at the extra index, which it searches
    first, and fail). uv (its install, and its build of the kernel's editable install, whose
    backend comes from the private index) never holds the password on its command line, and
    no file torchx_nb writes holds it."""
    (kernel.root / "ws").mkdir(exist_ok=True)
    with CommandLines() as lines:
        proc = _cell(
            kernel,
            python_in_registry,
            f"{registry.host}/best-{builder}",
            "import tnbx, tnbe\nprint('tnbx', tnbx.VERSION, tnbx.BODY, tnbe.BODY)\n",
            builder,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = job_log(kernel.cli, proc)
    assert "tnbx 2.0 private editable" in log, log
    uv_lines = [line for line in lines.seen if "/uv " in line or line.startswith("uv ")]
    assert any(" pip install " in line for line in uv_lines), uv_lines
    assert any(" build " in line for line in uv_lines), uv_lines  # the editable install's
    assert not [line for line in lines.seen if PASSWORD in line or QUOTED in line]
    data = Path(os.environ["TORCHX_NB_DATA_DIR"])
    for path in data.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            body = path.read_bytes()
            assert PASSWORD.encode() not in body and QUOTED.encode() not in body, path


@pytest.mark.parametrize(
    ("source", "index", "said"),
    [
        (
            "import tnbx\n",
            "wrong",
            "index http://****@127.0.0.1:{port}/simple refused the credentials (HTTP 403)",
        ),
        ("import tnbx\n", "closed", "index http://127.0.0.1:{closed}/simple is unreachable"),
        (
            "import tnbc\n",
            "",
            "tnbc 1.0 is compiled, and this kernel's copy (cp311-cp311-linux_x86_64) does not"
            " fit image {image} (Python 3.11, x86_64-manylinux_2_36 or older); no index has a"
            " wheel of tnbc 1.0 for Python 3.11 on x86_64-manylinux_2_36 (its wheels are tagged"
            " cp311-cp311-macosx_11_0_arm64): install a wheel built for it",
        ),
        (
            "import tnbv\n",
            "",
            "tnbv 3.0 is compiled, and this kernel's copy (cp311-cp311-linux_x86_64) does not"
            " fit image {image} (Python 3.11, x86_64-manylinux_2_36 or older); no index has"
            " tnbv 3.0 (the versions listed: 1.0): install a wheel built for it",
        ),
    ],
)
def test_a_failed_install_names_what_the_index_said(
    kernel: IndexKernel,
    python_in_registry: str,
    registry: Registry,
    source: str,
    index: str,
    said: str,
) -> None:
    (kernel.root / "ws").mkdir(exist_ok=True)
    closed = free_port()
    url = {
        "wrong": kernel.private.url_with(USER, "wrong@pw"),
        "closed": f"http://127.0.0.1:{closed}/simple",
    }.get(index)
    cfg = f"network=host,builder=registry,image_repo={registry.host}/said"
    cli = partial(kernel.cli, index_url=url)
    proc = run_cell(cli, kernel.root / "ws", python_in_registry, cfg, source)
    assert proc.returncode != 0
    last = last_line(proc)
    assert last.startswith("torchx-nb: error: "), proc.stderr
    assert said.format(port=kernel.private.port, closed=closed, image=python_in_registry) in last, (
        last
    )
    assert "wrong@pw" not in proc.stderr and "\x1b[" not in proc.stderr


def test_the_dry_run_says_an_index_refuses_the_credentials(
    kernel: IndexKernel, python_in_registry: str, registry: Registry
) -> None:
    """A wrong password is known from the index's pages, which a dry run reads: it says so
    in one warning line (credentials masked), rather than a plan the submit cannot build."""
    (kernel.root / "ws").mkdir(exist_ok=True)
    proc = kernel.run(
        "-m",
        "torchx_nb.cli",
        "run",
        "--dryrun",
        "-s",
        "local_docker",
        "--workspace",
        str(kernel.root / "ws"),
        "-cfg",
        f"network=host,builder=registry,image_repo={registry.host}/dry-said",
        "cell",
        "--image",
        python_in_registry,
        "--source",
        "import tnbx\n",
        index_url=kernel.private.url_with(USER, "wrong@pw"),
    )
    assert proc.returncode == 0, proc.stderr
    said = (
        f"warning:   index http://****@127.0.0.1:{kernel.private.port}/simple refused the"
        " credentials (HTTP 403): the layer's install needs it; fix the index settings of the"
        " kernel's pip (pip config list), or pass --packages none"
    )
    assert said in proc.stdout, proc.stdout
    assert "wrong@pw" not in proc.stdout + proc.stderr
