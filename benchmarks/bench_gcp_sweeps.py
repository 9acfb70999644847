"""A 100-trial sweep on the loopback GCP Batch (tests/infra/gcp.py) as one job with a task
count, submitted and polled to its end, beside the same 100 trials as 100 separate jobs (what a
loop of ``%%torchx run`` sends): the API requests each path makes to submit and per poll round,
and its wall time, measured in the same run. The target: one create call for the sweep, and
one job get plus one task list per poll round, however many trials.

The tasks run in a project the emulator runs without containers (each for ``--seconds``, at
most ``--parallel`` at once), so no Docker daemon is needed.
Run: python benchmarks/bench_gcp_sweeps.py [--trials 100]"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import Targets  # noqa: E402

from tests.infra.gcp import GcpFake  # noqa: E402

PROJECT = "bench-project"


def poll_to_end(sched: Any, ids: list[str], fake: GcpFake) -> tuple[list[int], float]:
    """describe_many (as the notebook's poller calls it) every 0.5 s until every id ended:
    the requests each round took, and the seconds it took in all."""
    from torchx_nb.specs.api import is_terminal

    rounds: list[int] = []
    t0 = time.perf_counter()
    while True:
        before = sum(fake.requests.values())
        found = sched.describe_many(ids)
        rounds.append(sum(fake.requests.values()) - before)
        if all(d is not None and is_terminal(d.state) for d in found.values()):
            return rounds, time.perf_counter() - t0
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=25)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        fake = GcpFake(tmp, docker=None, project=PROJECT).start()
        fake.timed_projects[PROJECT] = args.seconds
        try:
            os.environ.update(fake.env)
            from torchx_nb import specs
            from torchx_nb.schedulers.gcp_batch import GcpBatchScheduler

            sched = GcpBatchScheduler("bench")
            app = specs.AppDef(
                "trial",
                roles=[
                    specs.Role(
                        "cell",
                        "img",
                        entrypoint="python",
                        args=["cell.py"],
                        resource=specs.Resource(1, 0, 256),
                    )
                ],
            )
            cfg = {"project": PROJECT, "output_path": "gs://bench/runs"}
            sched.submit_dryrun(app, cfg)  # the Google libraries are imported before timing
            sched.describe_many([])

            before = sum(fake.requests.values())
            t0 = time.perf_counter()
            info = sched.array_request(sched.submit_dryrun(app, cfg), args.trials, args.parallel)
            array_id = sched.schedule(info)
            sweep_submit = time.perf_counter() - t0
            sweep_creates = sum(fake.requests.values()) - before
            sweep_rounds, sweep_poll = poll_to_end(
                sched, sched.trial_ids(array_id, args.trials), fake
            )

            # the same trials as separate jobs (all let go at once), each task running as long
            before = sum(fake.requests.values())
            t0 = time.perf_counter()
            job_ids = [sched.schedule(sched.submit_dryrun(app, cfg)) for _ in range(args.trials)]
            loop_submit = time.perf_counter() - t0
            loop_creates = sum(fake.requests.values()) - before
            loop_rounds, loop_poll = poll_to_end(sched, job_ids, fake)
        finally:
            fake.stop()

    def row(path: str, creates: int, submit: float, rounds: list[int], poll: float) -> str:
        per = f"{statistics.median(rounds):.0f} (max {max(rounds)})"
        return (
            f"{path:<34}{creates:>9}{submit:>10.2f}{per:>16}{len(rounds):>8}{submit + poll:>9.2f}"
        )

    print(f"\n{args.trials}-trial sweep on the loopback GCP Batch, polled every 0.5 s to its end")
    print(f"{'path':<34}{'creates':>9}{'submit s':>10}{'reqs/round':>16}{'rounds':>8}{'all s':>9}")
    print(
        row(
            "torchx_nb sweep (one job, tasks)",
            sweep_creates,
            sweep_submit,
            sweep_rounds,
            sweep_poll,
        )
    )
    print(row("one job per trial", loop_creates, loop_submit, loop_rounds, loop_poll))
    print(
        f"ratio (sweep / separate): submit {sweep_submit / loop_submit:.3f},"
        f" requests per round {statistics.median(sweep_rounds) / statistics.median(loop_rounds):.3f}"
    )
    targets = Targets()
    targets.check(
        "one create call for the sweep",
        sweep_creates == 1,
        f"{sweep_creates} (separate jobs: {loop_creates})",
    )
    targets.check(
        "a job get and a task list per poll round, however many trials",
        max(sweep_rounds) <= 2,
        f"at most {max(sweep_rounds)} requests per round for {args.trials} trials"
        f" (separate jobs: up to {max(loop_rounds)})",
    )
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
