"""Re-running an edited cell in a 200 MB workspace: bytes uploaded and wall time to patch the
image and push it, side by side in one run:

  registry   our daemonless builder (base manifest + cached workspace layer + new cell layer)
  docker     our docker builder (cached workspace image + new cell layer), then docker push
  torchx     TorchX's method: docker build of `FROM base` + `COPY . .` over the whole
             workspace (the cell is a file in it), then docker push

A private dockerd and a registry on 127.0.0.1 are started for the run (tests/infra). Bytes
uploaded = growth of the registry's storage, the same yardstick for all three.

Run: python benchmarks/bench_workspace.py [--mb 200] [--runs 3]"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from targets import Targets  # noqa: E402

from tests.infra.dockerd import (  # noqa: E402
    build_base_images,
    docker_available,
    start_dockerd,
    start_registry,
)
from torchx_nb.workspace.builders import BuildInput, DockerBuilder, RegistryBuilder  # noqa: E402
from torchx_nb.workspace.collect import collect_workspace  # noqa: E402

CELL_TEMPLATE = "\n".join(
    ["import os, json, math", "", "def train(step):", "    return math.sqrt(step)", ""]
    + [f"metric_{i} = train({i})  # line {i} of a typical notebook cell" for i in range(35)]
    + ["print('edit number', {n})", ""]
)


def storage_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def make_workspace(root: Path, mb: int) -> None:
    root.mkdir(parents=True)
    per_file = 10 * 1024 * 1024
    for i in range(max(1, mb // 10)):
        (root / f"data_{i:02d}.bin").write_bytes(os.urandom(per_file))
    (root / "train.py").write_text("print('helper module')\n")


def torchx_method(client: Any, base: str, ws: Path, cell: str, repo: str, tag: str) -> None:
    """docker build of FROM base + COPY . . over the workspace (with the cell file), then push,
    as TorchX's DockerWorkspaceMixin does (an uncompressed tar context, the classic builder)."""
    (ws / "cell.py").write_text(cell)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(ws.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(ws)), recursive=False)
        df = f"ARG IMAGE\nFROM {base}\nCOPY . .\n".encode()
        info = tarfile.TarInfo("Dockerfile.torchx")
        info.size = len(df)
        tar.addfile(info, io.BytesIO(df))
    buf.seek(0)
    image_id = None
    for event in client.api.build(
        fileobj=buf,
        custom_context=True,
        dockerfile="Dockerfile.torchx",
        rm=True,
        decode=True,
        pull=False,
    ):
        if "error" in event:
            raise RuntimeError(event["error"])
        image_id = (event.get("aux") or {}).get("ID", image_id)
    client.images.get(image_id).tag(repo, tag)
    for event in client.images.push(repo, tag, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(event["error"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    reason = docker_available()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        daemon = start_dockerd(tmp / "dockerd")
        registry = start_registry(tmp / "registry")
        os.environ["DOCKER_HOST"] = daemon.base_url
        try:
            client = daemon.client()
            base_local = build_base_images(client)["python"]
            base_ref = f"{registry.host}/base/python"
            client.images.get(base_local).tag(base_ref, "3.11")
            for _ in client.images.push(base_ref, "3.11", stream=True, decode=True):
                pass
            base_remote = f"{base_ref}:3.11"
            ws = tmp / "ws"
            make_workspace(ws, args.mb)
            reg_root = registry.root / "data"
            results: dict[str, dict[str, list[float]]] = {
                m: {"seconds": [], "bytes": []} for m in ("registry", "docker", "torchx")
            }
            changed: list[int] = []
            n = 0
            for run in range(args.runs + 1):
                for method in ("registry", "docker", "torchx"):
                    n += 1
                    cell = CELL_TEMPLATE.replace("{n}", str(n))
                    extra = {".torchx/cell.py": cell.encode()}
                    before = storage_bytes(reg_root)
                    t0 = time.perf_counter()
                    if method == "registry":
                        files = collect_workspace(ws)
                        RegistryBuilder().build(
                            BuildInput(
                                base_remote, files, extra, f"{registry.host}/bench/registry", True
                            )
                        )
                    elif method == "docker":
                        files = collect_workspace(ws)
                        DockerBuilder(client).build(
                            BuildInput(
                                base_local, files, extra, f"{registry.host}/bench/docker", True
                            )
                        )
                    else:
                        torchx_method(
                            client, base_local, ws, cell, f"{registry.host}/bench/torchx", f"t{n}"
                        )
                        (ws / "cell.py").unlink()
                    elapsed = time.perf_counter() - t0
                    grown = storage_bytes(reg_root) - before
                    if run > 0:
                        results[method]["seconds"].append(elapsed)
                        results[method]["bytes"].append(float(grown))
                        changed.append(len(cell.encode()))
        finally:
            registry.stop()
            daemon.stop()

    def med(m: str, k: str) -> float:
        return statistics.median(results[m][k])

    cell_bytes = statistics.median(changed)
    print(
        f"\nre-run after a one-line cell edit, {args.mb} MB workspace, {args.runs} runs "
        f"(median; the cell is {cell_bytes:.0f} bytes)"
    )
    print(f"{'method':<12}{'seconds':>10}{'uploaded':>14}{'time vs torchx':>16}")
    for m in ("registry", "docker", "torchx"):
        print(
            f"{m:<12}{med(m, 'seconds'):>10.2f}{med(m, 'bytes'):>14,.0f}"
            f"{med(m, 'seconds') / med('torchx', 'seconds'):>16.3f}"
        )
    budget = 2 * cell_bytes + 8192
    ok_bytes = med("registry", "bytes") <= budget
    speed = med("torchx", "seconds") / med("registry", "seconds")
    print()
    targets = Targets()
    targets.check(
        f"uploaded ≤ 2x changed bytes + manifest + config (≈{budget:,.0f} B)",
        ok_bytes,
        f"registry {med('registry', 'bytes'):,.0f} B",
    )
    targets.check(
        "≥ 10x faster than TorchX's method",
        speed >= 10,
        f"registry {speed:.0f}x, docker {med('torchx', 'seconds') / med('docker', 'seconds'):.0f}x",
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
