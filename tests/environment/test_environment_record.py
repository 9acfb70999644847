"""The job shows what it ran: the cell runner records the distributions its Python imported
(and those the plan named) into the outputs as environment.json, warns in one line for each
that differs from the plan, and ``torchx-nb env HANDLE`` / ``job.environment()`` show them
beside the kernel's versions. Against a real dockerd: a Dockerfile.torchx installs tnbserved
0.9 where the plan (made against the base image) ships the kernel's 1.0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.environment.cells import pin_in_dockerfile
from tests.environment.test_environment_jobs import _submit, _workspace
from tests.infra.dockerd import DockerDaemon
from tests.infra.kernel_venv import KernelVenv
from torchx_nb.components.cell import runner_files


def test_the_cell_runner_records_what_it_imported_and_warns_where_the_plan_differs(
    tmp_path: Path,
) -> None:
    import packaging

    from torchx_nb.environment.record import PLAN_FILE, read_record

    job = tmp_path / "job"
    for name, data in runner_files().items():
        (job / name).parent.mkdir(parents=True, exist_ok=True)
        (job / name).write_bytes(data)
    plan = {
        "distributions": [
            {"name": "packaging", "version": "0.0.1", "from": "layer"},
            {"name": "tnb-nowhere", "version": "2.0", "from": "layer"},
        ]
    }
    (job / PLAN_FILE).write_text(json.dumps(plan))
    (job / "cell.py").write_text("import packaging.version\nprint('ran')\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, ".torchx-nb/cell_main.py", "cell.py"],
        cwd=job,
        capture_output=True,
        text=True,
        env={"TORCHX_OUTPUT_DIR": str(out), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"torchx_nb: warning: packaging {packaging.__version__} from the image in this job;"
        " the plan had 0.0.1 from the layer",
        f"torchx_nb: warning: tnb-nowhere is not in this job's Python ({sys.executable}); the"
        " plan had 2.0 from the layer",
    ]
    with open(out / ".torchx-nb" / "environment.json", "rb") as f:
        env = read_record(f, "local_cwd://t/x")
    (row,) = [d for d in env.distributions if d.name == "packaging"]
    assert (row.version, row.origin, row.planned, row.kernel) == (
        packaging.__version__,
        "image",
        "0.0.1",
        packaging.__version__,
    )
    shown = next(line for line in env.lines() if line.startswith("  packaging "))
    assert shown.split() == [
        "packaging",
        packaging.__version__,
        "image",
        *["the", "plan", "had", "0.0.1"],
    ]


def test_torchx_nb_env_shows_what_the_job_ran_and_how_it_differs_from_the_kernel(
    kernel_venv: KernelVenv, docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    pin_in_dockerfile(kernel_venv, ws, "tnbserved==0.9")
    cell = "import tnbprobe, tnbserved\nprint('served', tnbserved.VERSION)\n"
    handle = _submit(kernel_venv, ws, base_images["python"], "builder=docker", cell=cell)
    log = kernel_venv.cli("log", handle).stdout
    assert (
        "torchx_nb: warning: tnbserved 0.9 from the image in this job; the plan had 1.0 from"
        " the layer"
    ) in log, log
    proc = kernel_venv.cli("env", handle)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{handle} ran /usr/bin/python (Python 3.11.2): 3 distributions, 1 differs from this"
        " kernel",
        "  tnbdep     1.0  layer",
        "  tnbprobe   1.0  layer",
        "  tnbserved  0.9  image      this kernel has 1.0; the plan had 1.0",
    ]
    script = (
        "import sys\nfrom torchx_nb.notebook.handle import JobHandle\n"
        "from torchx_nb.runner import get_runner\n"
        "job = JobHandle(sys.argv[1], get_runner())\nprint(repr(job.environment()))\n"
        "print([d.name for d in job.environment().differences()])\n"
    )
    shown = kernel_venv.run("-c", script, handle)
    assert shown.stdout.splitlines() == [*proc.stdout.splitlines(), "['tnbserved']"], shown


def test_a_cell_that_changes_directory_still_records_the_workspace_s_distributions(
    tmp_path: Path,
) -> None:
    """Where a distribution came from was judged against the directory the job was in at
    its end: a cell that ran ``os.chdir`` recorded the workspace's distributions as the
    image's."""
    from torchx_nb.environment.record import read_record

    job = tmp_path / "job"
    for name, data in runner_files().items():
        (job / name).parent.mkdir(parents=True, exist_ok=True)
        (job / name).write_bytes(data)
    (job / "tnbws.py").write_text("V = 1\n")
    (job / "tnbws-1.0.dist-info").mkdir()
    (job / "tnbws-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tnbws\nVersion: 1.0\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (job / "cell.py").write_text(f"import os, tnbws\nos.chdir({str(elsewhere)!r})\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, ".torchx-nb/cell_main.py", "cell.py"],
        cwd=job,
        capture_output=True,
        text=True,
        env={"TORCHX_OUTPUT_DIR": str(out), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    with open(out / ".torchx-nb" / "environment.json", "rb") as f:
        env = read_record(f, "local_cwd://t/x")
    (row,) = [d for d in env.distributions if d.name == "tnbws"]
    assert (row.version, row.origin) == ("1.0", "workspace")
