"""What the environment job tests share: the CLI line that runs a cell on local_docker, the
job's log once it ran, the last line of a refusal, the dry run's plan rows, and an image made
from a base with a folder of installed packages added to its site directory."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

Cli = Callable[..., subprocess.CompletedProcess[str]]  # runs ``python -m torchx_nb.cli ARGS``
SITE = "/usr/local/lib/python3.11/dist-packages/"


def docker_cli(kv: Any) -> Cli:
    """A ``KernelVenv``'s CLI (its venv, its pip settings), speaking to the test's Docker
    daemon."""
    env = dict(kv.env, DOCKER_HOST=os.environ["DOCKER_HOST"])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kv.python), "-m", "torchx_nb.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=False,
        )

    return cli


def venv_under_test(venv: Path) -> Path:
    """A virtualenv at ``venv`` seeing this interpreter's packages and the torchx_nb under
    test (a worktree's editable install is not among the base interpreter's packages); its
    python."""
    import sys

    import torchx_nb

    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "_torchx_nb_under_test.pth").write_text(f"{Path(torchx_nb.__file__).parent.parent}\n")
    return venv / "bin" / "python"


def run_cell(
    cli: Cli, ws: Path, image: str, cfg: str, source: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``torchx-nb run EXTRA -s local_docker --workspace WS -cfg CFG cell --image IMAGE
    --source SOURCE``."""
    return cli(
        "run",
        *extra,
        "-s",
        "local_docker",
        "--workspace",
        str(ws),
        "-cfg",
        cfg,
        "cell",
        "--image",
        image,
        "--source",
        source,
    )


def handle_of(proc: subprocess.CompletedProcess[str]) -> str:
    """The handle a successful submit printed."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next(w for w in proc.stdout.split() if w.startswith("local_docker://"))


def job_log(cli: Cli, proc: subprocess.CompletedProcess[str]) -> str:
    """The log of the job a successful submit started (``torchx-nb log HANDLE``)."""
    return str(cli("log", handle_of(proc)).stdout)


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The last line a refused command wrote (after any progress bar's carriage return)."""
    return proc.stderr.strip().splitlines()[-1].split("\r")[-1]


def plan_rows(stdout: str) -> dict[str, str]:
    """The dry run's plan table: each indented row by its first word, spaces folded."""
    return {r.split()[0]: " ".join(r.split()) for r in stdout.splitlines() if r.startswith("  ")}


def image_with_site(client: Any, base: str, site: Path, tag: str, target: str = SITE) -> str:
    """``tag``: ``base`` with the folder ``site`` added at ``target`` (built offline)."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        docker = f"FROM {base}\nADD site.tar {target}\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(docker)
        tar.addfile(info, io.BytesIO(docker))
        inner = io.BytesIO()
        with tarfile.open(fileobj=inner, mode="w") as sub:
            sub.add(site, arcname=".")
        info = tarfile.TarInfo("site.tar")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, pull=False, rm=True)
    return tag


def pin_in_dockerfile(kv: Any, ws: Path, requirement: str) -> None:
    """A ``Dockerfile.torchx`` in ``ws`` that installs ``requirement`` (from the kernel's
    index, into a folder it copies) into the image's site directory."""
    kv.install_into(ws / "pinned-site", requirement)
    (ws / "Dockerfile.torchx").write_text(
        f"ARG IMAGE\nFROM $IMAGE\nCOPY pinned-site/ {SITE}\nWORKDIR /workspace\nCOPY . .\n"
    )
