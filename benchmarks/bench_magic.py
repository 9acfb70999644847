"""Notebook benchmarks, in a warm in-process IPython shell (the kernel's interpreter):

1. ``%%torchx run -s local_cwd`` of ``print(1)`` until SUCCEEDED, beside the same job submitted
   straight through the Runner: the magic's own overhead is the difference.
2. A job printing 100,000 log lines watched by a StatusWidget and a LogWidget: the kernel's CPU
   time, widget updates per second and the process's peak memory.

Run: python benchmarks/bench_magic.py [--runs N]"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from targets import Targets

TARGET_OVERHEAD_MS = 20.0
TARGET_UPDATES_PER_S = 10.0


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def bench_overhead(runs: int) -> dict[str, list[float]]:
    """Submit-to-SUCCEEDED through the magic and through the Runner, alternating."""
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    from torchx_nb.components.cell import cell
    from torchx_nb.specs.api import AppState

    ip = start_ipython()
    ip.run_line_magic("load_ext", "torchx_nb")
    magics = ip.magics_manager.registry["TorchxMagics"]
    runner = magics.runner
    results: dict[str, list[float]] = {
        "magic_total": [],
        "runner_total": [],
        "magic_submit": [],
        "runner_submit": [],
    }
    for i in range(runs + 1):
        t0 = time.perf_counter()
        with capture_output():
            ip.run_cell_magic("torchx", "run -s local_cwd -o job", "print(1)\n")
        t1 = time.perf_counter()
        status = runner.wait(ip.user_ns["job"].handle, wait_interval=0.05)
        t2 = time.perf_counter()
        assert status is not None and status.state == AppState.SUCCEEDED

        t3 = time.perf_counter()
        handle = runner.run(cell(source="print(1)\n"), "local_cwd", workspace=os.getcwd())
        t4 = time.perf_counter()
        status = runner.wait(handle, wait_interval=0.05)
        t5 = time.perf_counter()
        assert status is not None and status.state == AppState.SUCCEEDED
        if i == 0:
            continue
        results["magic_submit"].append((t1 - t0) * 1000)
        results["magic_total"].append((t2 - t0) * 1000)
        results["runner_submit"].append((t4 - t3) * 1000)
        results["runner_total"].append((t5 - t3) * 1000)
    return results


def bench_log_flood(lines: int) -> dict[str, float]:
    """Watch a job printing ``lines`` lines with both widgets; measure this process."""
    from torchx_nb.notebook.widgets import LogWidget, StatusWidget
    from torchx_nb.refresher import get_refresher
    from torchx_nb.runner import get_runner
    from torchx_nb.specs.api import AppState

    runner = get_runner()
    src = (
        "import sys\n"
        f"for i in range({lines}):\n"
        "    sys.stdout.write(f'line {i} ' + 'x' * 60 + '\\n')\n"
    )
    from torchx_nb.components.cell import cell

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    handle = runner.run(cell(source=src), "local_cwd", workspace=os.getcwd())
    status_w = StatusWidget(handle, runner, get_refresher())
    log_w = LogWidget(handle, runner, max_lines=1000)
    final = runner.wait(handle, wait_interval=0.1)
    assert final is not None and final.state == AppState.SUCCEEDED
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        spooled = Path(log_w.spool_path).read_text().count("\n") if log_w.spool_path else 0
        if spooled >= lines:
            break
        time.sleep(0.1)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    log_w.close()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "lines": float(lines),
        "seconds": elapsed,
        "kernel_cpu_s": cpu,
        # n renders at least 0.1 s apart span (n - 1) intervals: the first render is free
        "log_updates_per_s": max(log_w.update_count - 1, 0) / elapsed,
        "status_updates_per_s": max(status_w.update_count - 1, 0) / elapsed,
        "lines_kept": float(len(log_w.lines)),
        "peak_rss_growth_mb": (rss1 - rss0) / 1024,
        "threads": float(threading.active_count()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TORCHX_NB_DATA_DIR", os.path.join(tmp, "data"))
        os.environ["TORCHX_NB_WIDGETS"] = "text"
        os.environ["TORCHXCONFIG"] = ""
        os.chdir(tmp)
        r = bench_overhead(args.runs)
        overhead = _median(r["magic_total"]) - _median(r["runner_total"])
        submit_overhead = _median(r["magic_submit"]) - _median(r["runner_submit"])
        print(f"\n%%torchx run -s local_cwd print(1) → SUCCEEDED, {args.runs} runs (median ms)")
        print(f"{'path':<34}{'submit':>10}{'to SUCCEEDED':>15}{'ratio':>8}")
        mt, rt = _median(r["magic_total"]), _median(r["runner_total"])
        print(
            f"{'magic (%%torchx run)':<34}{_median(r['magic_submit']):>10.1f}{mt:>15.1f}"
            f"{mt / rt:>8.2f}"
        )
        print(
            f"{'Runner.run (peer, same job)':<34}{_median(r['runner_submit']):>10.1f}"
            f"{rt:>15.1f}{1.0:>8.2f}"
        )
        targets = Targets()
        targets.check(
            f"magic overhead at submit < {TARGET_OVERHEAD_MS:.0f} ms",
            submit_overhead < TARGET_OVERHEAD_MS,
            f"{submit_overhead:.1f} ms ({overhead:.1f} ms end to end)",
        )

        os.environ["TORCHX_NB_WIDGETS"] = "widgets"
        f = bench_log_flood(args.lines)
        print(f"\nlog flood: {int(f['lines']):,} lines watched by a StatusWidget and a LogWidget")
        for key in (
            "seconds",
            "kernel_cpu_s",
            "log_updates_per_s",
            "status_updates_per_s",
            "lines_kept",
            "peak_rss_growth_mb",
            "threads",
        ):
            print(f"  {key:<22}{f[key]:>12.2f}")
        ok_rate = max(f["log_updates_per_s"], f["status_updates_per_s"]) <= TARGET_UPDATES_PER_S
        targets.check(
            f"≤ {TARGET_UPDATES_PER_S:.0f} updates/s per widget, bounded memory",
            ok_rate,
            f"lines kept = {int(f['lines_kept'])}, RSS growth {f['peak_rss_growth_mb']:.1f} MB",
        )
        os.chdir(home)
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
