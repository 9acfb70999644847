"""``--packages FILE`` with URL and VCS references, and a pyproject.toml that is the project
itself, against real parts on 127.0.0.1: a git repository over smart HTTP with basic auth
(``git http-backend``), a wheel behind pypiserver's basic auth, the job on local_docker. The
references are fetched at submit only (a dry run contacts neither server), installed as pip
would install them (their own dependencies resolved with the rest), known by their commit or
their file's sha256 (a new commit is a new layer), and the credentials never reach argv, a
file torchx_nb writes, or a message."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.environment.cells import docker_cli, job_log, last_line, plan_rows, run_cell
from tests.infra.cmdlines import CommandLines
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.git_server import (
    BUILD,
    GitServer,
    commit_to,
    make_project_repo,
    make_repo,
    start_git_server,
)
from tests.infra.kernel_venv import KernelVenv
from tests.infra.pypi_index import PypiIndex, make_wheel, start_index

USER, PASSWORD = "alice", "g1t@p:ss"
QUOTED = "g1t%40p%3Ass"
CELL = (
    "import tnbgit, tnburl, tnbserved\n"
    "print('git', tnbgit.V, 'url', tnburl.BODY, 'served', tnbserved.VERSION)\n"
)


@dataclass
class Servers:
    git: GitServer
    open_git: GitServer
    wheels: PypiIndex
    open_wheels: PypiIndex
    commits: list[str]
    wheel: Path

    def wheel_url(self, index: PypiIndex, with_credentials: bool = True) -> str:
        base = index.auth_url if with_credentials and index.user else index.url
        return base.replace("/simple", f"/packages/{self.wheel.name}")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    """tnbgit (requires tnbserved; commits V='git-1', tagged v1, then 'git-2') behind git's
    smart HTTP with and without basic auth; tnburl 1.0 behind pypiserver with and without."""
    repos = tmp_path / "repos"
    repos.mkdir()
    commits = make_project_repo(repos, "tnbgit", ["git-1", "git-2"], requires='"tnbserved"')
    wheel = make_wheel(tmp_path / "wheels", "tnburl", "1.0", body="url-1")
    started = Servers(
        start_git_server(repos, USER, PASSWORD),
        start_git_server(repos, "", ""),
        start_index(tmp_path / "wheels", USER, PASSWORD),
        start_index(tmp_path / "wheels"),
        commits,
        wheel,
    )
    yield started
    for stop in (started.git.stop, started.open_git.stop):
        stop()
    started.wheels.stop()
    started.open_wheels.stop()


def _run(
    kv: KernelVenv, ws: Path, packages: Path, cfg: str, image: str, mode: str, cell: str = CELL
) -> subprocess.CompletedProcess[str]:
    extra = (*mode.split(), "--packages", str(packages))
    return run_cell(docker_cli(kv), ws, image, cfg, cell, *extra)


def _log(kv: KernelVenv, proc: subprocess.CompletedProcess[str]) -> str:
    return job_log(kv.cli, proc)


def test_url_and_git_lines_are_fetched_at_submit_with_their_credentials_kept_home(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    servers: Servers,
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    digest = hashlib.sha256(servers.wheel.read_bytes()).hexdigest()
    reqs = ws / "requirements.txt"
    reqs.write_text(
        f"git+{servers.git.url('tnbgit.git')}@v1#egg=tnbgit\n"
        f"tnburl @ {servers.wheel_url(servers.wheels)}#sha256={digest}\n"
    )
    cfg = f"network=host,builder=registry,image_repo={registry.host}/direct"
    dry = _run(kernel_venv, ws, reqs, cfg, python_in_registry, "--dryrun --json")
    assert dry.returncode == 0, dry.stderr
    rows = plan_rows(dry.stdout)
    port = servers.git.port
    assert rows["tnbgit"] == (
        f"tnbgit (at submit) 0 KB missing; from git+http://****@127.0.0.1:{port}/tnbgit.git@v1,"
        " fetched at submit"
    ), rows
    assert rows["tnburl"] == (
        f"tnburl 1.0 0 KB missing; from http://****@127.0.0.1:{servers.wheels.port}/packages/"
        f"{servers.wheel.name}, fetched at submit"
    ), rows
    assert servers.git.asked == []  # the dry run fetched nothing
    with CommandLines() as lines:
        proc = _run(kernel_venv, ws, reqs, cfg, python_in_registry, "--wait")
    assert "git git-1 url url-1 served 1.0" in _log(kernel_venv, proc)
    assert servers.git.refused == []  # git sent the credentials from its first request
    assert any(" clone " in line for line in lines.seen), "git was not run"
    assert not [line for line in lines.seen if PASSWORD in line or QUOTED in line]
    assert PASSWORD not in proc.stdout + proc.stderr and QUOTED not in proc.stdout + proc.stderr
    data = Path(os.environ["TORCHX_NB_DATA_DIR"])
    for path in data.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            body = path.read_bytes()
            assert PASSWORD.encode() not in body and QUOTED.encode() not in body, path

    reqs.write_text(f"git+{servers.git.url('tnbgit.git').replace(QUOTED, 'wrong')}#egg=tnbgit\n")
    proc = _run(kernel_venv, ws, reqs, cfg, python_in_registry, "--wait")
    assert proc.returncode != 0
    assert last_line(proc) == (
        f"torchx-nb: error: --packages {reqs}: tnbgit from git+http://****@127.0.0.1:{port}"
        f"/tnbgit.git: git cannot check it out (fatal: Authentication failed for"
        f" 'http://127.0.0.1:{port}/tnbgit.git/'): fix the URL, the revision or its access"
    )
    assert "local_docker://" not in proc.stdout


def test_a_lock_s_git_and_url_sources_run_at_the_lock_s_commit_and_file(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    servers: Servers,
    tmp_path: Path,
) -> None:
    """A uv.lock's ``git`` source at its commit (a new commit in the lock is a new layer:
    the version is the same) and its ``url`` source with its hash, beside the project
    itself (src layout), with the docker builder."""
    ws = tmp_path / "ws"
    (ws / "src" / "tnbapp").mkdir(parents=True)
    (ws / "src" / "tnbapp" / "__init__.py").write_text("V = 'app-1'\n")
    (ws / "pyproject.toml").write_text(
        BUILD + '[project]\nname = "tnbapp"\nversion = "0.3.0"\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    digest = hashlib.sha256(servers.wheel.read_bytes()).hexdigest()
    url = servers.wheel_url(servers.open_wheels)
    git = servers.open_git.url("tnbgit.git")

    def lock(commit: str) -> None:
        (ws / "uv.lock").write_text(
            'version = 1\nrequires-python = ">=3.8"\n\n[[package]]\nname = "tnbapp"\n'
            'version = "0.3.0"\nsource = { editable = "." }\ndependencies = [\n'
            '    { name = "tnbgit" },\n    { name = "tnburl" },\n]\n\n'
            f'[[package]]\nname = "tnbgit"\nversion = "1.0"\nsource = {{ git = "{git}?rev=main'
            f'#{commit}" }}\ndependencies = [{{ name = "tnbserved" }}]\n\n'
            '[[package]]\nname = "tnbserved"\nversion = "1.0"\n'
            'source = { registry = "https://127.0.0.1/simple" }\n\n'
            f'[[package]]\nname = "tnburl"\nversion = "1.0"\nsource = {{ url = "{url}" }}\n'
            f'wheels = [{{ url = "{url}", hash = "sha256:{digest}" }}]\n'
        )

    cell = "import tnbapp\nprint('app', tnbapp.V)\n" + CELL
    for commit, value in zip(servers.commits, ("git-1", "git-2"), strict=True):
        lock(commit)
        proc = _run(
            kernel_venv,
            ws,
            ws / "uv.lock",
            "network=host,builder=docker",
            base_images["python"],
            "--wait",
            cell,
        )
        log = _log(kernel_venv, proc)
        assert f"app app-1\ncell/0 git {value} url url-1 served 1.0" in log, log


def test_a_pyproject_that_is_the_project_ships_it_as_a_wheel(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """``--packages pyproject.toml`` of the workspace's own project (src layout: the
    workspace alone does not put it on the path): the project ships as a wheel built from
    the workspace, with its dependencies; the dry run says so and builds nothing."""
    ws = tmp_path / "ws"
    (ws / "src" / "tnbapp").mkdir(parents=True)
    (ws / "src" / "tnbapp" / "__init__.py").write_text("V = 'app-src'\n")
    (ws / "pyproject.toml").write_text(
        BUILD + '[project]\nname = "tnbapp"\nversion = "0.3.0"\ndependencies = ["tnbserved"]\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    cfg = f"network=host,builder=registry,image_repo={registry.host}/pyproject-itself"
    cell = "import tnbapp, tnbserved\nprint('app', tnbapp.V, 'served', tnbserved.VERSION)\n"
    args = (ws, ws / "pyproject.toml", cfg, python_in_registry)
    dry = _run(kernel_venv, *args, "--dryrun --json", cell)
    assert dry.returncode == 0, dry.stderr
    rows = plan_rows(dry.stdout)
    assert rows.get("tnbapp") == (
        "tnbapp 0.3.0 0 KB missing; the project, built from its folder"
    ), dry.stdout
    assert not list(ws.rglob("*.egg-info")) and not (ws / "build").exists()
    log = _log(kernel_venv, _run(kernel_venv, *args, "--wait", cell))
    assert "app app-src served 1.0" in log, log


def test_git_requirements_run_with_their_submodules(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """A private repository over git's smart HTTP whose package holds a submodule on the
    same host (``../tnbinner.git``, reached with the line's credentials), and a local one
    (``git+file:///…@main``, refused as "not a wheel" before) with a ``file:`` submodule:
    the job imports the submodules' code (before: empty folders, so other code than the
    kernel's). Moving only the submodule's commit runs the new code."""
    repos = tmp_path / "repos"
    inner = make_repo(repos, "tnbinner")
    commit_to(inner, {"__init__.py": "V = 'inner-1'\n"})
    deep = make_repo(repos, "tnbdeep")
    commit_to(deep, {"__init__.py": "V = 'deep-1'\n"})

    def project(name: str) -> dict[str, str]:
        return {
            "pyproject.toml": BUILD + f'[project]\nname = "{name}"\nversion = "1.0"\n'
            f'[tool.setuptools]\npackages = ["{name}", "{name}.vendored"]\n',
            f"{name}/__init__.py": "",
        }

    top = make_repo(repos, "tnbsub")
    mod = {"tnbsub/vendored": (repos / "tnbinner.git", "../tnbinner.git")}
    commit_to(top, project("tnbsub"), mod)
    local = make_repo(repos, "tnblocal")
    deep_uri = (repos / "tnbdeep.git").as_uri()
    commit_to(local, project("tnblocal"), {"tnblocal/vendored": (repos / "tnbdeep.git", deep_uri)})
    git = start_git_server(repos, USER, PASSWORD)
    try:
        ws = tmp_path / "ws"
        ws.mkdir()
        reqs = ws / "requirements.txt"
        reqs.write_text(
            f"tnbsub @ git+{git.url('tnbsub.git')}@main\n"
            f"git+{(repos / 'tnblocal.git').as_uri()}@main#egg=tnblocal\n"
        )
        cfg = f"network=host,builder=registry,image_repo={registry.host}/submodules"
        cell = (
            "import tnbsub.vendored, tnblocal.vendored\n"
            "print('sub', tnbsub.vendored.V, 'local', tnblocal.vendored.V)\n"
        )
        dry = _run(kernel_venv, ws, reqs, cfg, python_in_registry, "--dryrun --json", cell)
        assert dry.returncode == 0, dry.stderr
        rows = plan_rows(dry.stdout)
        assert rows["tnblocal"] == (
            f"tnblocal (at submit) 0 KB missing; from git+{(repos / 'tnblocal.git').as_uri()}"
            "@main, fetched at submit"
        ), rows
        assert git.asked == []
        proc = _run(kernel_venv, ws, reqs, cfg, python_in_registry, "--wait", cell)
        assert "sub inner-1 local deep-1" in _log(kernel_venv, proc)
        assert git.refused == [] and any("tnbinner.git" in p for p in git.asked)

        commit_to(inner, {"__init__.py": "V = 'inner-2'\n"})
        commit_to(top, {}, mod)  # only the submodule's commit moves
        proc = _run(kernel_venv, ws, reqs, cfg, python_in_registry, "--wait", cell)
        assert "sub inner-2 local deep-1" in _log(kernel_venv, proc)
    finally:
        git.stop()
