"""A 100-trial sweep on a private Slurm cluster (tests/infra/slurm.py), submitted and polled
to its end, beside the same 100 trials submitted as 100 separate runs (what a loop of
``%%torchx run`` does): the Slurm commands each path runs (counted by shims on PATH) and its
wall time, measured in the same run. The target: one ``sbatch`` for the sweep, and one
describe call per poll round: one squeue, plus for trials that ended one ``sacct --json`` (their
records) and one ``sacct --parsable2`` (exit codes from the text columns, which 22.05's JSON gets
wrong, and every run of a requeued job): at most 3 commands, however many trials ended.

Run (as root, with Debian's Slurm installed): python benchmarks/bench_sweeps.py [--trials 100]"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import Targets  # noqa: E402

from tests.infra.slurm import SlurmCluster  # noqa: E402

SHIM = '#!/bin/sh\necho "$(basename "$0")" >> "{log}"\nexec {real} "$@"\n'
CELL = "import os\nint(os.environ['TORCHX_PARAM_N']) * 2\n"


def calls(log: Path) -> collections.Counter[str]:
    return collections.Counter(log.read_text().split())


def poll_to_end(runner: object, handles: list[str], log: Path) -> tuple[int, list[int]]:
    """Poll (as the widget's poller does, one refresh per round) until every trial ended:
    the rounds and the describe calls each took."""
    from torchx_nb.specs.api import is_terminal

    per_round = []
    rounds = 0
    while True:
        log.write_text("")
        found = runner.refresh(handles)  # type: ignore[attr-defined]
        rounds += 1
        counted = calls(log)
        per_round.append(counted["squeue"] + counted["sacct"])
        if all(
            s is not None and not isinstance(s, BaseException) and is_terminal(s.state)
            for s in found.values()
        ):
            return rounds, per_round
        time.sleep(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=100)
    args = parser.parse_args()
    n = args.trials
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        ws = tmp / "ws"
        ws.mkdir()
        os.chdir(ws)
        cluster = SlurmCluster(tmp / "slurm", accounting=True, cpus=64).start()
        try:
            os.environ["SLURM_CONF"] = str(cluster.conf)
            shims = tmp / "shims"
            shims.mkdir()
            log = tmp / "calls.log"
            log.write_text("")
            for tool in ("sbatch", "squeue", "sacct"):
                real = subprocess.run(["which", tool], capture_output=True, text=True)
                (shims / tool).write_text(SHIM.format(log=log, real=real.stdout.strip()))
                (shims / tool).chmod(0o755)
            os.environ["PATH"] = f"{shims}:{os.environ['PATH']}"

            from torchx_nb.runner import RunRequest, get_runner
            from torchx_nb.sweeps import SweepRequest, start

            runner = get_runner()
            values = ",".join(str(i) for i in range(n))
            log.write_text("")
            t0 = time.perf_counter()
            sw = start(
                runner,
                SweepRequest(
                    RunRequest(cell=CELL, scheduler="slurm", workspace=str(ws)), [f"n={values}"]
                ),
            )
            sweep_submit = time.perf_counter() - t0
            sweep_calls = calls(log)
            assert sw.array
            sweep_rounds, sweep_polls = poll_to_end(runner, [h for h in sw.handles if h], log)
            sweep_total = time.perf_counter() - t0
            results = sw.results()
            assert list(results["result"]) == [2 * i for i in range(n)], results

            log.write_text("")
            t0 = time.perf_counter()
            handles = [
                runner.submit(
                    runner.prepare(
                        RunRequest(
                            cell=CELL,
                            scheduler="slurm",
                            workspace=str(ws),
                            env={"TORCHX_PARAM_N": str(i)},
                        ),
                        build=True,
                    )
                )
                for i in range(n)
            ]
            runs_submit = time.perf_counter() - t0
            runs_calls = calls(log)
            _, runs_polls = poll_to_end(runner, handles, log)
            runs_total = time.perf_counter() - t0
        finally:
            cluster.stop()

    print(f"\n{n} trials on Slurm (private cluster): submit, then poll to the end")
    print(
        f"{'path':<36}{'sbatch':>8}{'submit s':>10}{'describe calls/round':>22}"
        f"{'total s':>9}{'ratio':>7}"
    )
    print(
        f"{'%%torchx sweep (one job array)':<36}{sweep_calls['sbatch']:>8}{sweep_submit:>10.2f}"
        f"{max(sweep_polls):>22}{sweep_total:>9.1f}{sweep_total / runs_total:>7.2f}"
    )
    print(
        f"{f'{n} separate runs (peer)':<36}{runs_calls['sbatch']:>8}{runs_submit:>10.2f}"
        f"{max(runs_polls):>22}{runs_total:>9.1f}{1.0:>7.2f}"
    )
    targets = Targets()
    targets.check(
        f"one submit call for a {n}-trial sweep",
        sweep_calls["sbatch"] == 1,
        f"{sweep_calls['sbatch']} sbatch ({runs_calls['sbatch']} for separate runs)",
    )
    targets.check(
        "one describe_many per poll round: one squeue (and, once trials ended, one sacct"
        " --json + one sacct --parsable2 for them all)",
        max(sweep_polls) <= 3,
        f"at most {max(sweep_polls)} per round over {sweep_rounds} rounds",
    )
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
