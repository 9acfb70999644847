"""The kernel's packages travel with the cell, against real parts: a kernel virtualenv holding
packages no index serves (a pure one requiring another, with a ``.pth`` file), an editable
install, one from the kernel's find-links folder and a "compiled" one; base images without any
of them and with an older version of one; both builders through a real dockerd and registry;
jobs on local_docker import the kernel's versions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.environment.cells import (
    handle_of,
    image_with_site,
    last_line,
    pin_in_dockerfile,
    run_cell,
    venv_under_test,
)
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.kernel_venv import KernelVenv, download_wheels

CELL = (
    "import tnbprobe, tnbedit, tnbserved\n"
    "def later():\n"
    "    import tnbhidden\n"
    "    return tnbhidden.FOUND\n"
    "print('probe', tnbprobe.VERSION, 'dep', tnbprobe.DEP, 'edit', tnbedit.VERSION,"
    " 'served', tnbserved.VERSION, 'hidden', later())\n"
)
EXPECTED = "probe 1.0 dep 1.0 edit edited-1 served 1.0 hidden via a .pth file"


@pytest.fixture(scope="session")
def older_base(dockerd: DockerDaemon, base_images: dict[str, str], kernel_venv: KernelVenv) -> str:
    """The python base with tnbserved 0.9 in /usr/local/lib/python3.11/dist-packages."""
    target = kernel_venv.root / "older-site"
    kernel_venv.install_into(target, "tnbserved==0.9")
    return image_with_site(
        dockerd.client(), base_images["python"], target, "localhost/torchx-nb-test/python-older:1"
    )


def _workspace(tmp_path: Path, cell: str = CELL) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "helper.py").write_text("import tnbserved\n")
    return ws


def _run(kv: KernelVenv, *args: str) -> subprocess.CompletedProcess[str]:
    return kv.cli("run", *args)


def _dryrun(
    kv: KernelVenv, ws: Path, image: str, cell: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``torchx-nb run --dryrun`` of ``cell`` on local_docker (docker builder)."""
    args = ["--dryrun", *extra, "-s", "local_docker", "--workspace", str(ws)]
    return _run(kv, *args, "-cfg", "builder=docker", "cell", "--image", image, "--source", cell)


def _job_output(kv: KernelVenv, handle: str) -> str:
    proc = kv.cli("log", handle)
    return proc.stdout


def _submit(kv: KernelVenv, ws: Path, image: str, *cfg: str, cell: str = CELL) -> str:
    cfg_line = ",".join(["network=host", *cfg])
    return handle_of(run_cell(kv.cli, ws, image, cfg_line, cell, "--wait"))


def test_the_dry_run_lists_the_plan_before_anything_is_built(
    kernel_venv: KernelVenv, older_base: str, docker_env: Any, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    cell = CELL + "import nosuchmodule_tnb\n"
    docker = docker_env.client()
    images_before = {i.id for i in docker.images.list(all=True)}
    proc = _dryrun(kernel_venv, ws, older_base, cell, "--json")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    line = next(x for x in out.splitlines() if x.startswith("packages:"))
    assert line.startswith("packages:  4 to add (") and "tnbprobe 1.0" in line, line
    assert (
        "warning:   module 'nosuchmodule_tnb' (cell line 6) is neither in this kernel nor in"
        f" {older_base}: the job will fail to import it"
    ) in out
    table = out[out.index(f"environment plan for {older_base}") :]
    assert (
        "(Python 3.11, x86_64-manylinux_2_36, layer hooked in at /usr/lib/python3/dist-packages)"
        in table
    )
    assert "index: no index, find-links " + str(kernel_venv.served) in table
    rows = {r.split()[0]: r for r in table.splitlines() if r.startswith("  ")}
    assert rows["tnbserved"].endswith("image has 0.9"), rows
    assert rows["tnbedit"].endswith("missing; built from the kernel's editable install"), rows
    made = "missing; made from the kernel's installed files (no index serves a wheel of it)"
    assert rows["tnbprobe"].endswith(made) and rows["tnbdep"].endswith(made), rows
    assert "tnbnative" not in rows  # not imported: not planned
    assert {i.id for i in docker.images.list(all=True)} == images_before


@pytest.mark.parametrize("builder", ["docker", "registry"])
def test_a_job_imports_the_kernels_versions_with_either_builder(
    kernel_venv: KernelVenv,
    older_base: str,
    docker_env: DockerDaemon,
    registry: Registry,
    tmp_path: Path,
    builder: str,
) -> None:
    from tests.infra.fixtures import push_to_registry

    image = older_base
    cfg = [f"builder={builder}"]
    if builder == "registry":
        image = push_to_registry(docker_env, older_base, f"{registry.host}/base/older:1")
        cfg.append(f"image_repo={registry.host}/envjobs")
    handle = _submit(kernel_venv, _workspace(tmp_path), image, *cfg)
    assert EXPECTED in _job_output(kernel_venv, handle)


def test_an_unchanged_environment_pushes_no_new_layer(
    kernel_venv: KernelVenv,
    older_base: str,
    docker_env: DockerDaemon,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """Two builds with the registry builder, the cell edited in between: the second uploads
    only the cell layer and the new config (no environment or workspace blob)."""
    from tests.infra.fixtures import push_to_registry

    image = push_to_registry(docker_env, older_base, f"{registry.host}/base/older:1")
    ws = _workspace(tmp_path)
    script = f"""
import json, sys
from torchx_nb.environment.layer import EnvironmentBuild
from torchx_nb.environment.plan import plan_environment
from torchx_nb.specs.program import CellProgram
from torchx_nb.workspace.builders import BuildInput, RegistryBuilder
from torchx_nb.workspace.collect import collect_workspace

out = []
for cell in (sys.argv[1], sys.argv[1] + "print('edited')\\n"):
    b = RegistryBuilder()
    plan = plan_environment(CellProgram(cell), {str(ws)!r}, {image!r},
                            lambda: b.read_image({image!r}), "auto", True)
    built = b.build(BuildInput({image!r}, collect_workspace({str(ws)!r}), {{"c.py": cell.encode()}},
                    {registry.host + "/reuse"!r}, True, False, EnvironmentBuild(plan)))
    out.append([built.uploaded_bytes, [l.size for l in built.layers]])
print(json.dumps(out))
"""
    proc = kernel_venv.run("-c", script, CELL)
    assert proc.returncode == 0, proc.stderr
    (first, first_layers), (second, second_layers) = json.loads(proc.stdout)
    env_size = first_layers[0]
    assert first_layers[0] == second_layers[0] and env_size > 1000
    assert first > env_size
    assert second < 3 * second_layers[-1] + 4096, (first, second, second_layers)


def test_a_layer_packed_ahead_is_the_layer_made_without_and_is_uploaded_as_it_is_written(
    kernel_venv: KernelVenv,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """The same plan built twice from cold layer caches, once with the head start (the
    index's pins installed and packed before the image is known, its bytes sent to the
    build's repository as they are written) and once without: the same environment layer
    digest, the head start taken, and the layer uploaded once as it was written (by the head
    start, or by the build), so the push finds it in the registry."""
    ws = _workspace(tmp_path)
    image = python_in_registry
    script = f"""
import json, os, sys
from torchx_nb.environment import uv_install
from torchx_nb.environment.layer import EnvironmentBuild
from torchx_nb.environment.plan import plan_environment
from torchx_nb.specs.program import CellProgram
from torchx_nb.workspace.builders import BuildInput, RegistryBuilder
from torchx_nb.workspace.collect import collect_workspace

taken = []
take = uv_install.HeadStart.take
def recording_take(self, *args, **kwargs):
    pack = take(self, *args, **kwargs)
    taken.append(pack is not None)
    return pack
uv_install.HeadStart.take = recording_take

out = []
for ahead in (True, False):
    os.environ["TORCHX_NB_DATA_DIR"] = {str(tmp_path)!r} + f"/data-{{ahead}}"
    b = RegistryBuilder()
    plan = plan_environment(CellProgram(sys.argv[1]), {str(ws)!r}, {image!r},
                            lambda: b.read_image({image!r}), "auto", True)
    if plan.head_start is not None:  # started when the image's read was not yet done
        plan.head_start.cancel()
        plan.head_start = None
    repo = {registry.host!r} + f"/ahead-{{ahead}}".lower()
    if ahead:  # as the runner starts it: the build's repository named
        c = plan.contents
        served = [i.pin for i in plan.add if not i.local]
        plan.head_start = uv_install.HeadStart(served, c.python, c.platform, plan.index, repo)
    built = b.build(BuildInput({image!r}, collect_workspace({str(ws)!r}), {{"c.py": b"print(1)"}},
                    repo, True, False, EnvironmentBuild(plan)))
    stats = b.clients[{registry.host!r}].stats
    env = built.layers[0].digest
    out.append([env, stats.uploaded_blobs.count(env), env in stats.skipped_blobs,
                sorted(i.reason.split(";")[0] for i in plan.add)])
print(json.dumps({{"taken": taken, "builds": out}}))
"""
    # one served by the kernel's find-links folder, packed ahead; one editable, made from
    # the kernel's copy and packed after it
    proc = kernel_venv.run("-c", script, "import tnbserved, tnbedit\n")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["taken"] == [True]
    (ahead, ahead_uploads, ahead_found, adds), (plain, plain_uploads, plain_found, _) = result[
        "builds"
    ]
    assert adds == ["missing", "missing"]
    assert ahead == plain
    assert (ahead_uploads, plain_uploads) == (0, 1) and ahead_found and plain_found


def test_a_compiled_package_no_index_serves_fails_in_one_line_before_any_push(
    kernel_venv: KernelVenv,
    older_base: str,
    docker_env: DockerDaemon,
    registry: Registry,
    tmp_path: Path,
) -> None:
    from tests.infra.fixtures import push_to_registry

    image = push_to_registry(docker_env, older_base, f"{registry.host}/base/older:1")
    cfg = f"network=host,builder=registry,image_repo={registry.host}/native"
    proc = run_cell(kernel_venv.cli, _workspace(tmp_path), image, cfg, "import tnbnative\n")
    assert proc.returncode != 0
    assert last_line(proc) == (
        "torchx-nb: error: tnbnative 1.0 is compiled, and this kernel's copy"
        f" (cp311-cp311-linux_x86_64) does not fit image {image} (Python 3.11,"
        " x86_64-manylinux_2_36 or older); no index lists tnbnative: install a wheel built for"
        " it, install it in the base image, or pass --packages none"
    ), proc.stderr
    import requests

    tags = requests.get(f"http://{registry.host}/v2/native/tags/list", timeout=10)
    assert tags.status_code == 404 or not tags.json().get("tags"), tags.text


def test_a_hostile_installed_version_is_refused_in_one_line_and_runs_nothing(
    kernel_venv: KernelVenv, older_base: str, docker_env: DockerDaemon, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    proc = _dryrun(kernel_venv, ws, older_base, "import tnbevil\n")
    assert proc.returncode != 0
    assert (
        proc.stderr.count("\n") == 1
        and "'tnbevil' version '1.0;touch PWNED;../../etc'" in proc.stderr
    )
    assert "not a valid name and version" in proc.stderr
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_an_editable_install_through_a_pth_file_is_found_by_its_source_folder(
    kernel_venv: KernelVenv, older_base: str, docker_env: DockerDaemon, tmp_path: Path
) -> None:
    proc = _dryrun(kernel_venv, _workspace(tmp_path), older_base, "import tnbpathedit\n", "--json")
    assert proc.returncode == 0, proc.stderr
    row = next(r for r in proc.stdout.splitlines() if r.startswith("  tnbpathedit "))
    assert row.endswith("missing; built from the kernel's editable install"), row


def test_torchxconfig_sets_the_default_and_the_option_wins(
    kernel_venv: KernelVenv,
    older_base: str,
    docker_env: DockerDaemon,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = _workspace(tmp_path)
    (tmp_path / ".torchxconfig").write_text("[cli:run]\npackages = none\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHXCONFIG", str(tmp_path / ".torchxconfig"))
    cell = "import tnbprobe\n"
    off = _dryrun(kernel_venv, ws, older_base, cell)
    assert "packages:  none (--packages none): the image's own packages only" in off.stdout, off
    on = _dryrun(kernel_venv, ws, older_base, cell, "--packages", "auto")
    assert "packages:  2 to add" in on.stdout, on.stdout + on.stderr
    bad = _dryrun(kernel_venv, ws, older_base, cell, "--packages", "nope.txt")
    assert bad.returncode != 0 and bad.stderr.strip().endswith(
        "--packages 'nope.txt': no such file; use auto, none, or a requirements.txt,"
        " pyproject.toml or uv.lock"
    ), bad.stderr


def test_packages_none_ships_nothing_and_the_job_names_the_missing_module(
    kernel_venv: KernelVenv, older_base: str, docker_env: DockerDaemon, tmp_path: Path
) -> None:
    proc = _run(
        kernel_venv,
        "-s",
        "local_docker",
        "--workspace",
        str(_workspace(tmp_path)),
        "--packages",
        "none",
        "--wait",
        "-cfg",
        "network=host,builder=docker",
        "cell",
        "--image",
        older_base,
        "--source",
        "import tnbprobe\n",
    )
    assert "No module named 'tnbprobe' in this job (line 1: import tnbprobe)" in (
        proc.stdout + proc.stderr
    )


def test_a_notebook_job_gets_nbclient_and_ipykernel_through_the_environment_layer(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The python base has no nbclient or ipykernel; the notebook job's plan adds them (and
    everything they require, compiled ones included, from the index: a find-links folder
    holding this kernel's pins), and the job runs the notebook with the image's own Python."""
    import os
    import sys

    import nbformat

    from torchx_nb.environment.imports import RUNNER_NEEDS
    from torchx_nb.environment.kernel import kernel_environment
    from torchx_nb.specs.program import NotebookProgram

    needs = {m: "runner" for m in RUNNER_NEEDS[NotebookProgram]}
    pins = [d.pin for d in kernel_environment(needs).dists.values()]
    served = tmp_path / "served"
    download_wheels(served, *pins)
    ws = tmp_path / "nbws"
    ws.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import sys\nprint('ran with', sys.executable, n * 21)"),
    ]
    nbformat.write(nb, ws / "report.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(served))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchx_nb.cli",
            "run-notebook",
            str(ws / "report.ipynb"),
            "-p",
            "n=2",
            "-s",
            "local_docker",
            "--image",
            base_images["python"],
            "--wait",
            "-cfg",
            "network=host,builder=docker,quiet=True",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip().endswith("SUCCEEDED"), proc.stderr
    assert "notebook/0 ran with /usr/bin/python 42" in proc.stdout, proc.stdout


@pytest.mark.parametrize("builder", ["registry", "docker"])
def test_an_aws_batch_job_on_moto_imports_the_kernels_versions(
    kernel_venv: KernelVenv,
    python_in_registry: str,
    base_images: dict[str, str],
    registry: Registry,
    docker_env: DockerDaemon,
    aws_env: Any,
    tmp_path: Path,
    builder: str,
) -> None:
    """Built onto the base in the registry without a daemon, or by the docker builder onto
    the daemon's copy of that base (found in the registry by its repo digest, so nothing is
    pushed by the daemon; the environment layer goes up as we made it), run by moto in
    dockerd."""
    import requests

    from tests.infra.moto import make_queue

    aws_env.use_docker(True)
    queue = make_queue(aws_env, f"envq-{builder}")
    repo = f"batch/env-{builder}"
    proc = kernel_venv.cli(
        "run",
        "-s",
        "aws_batch",
        "--workspace",
        str(_workspace(tmp_path)),
        "--wait",
        "-cfg",
        f"queue={queue},image_repo={registry.host}/{repo},builder={builder},quiet=True",
        "cell",
        "--image",
        python_in_registry if builder == "registry" else base_images["python"],
        "--memMB",
        "256",
        "--source",
        CELL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip().endswith("SUCCEEDED"), proc.stderr
    handle = proc.stdout.split()[0]
    assert EXPECTED in _job_output(kernel_venv, handle)
    tags = requests.get(f"http://{registry.host}/v2/{repo}/tags/list").json().get("tags") or []
    assert tags == []  # pushed by digest; the docker builder found the daemon's base there


def test_a_1_gb_wheel_shows_progress_and_keeps_the_kernels_memory_bounded(
    python_in_registry: str, registry: Registry, tmp_path: Path
) -> None:
    """A kernel with a 1 GB distribution (installed from a local wheel), built onto the base
    with the registry builder: the progress bar moves through installing and packing, and the
    kernel's peak memory stays far below the wheel's size."""
    import os
    import zipfile

    wheel = tmp_path / "tnbhuge-1.0-py3-none-any.whl"
    info = "tnbhuge-1.0.dist-info"
    block = b"\0" * (1 << 20)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("tnbhuge/__init__.py", "")
        with zf.open("tnbhuge/blob.bin", "w", force_zip64=True) as blob:
            for _ in range(1024):
                blob.write(block)
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tnbhuge\nVersion: 1.0\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/top_level.txt", "tnbhuge\n")
        zf.writestr(f"{info}/RECORD", "")
    python = str(venv_under_test(tmp_path / "venv"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel)], check=True, env=env, capture_output=True
    )
    wheel.unlink()  # the kernel's installed files are what travels
    ws = tmp_path / "ws"
    ws.mkdir()
    script = f"""
import json
from torchx_nb.environment.layer import EnvironmentBuild
from torchx_nb.environment.plan import plan_environment
from torchx_nb.specs.program import CellProgram
from torchx_nb.workspace.builders import BuildInput, RegistryBuilder
from torchx_nb.workspace.collect import collect_workspace

seen = []
class Recorder:
    def __call__(self, done, total, what):
        seen.append((what, done, total))
    def close(self):
        pass

b = RegistryBuilder()
plan = plan_environment(CellProgram("import tnbhuge\\n"), {str(ws)!r}, {python_in_registry!r},
                        lambda: b.read_image({python_in_registry!r}), "auto", True)
env = EnvironmentBuild(plan)
env.layer_for(plan.contents, progress=Recorder())
built = b.build(BuildInput({python_in_registry!r}, collect_workspace({str(ws)!r}), {{}},
                {registry.host + "/huge"!r}, True, False, env))
# VmHWM, not ru_maxrss: a vforked child's ru_maxrss starts at its parent's (pytest's) peak
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
print(json.dumps({{"seen": seen, "rss_mb": int(hwm) / 1024,
                  "env_size": built.layers[0].size, "adds": [i.reason for i in plan.add]}}))
"""
    proc = subprocess.run(
        [python, "-c", script], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["adds"] == ["missing; made from the kernel's archive install (its installed files)"]
    packing = [(done, total) for what, done, total in out["seen"] if what == "environment: packing"]
    assert packing[0][0] == 0 and packing[-1][0] == packing[-1][1] >= 1 << 30
    assert len({done for done, _ in packing}) >= 3  # it moves as files are written
    assert out["rss_mb"] < 250, out["rss_mb"]


def test_what_a_dockerfile_torchx_installs_wins_over_the_kernels_version(
    kernel_venv: KernelVenv, docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The workspace's Dockerfile.torchx puts tnbserved 0.9 into the image; the kernel has 1.0:
    the environment layer goes on top of what the Dockerfile built, without tnbserved, and the
    job imports the Dockerfile's 0.9 beside the kernel's other packages."""
    ws = _workspace(tmp_path)
    pin_in_dockerfile(kernel_venv, ws, "tnbserved==0.9")
    cell = "import tnbprobe, tnbserved\nprint('probe', tnbprobe.VERSION, 'served', tnbserved.VERSION)\n"
    handle = _submit(kernel_venv, ws, base_images["python"], "builder=docker", cell=cell)
    assert "probe 1.0 served 0.9" in _job_output(kernel_venv, handle)
