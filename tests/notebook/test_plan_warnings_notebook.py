"""The plan's warnings as a notebook shows them: a cell submitted from a real kernel (the
kernel virtualenv's Python, its pip configuration isolated) to local_docker, importing a module
neither the kernel nor the image has, prints one plain ``warning: …`` line on stderr, without
Python's ``file.py:123: UserWarning:`` prefix and source line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import DockerDaemon
from tests.infra.kernel_venv import KernelVenv
from tests.infra.kernels import execute_in_kernel

KERNEL = "torchx-nb-warn-test"


def test_plan_warnings_are_plain_lines_in_the_notebook(
    kernel_venv: KernelVenv,
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(key)
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    env = {k: v for k, v in kernel_venv.env.items() if k.startswith("PIP_")}
    argv = [str(kernel_venv.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "kv", "language": "python", "env": env})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    image = base_images["python"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext torchx_nb\n"
            '%config TorchxMagics.scheduler = "local_docker"\n'
            f"%config TorchxMagics.image = {image!r}\n"
            '%config TorchxMagics.cfg = {"local_docker": {"network": "host", "quiet": True}}\n'
        ),
        nbformat.v4.new_code_cell("%%torchx run\nimport tnbserved, nosuchmodule_tnb\n"),
    ]
    work = tmp_path / "nb"
    work.mkdir()
    execute_in_kernel(nb, work, kernel_name=KERNEL, timeout=300)
    stderr = "".join(
        o["text"]
        for o in nb.cells[1].outputs
        if o["output_type"] == "stream" and o["name"] == "stderr"
    )
    lines = [x for x in stderr.splitlines() if "nosuchmodule_tnb" in x]
    assert lines == [
        "warning: module 'nosuchmodule_tnb' (cell line 1) is neither in this kernel nor in"
        f" {image}: the job will fail to import it"
    ], stderr
    assert "UserWarning" not in stderr, stderr
