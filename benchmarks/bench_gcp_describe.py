"""Status of 200 running gcp_batch jobs against the loopback GCP Batch (tests/infra/gcp.py): the
API requests and wall time of our batched path (``Runner.status_many``: one filtered list of
active jobs per location, as the job list and the notebook poller use it) beside the naive loop
of one ``get_job`` per job with the same client, measured in the same run.

The jobs run in a project the emulator keeps RUNNING without containers, so no Docker daemon is
needed. Run: python benchmarks/bench_gcp_describe.py [--jobs 200]"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import start_sleepers  # noqa: E402
from targets import Targets  # noqa: E402

from tests.infra.gcp import GcpFake  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        fake = GcpFake(tmp, docker=None, project="bench-project").start()
        fake.idle_projects.add("bench-project")
        try:
            os.environ.update(fake.env)
            from torchx_nb.schedulers.gcp_batch import parse_app_id

            runner, handles = start_sleepers("gcp_batch", args.jobs, "img", 64, 60, 0.5)

            client = runner.get_scheduler("gcp_batch").gcp.batch  # type: ignore[attr-defined]
            names = []
            for h in handles:
                project, location, name = parse_app_id(h.rsplit("/", 1)[1])
                names.append(f"projects/{project}/locations/{location}/jobs/{name}")
            ours, naive, ours_calls, naive_calls = [], [], [], []
            for _ in range(args.runs):
                before = sum(fake.requests.values())
                t0 = time.perf_counter()
                found = runner.status_many(handles)
                ours.append(time.perf_counter() - t0)
                ours_calls.append(sum(fake.requests.values()) - before)
                assert sum(1 for s in found.values() if s is not None) == args.jobs

                before = sum(fake.requests.values())
                t0 = time.perf_counter()
                for name in names:
                    client.get_job(name=name)
                naive.append(time.perf_counter() - t0)
                naive_calls.append(sum(fake.requests.values()) - before)
        finally:
            fake.stop()

    o, n = statistics.median(ours), statistics.median(naive)
    print(f"\nstatus of {args.jobs} running gcp_batch jobs, {args.runs} runs (median)")
    print(f"{'path':<48}{'API requests':>14}{'seconds':>10}{'ratio':>8}")
    print(
        f"{'torchx_nb Runner.status_many (list per location)':<48}"
        f"{statistics.median(ours_calls):>14.0f}{o:>10.3f}{o / n:>8.3f}"
    )
    print(
        f"{'one get_job per job':<48}{statistics.median(naive_calls):>14.0f}{n:>10.3f}{1.0:>8.3f}"
    )
    pages = -(-args.jobs // 100)
    targets = Targets()
    targets.check(
        "one list per location (a request per page of 100)",
        statistics.median(ours_calls) <= pages,
        f"{statistics.median(ours_calls):.0f} requests for {args.jobs} jobs",
    )
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
