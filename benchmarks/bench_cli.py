"""End-to-end CLI benchmark, each command as a whole process, alternating A B A B:

  A  torchx-nb run -s local_cwd --wait utils.echo --msg hi  (this checkout, from a virtualenv
                                                          of its own with our core dependencies,
                                                          made as the peer's)
  B  torchx run -s local_cwd utils.echo --msg hi        (TorchX 0.7.0, own virtualenv; it waits
                                                          for local jobs by default; its log
                                                          tail races its exit, so only its
                                                          SUCCEEDED line is checked)
  C  python -c "import torchx_nb"   vs   D  python -c "pass"

Every run gets a fresh working directory and HOME (no .torchxconfig). Our package is
byte-compiled first, as a regular install would be (pip compiles TorchX's at install time).

Run: python benchmarks/bench_cli.py [--runs N] [--json PATH]"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer import ensure_our_venv, ensure_torchx_venv
from targets import Targets

TARGET_RATIO = 0.5
TARGET_IMPORT_MS = 150.0
ROOT = Path(__file__).resolve().parent.parent


def run_once(cmd: list[str], expect: str | None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run, in a fresh cwd and HOME."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        work = Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        env = {**os.environ, "HOME": str(home), "TORCHX_NB_DATA_DIR": str(Path(tmp) / "data")}
        env.pop("TORCHXCONFIG", None)
        out_path = Path(tmp) / "out"
        with open(out_path, "wb") as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                cmd,
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        text = out_path.read_text(errors="replace")
        if proc.returncode != 0 or (expect and expect not in text):
            raise SystemExit(f"benchmark command failed ({proc.returncode}): {cmd}\n{text}")
        return wall, usage.ru_maxrss / 1024


def measure(
    pairs: list[tuple[str, list[str], str | None]], runs: int
) -> dict[str, dict[str, list[float]]]:
    results = {name: {"wall": [], "rss": []} for name, _, _ in pairs}
    for i in range(runs + 1):
        for name, cmd, expect in pairs:
            wall, rss = run_once(cmd, expect)
            if i > 0:
                results[name]["wall"].append(wall * 1000)
                results[name]["rss"].append(rss)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    parser.add_argument("--ours", default=None, help="override command A (for testing)")
    args = parser.parse_args()

    compileall.compile_dir(str(ROOT / "torchx_nb"), quiet=1)
    torchx = ensure_torchx_venv()
    # ours from a virtualenv of its own, as the peer's: equal interpreters (see ensure_our_venv)
    ours = args.ours.split() if args.ours else [str(ensure_our_venv(ROOT))]
    py = sys.executable
    e2e = measure(
        [
            (
                "torchx-nb run --wait",
                [*ours, "run", "-s", "local_cwd", "--wait", "utils.echo", "--msg", "hi"],
                "hi",
            ),
            (
                "torchx 0.7.0 run",
                [str(torchx), "run", "-s", "local_cwd", "utils.echo", "--msg", "hi"],
                "SUCCEEDED",
            ),
        ],
        args.runs,
    )
    imp = measure(
        [
            ("import torchx_nb", [py, "-c", "import torchx_nb"], None),
            ("python (baseline)", [py, "-c", "pass"], None),
        ],
        args.runs,
    )

    def med(r: dict[str, list[float]], k: str) -> float:
        return statistics.median(r[k])

    ours_ms = med(e2e["torchx-nb run --wait"], "wall")
    peer_ms = med(e2e["torchx 0.7.0 run"], "wall")
    ratio = ours_ms / peer_ms
    base_ms = med(imp["python (baseline)"], "wall")
    import_ms = med(imp["import torchx_nb"], "wall")
    print(f"\nwhole-process wall time, {args.runs} runs each after a warm-up (ms)")
    print(f"{'command':<26}{'min':>9}{'median':>9}{'max':>9}{'RSS MB':>9}{'ratio':>8}")
    for group, peer in ((e2e, "torchx 0.7.0 run"), (imp, "python (baseline)")):
        for name, r in group.items():
            print(
                f"{name:<26}{min(r['wall']):>9.1f}{med(r, 'wall'):>9.1f}{max(r['wall']):>9.1f}"
                f"{med(r, 'rss'):>9.1f}{med(r, 'wall') / med(group[peer], 'wall'):>8.2f}"
            )
    print()
    targets = Targets()
    targets.check(
        f"torchx-nb run <= {TARGET_RATIO}x torchx run", ratio <= TARGET_RATIO, f"{ratio:.2f}x"
    )
    targets.check(
        f"import torchx_nb < {TARGET_IMPORT_MS:.0f} ms",
        import_ms < TARGET_IMPORT_MS,
        f"{import_ms:.1f} ms ({import_ms - base_ms:.1f} ms above the bare interpreter)",
    )
    if args.json:
        args.json.write_text(json.dumps({"e2e": e2e, "import": imp}, indent=2))
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
