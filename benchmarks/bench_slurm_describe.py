"""Status of 100 running Slurm jobs on a private cluster (tests/infra/slurm.py): the Slurm
commands run and the wall time of our batched path (``Runner.status_many``: one ``squeue
--json`` for all, as the job list and the notebook poller use it) beside the naive loop of one
``squeue --json -j ID`` per job, measured in the same run.

Both nodes are configured with 64 CPUs so that 100 one-CPU jobs run at once. Run (as root, with
Debian's Slurm installed): python benchmarks/bench_slurm_describe.py [--jobs 100]"""

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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import start_sleepers  # noqa: E402
from targets import Targets  # noqa: E402

from tests.infra.slurm import SlurmCluster  # noqa: E402

SHIM = '#!/bin/sh\necho "$(basename "$0")" >> "{log}"\nexec {real} "$@"\n'


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        os.chdir(tmp)  # the jobs run (and write their logs) in the current folder
        cluster = SlurmCluster(tmp / "slurm", accounting=False, cpus=64).start()
        try:
            os.environ["SLURM_CONF"] = str(cluster.conf)
            runner, handles = start_sleepers("slurm", args.jobs, "", 10, 120, 1)

            shims = tmp / "shims"
            shims.mkdir()
            log = tmp / "calls.log"
            for tool in ("squeue", "sacct"):
                real = subprocess.run(["which", tool], capture_output=True, text=True)
                (shims / tool).write_text(SHIM.format(log=log, real=real.stdout.strip()))
                (shims / tool).chmod(0o755)
            os.environ["PATH"] = f"{shims}:{os.environ['PATH']}"

            ours, naive, ours_calls, naive_calls = [], [], [], []
            ids = [h.rsplit("/", 1)[1] for h in handles]
            for _ in range(args.runs):
                log.write_text("")
                t0 = time.perf_counter()
                found = runner.status_many(handles)
                ours.append(time.perf_counter() - t0)
                ours_calls.append(len(log.read_text().split()))
                assert sum(1 for s in found.values() if s is not None) == args.jobs

                log.write_text("")
                t0 = time.perf_counter()
                for job in ids:
                    subprocess.run(["squeue", "--json", "-j", job], capture_output=True, check=True)
                naive.append(time.perf_counter() - t0)
                naive_calls.append(len(log.read_text().split()))
            for h in handles:
                runner.cancel(h)
        finally:
            cluster.stop()

    o, n = statistics.median(ours), statistics.median(naive)
    print(f"\nstatus of {args.jobs} running Slurm jobs, {args.runs} runs (median)")
    print(f"{'path':<44}{'Slurm commands':>16}{'seconds':>10}{'ratio':>8}")
    print(
        f"{'torchx_nb Runner.status_many (squeue once)':<44}"
        f"{statistics.median(ours_calls):>16.0f}{o:>10.3f}{o / n:>8.3f}"
    )
    print(
        f"{'one squeue --json -j ID per job':<44}"
        f"{statistics.median(naive_calls):>16.0f}{n:>10.3f}{1.0:>8.3f}"
    )
    targets = Targets()
    targets.check(
        f"one squeue for {args.jobs} jobs",
        statistics.median(ours_calls) <= 1,
        f"{statistics.median(ours_calls):.0f} call(s)",
    )
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
