"""What a build leaves behind, against real parts (a kernel virtualenv, the registry builder
with no daemon, the docker builder, a registry): a damaged cache file is ignored and made
again, never blocking a plan; no temporary file of a build (the cell's source) outlives it;
a head start is dropped when the plan is refused; the plan's warnings are plain lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.kernel_venv import KernelVenv

BUILD_TWICE = """
import json, sys
from pathlib import Path
from torchx_nb.environment.layer import EnvironmentBuild
from torchx_nb.environment.plan import plan_environment
from torchx_nb.specs.program import CellProgram
from torchx_nb.workspace.builders import BuildInput, DockerBuilder, RegistryBuilder
from torchx_nb.workspace.collect import collect_workspace
from torchx_nb.workspace.layers import cache_dir

cell, ws, image, repo, kind = sys.argv[1:6]
out = []
for round in range(2):
    b = RegistryBuilder() if kind == "registry" else DockerBuilder()
    read = RegistryBuilder().read_image
    plan = plan_environment(CellProgram(cell), ws, image, lambda: read(image), "auto", True)
    job = BuildInput(image, collect_workspace(ws), {"c.py": cell.encode()}, repo, True, False,
                     EnvironmentBuild(plan))
    built = b.build(job)
    files = sorted(p.name for p in cache_dir().iterdir())
    out.append([[l.digest for l in built.layers[:2]], files])
    for meta in cache_dir().glob("*.json"):  # truncated, as a killed write leaves it
        meta.write_text(meta.read_text()[:7])
print(json.dumps(out))
"""


def _script(kv: KernelVenv, *args: str) -> Any:
    proc = kv.run("-c", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_damaged_layer_descriptions_are_made_again_and_no_cell_source_is_left(
    kernel_venv: KernelVenv,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.txt").write_text("workspace file\n")
    cell = "import tnbserved\nprint('SECRET-CELL-SOURCE')\n"
    for kind in ("registry", "docker"):
        (first, files), (second, files_again) = _script(
            kernel_venv,
            BUILD_TWICE,
            cell,
            str(ws),
            python_in_registry,
            f"{registry.host}/hygiene-{kind}",
            kind,
        )
        assert first == second  # the same environment and workspace layers, made again
        for names in (files, files_again):
            assert all(n.startswith(("env-", "ws-")) for n in names), names
            assert len(names) == 4, names  # each layer and its description, nothing else


REFUSED = """
import glob, os, sys, tempfile, time
from torchx_nb.environment import uv_install
from torchx_nb.environment.plan import plan_environment
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.specs.program import CellProgram
from torchx_nb.workspace.builders import RegistryBuilder

cell, ws, image = sys.argv[1:4]
started = []
real = uv_install.HeadStart.__init__
def recording(self, *a, **k):
    real(self, *a, **k)
    started.append(self)
uv_install.HeadStart.__init__ = recording

def slow():
    time.sleep(1)  # the head start begins while the image is read
    return RegistryBuilder().read_image(image)

try:
    plan_environment(CellProgram(cell), ws, image, slow, "auto", True)
except TorchxNbError as e:
    print("refused:", e, file=sys.stderr)
left = glob.glob(os.path.join(tempfile.gettempdir(), "torchx-nb-env-head-*"))
alive = [h for h in started if h._proc is not None and h._proc.poll() is None]
print(len(started), len(left), len(alive))
"""


def test_a_refused_plan_drops_its_head_start(
    kernel_venv: KernelVenv, python_in_registry: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """tnbnative's copy is built for this machine (linux_x86_64): the plan is refused after
    the head start for tnbserved began; nothing of it is left running or on disk."""
    ws = tmp_path / "ws"
    ws.mkdir()
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    proc = kernel_venv.run(
        "-c", REFUSED, "import tnbserved, tnbnative\n", str(ws), python_in_registry
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused: tnbnative 1.0 is compiled" in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["1", "0", "0"], proc.stdout


def test_plan_warnings_are_plain_lines(
    kernel_venv: KernelVenv, python_in_registry: str, docker_env: DockerDaemon, tmp_path: Path
) -> None:
    """Submitted from Python (a notebook's kernel prints warnings the same way), a module
    nobody has is one ``warning: …`` line, with no ``file.py:123: UserWarning:`` prefix."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = f"""
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
app = cell(source="import tnbserved, nosuchmodule_tnb\\n", image={python_in_registry!r})
with get_runner() as r:
    r.dryrun(app, "local_docker", {{"builder": "docker", "quiet": True}}, {str(ws)!r},
             build_workspace=True)
"""
    proc = kernel_venv.run("-c", script)
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "nosuchmodule_tnb" in x]
    assert lines == [
        "warning: module 'nosuchmodule_tnb' (cell line 1) is neither in this kernel nor in"
        f" {python_in_registry}: the job will fail to import it"
    ], proc.stderr
