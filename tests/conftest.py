"""Shared fixtures: every test gets its own data dir (job store, local_cwd state), its own cwd,
and no .torchxconfig unless it writes one."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from torchx_nb import specs
from torchx_nb.jobstore import JobRecord

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = ROOT / "tests" / "fixtures" / "plugin"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

pytest_plugins = ["tests.infra.fixtures", "tests.infra.parallel"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The CLI and kernels a test starts run ``sys.executable``: they must import the torchx_nb
    under test. A ``pytest`` script of another Python (a shim on PATH) would run this checkout's
    tests against whatever torchx_nb that Python has installed, so such a run stops here."""
    import subprocess

    if hasattr(session.config, "workerinput"):
        return  # checked once, by the controller
    found = subprocess.run(
        [sys.executable, "-c", "import torchx_nb; print(torchx_nb.__file__)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()
    if Path(found).resolve() != (ROOT / "torchx_nb" / "__init__.py").resolve():
        pytest.exit(
            f"{sys.executable} imports torchx_nb from {found or 'nowhere'}, not this checkout:"
            " run `python -m pytest` with the Python whose torchx_nb is this checkout's"
            " (pip install -e . into it)",
            returncode=4,
        )


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    data = tmp_path / "torchx-nb-data"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(data))
    monkeypatch.delenv("TORCHX_NB_JOBSTORE", raising=False)
    monkeypatch.setenv("TORCHXCONFIG", "")
    monkeypatch.setenv("TORCHX_NB_WIDGETS", os.environ.get("TORCHX_NB_WIDGETS", "1"))
    monkeypatch.chdir(work)
    yield work


@pytest.fixture
def plugin_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make the test plugin (a scheduler registered by entry point) importable and discoverable,
    in this process and in subprocesses."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")])
    )
    import importlib

    importlib.invalidate_caches()
    return PLUGIN_DIR


def wait_for(
    predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.05
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, input: str | None = None
) -> tuple[int, str, str]:
    """Run ``torchx-nb`` in a subprocess (the real console entry point)."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "torchx_nb.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        input=input,
    )
    return proc.returncode, proc.stdout, proc.stderr


def clean_copy(dest: Path) -> Path:
    """The repository's tracked (and untracked, not ignored) files copied to ``dest``: what a
    fresh clone holds, without anything built or installed."""
    import shutil
    import subprocess

    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for name in out.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a new user: own HOME, no Jupyter, torchx_nb or virtualenv settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTER", "TORCHX_NB", "PYTHON", "VIRTUAL_ENV", "PIP_REQ"))
    }
    env.update(HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def shell_app(
    script: str,
    image: str = "",
    *,
    name: str = "sh",
    role: str = "r",
    replicas: int = 1,
    retries: int = 0,
    mem_mb: int = 64,
) -> specs.AppDef:
    """An AppDef of one role running ``sh -c script`` (1 CPU, ``mem_mb`` MB)."""
    return specs.AppDef(
        name,
        roles=[
            specs.Role(
                role,
                image,
                entrypoint="sh",
                args=["-c", script],
                num_replicas=replicas,
                max_retries=retries,
                resource=specs.Resource(1, 0, mem_mb),
            )
        ],
    )


def cli_error(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> str:
    """Run ``torchx-nb`` expecting it to fail with exactly one line on stderr; that line."""
    code, _, stderr = cli(*args, timeout=timeout, env=env)
    assert code != 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def stored(handle: str, scheduler: str, name: str, state: str, age: float) -> JobRecord:
    """A finished job in the store, as another tool would have left it."""
    now = time.time()
    return JobRecord(
        handle=handle,
        scheduler=scheduler,
        session="torchx",
        app_id=handle.rsplit("/", 1)[-1],
        name=name,
        image="",
        submitted=now - age,
        state=state,
        updated=now,
        ended=now,
    )
