"""A whole notebook as a job on local_cwd against running the same notebook with nbclient in
place, side by side in one run (wall time, each from a fresh process, to the executed notebook
on disk):

  ours   torchx-nb run-notebook NB.ipynb -p n=21 --wait: the request, the job store, the
         supervisor, the cell runner's nbclient with its parameters injected, the executed
         notebook saved as it runs
  peer   python -c: nbformat.read, NotebookClient(...).execute(), nbformat.write

Run: python benchmarks/bench_notebook.py [--runs 5]"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from targets import Targets  # noqa: E402

PEER = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
nbformat.write(nb, sys.argv[3])
"""


def make_notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import helper\ntotal = helper.total(n)\nprint(total)"),
        nbformat.v4.new_code_cell("{'n': n, 'total': total}"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)
    (path.parent / "helper.py").write_text("def total(n):\n    return sum(range(n + 1))\n")


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ours: list[float] = []
    peer: list[float] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        work = tmp / "nb"
        work.mkdir()
        make_notebook(work / "report.ipynb")
        env = {**os.environ, "TORCHX_NB_DATA_DIR": str(tmp / "data"), "TORCHXCONFIG": ""}
        for run in range(args.runs + 1):  # the first of each warms the disk cache
            t_ours = timed(
                [
                    sys.executable,
                    "-m",
                    "torchx_nb.cli",
                    "run-notebook",
                    "report.ipynb",
                    "-p",
                    "n=21",
                    "--wait",
                ],
                work,
                env,
            )
            t_peer = timed(
                [sys.executable, "-c", PEER, "report.ipynb", str(work), str(tmp / "peer.ipynb")],
                work,
                env,
            )
            if run:
                ours.append(t_ours)
                peer.append(t_peer)
    print(f"\na 3-cell notebook with a parameter, local_cwd, {args.runs} runs (seconds)")
    print(f"{'':<8}{'min':>8}{'median':>8}{'max':>8}")
    for name, xs in (("ours", ours), ("peer", peer)):
        print(f"{name:<8}{min(xs):>8.2f}{statistics.median(xs):>8.2f}{max(xs):>8.2f}")
    overhead = statistics.median(ours) - statistics.median(peer)
    print(f"\noverhead (median ours - median peer): {overhead:.2f} s")
    targets = Targets()
    targets.check(
        "a notebook job's overhead against nbclient in place ≤ 1 s",
        overhead <= 1.0,
        f"{overhead:.2f} s ({statistics.median(ours):.2f} s vs {statistics.median(peer):.2f} s)",
    )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
