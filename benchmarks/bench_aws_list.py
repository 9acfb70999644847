"""Listing 2,000 AWS Batch jobs (two queues of 1,000) in moto_server: API calls and wall time of
our ``list`` beside TorchX 0.7.0's ``AWSBatchScheduler.list()`` (its own virtualenv), in one run.
Also times ``%torchx list -s aws_batch`` (the DataFrame) in an IPython shell.

moto's Batch runs in its no-Docker mode here (jobs finish at submit), which lists like real
AWS for this purpose. Run: python benchmarks/bench_aws_list.py [--jobs 2000]"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer import ensure_torchx_venv  # noqa: E402
from targets import Targets  # noqa: E402

from tests.infra.moto import make_queue, start_moto  # noqa: E402

TARGET_CALLS = 25
PEER_SCRIPT = """
import json, sys, time, boto3
from torchx.schedulers.aws_batch_scheduler import create_scheduler
calls = []
client = boto3.client("batch")
client.meta.events.register("before-call", lambda **kw: calls.append(kw["model"].name))
sched = create_scheduler("bench", client=client)
t0 = time.perf_counter()
apps = sched.list()
print(json.dumps({"seconds": time.perf_counter() - t0, "jobs": len(apps), "calls": len(calls)}))
"""


def counting(client: Any) -> list[str]:
    calls: list[str] = []
    client.meta.events.register("before-call", lambda **kw: calls.append(kw["model"].name))
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    torchx = ensure_torchx_venv(("boto3",))
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        os.environ["TORCHX_NB_WIDGETS"] = "text"
        server = start_moto(tmp / "moto", None)
        try:
            os.environ.update(server.env)
            server.use_docker(False)
            batch = server.client("batch")
            batch.register_job_definition(
                jobDefinitionName="bench",
                type="container",
                containerProperties={
                    "image": "img",
                    "command": ["true"],
                    "vcpus": 1,
                    "memory": 128,
                },
            )
            queues = [make_queue(server, f"bench-{i}") for i in range(2)]
            t0 = time.perf_counter()
            for i in range(args.jobs):
                batch.submit_job(
                    jobName=f"job-{i}",
                    jobQueue=queues[i % 2],
                    jobDefinition="bench",
                    tags={"torchx.pytorch.org/version": "0.7.0"},
                )
            print(
                f"submitted {args.jobs} jobs in {time.perf_counter() - t0:.1f} s", file=sys.stderr
            )

            from torchx_nb.runner import Runner

            ours: dict[str, list[float]] = {"seconds": [], "jobs": [], "calls": []}
            peer: dict[str, list[float]] = {"seconds": [], "jobs": [], "calls": []}
            magic: list[float] = []
            from IPython.testing.globalipapp import start_ipython

            ip = start_ipython()
            ip.run_line_magic("load_ext", "torchx_nb")
            for _ in range(args.runs):
                client = server.client("batch")
                calls = counting(client)
                with Runner(scheduler_params={"client": client}) as runner:
                    t0 = time.perf_counter()
                    apps = runner.list("aws_batch")
                    ours["seconds"].append(time.perf_counter() - t0)
                ours["jobs"].append(len(apps))
                ours["calls"].append(len(calls))

                out = subprocess.run(
                    [str(torchx.parent / "python"), "-c", PEER_SCRIPT],
                    capture_output=True,
                    text=True,
                    env=os.environ.copy(),
                )
                if out.returncode != 0:
                    raise SystemExit(f"torchx list failed:\n{out.stderr[-2000:]}")
                res = json.loads(out.stdout.strip().splitlines()[-1])
                for k in peer:
                    peer[k].append(res[k])

                t0 = time.perf_counter()
                frame = ip.run_line_magic("torchx", "list -s aws_batch --all")
                magic.append(time.perf_counter() - t0)
                assert len(frame) == args.jobs, len(frame)
        finally:
            server.stop()

    def med(d: dict[str, list[float]], k: str) -> float:
        return statistics.median(d[k])

    print(f"\nlist over {args.jobs} AWS Batch jobs in 2 queues, {args.runs} runs (median)")
    print(f"{'lister':<34}{'jobs found':>12}{'API calls':>11}{'seconds':>10}{'ratio':>8}")
    print(
        f"{'torchx_nb Runner.list(aws_batch)':<34}{med(ours, 'jobs'):>12.0f}"
        f"{med(ours, 'calls'):>11.0f}{med(ours, 'seconds'):>10.2f}"
        f"{med(ours, 'seconds') / med(peer, 'seconds'):>8.2f}"
    )
    print(
        f"{'%torchx list -s aws_batch --all':<34}{args.jobs:>12}{'':>11}"
        f"{statistics.median(magic):>10.2f}{statistics.median(magic) / med(peer, 'seconds'):>8.2f}"
    )
    print(
        f"{'torchx 0.7.0 AWSBatchScheduler.list':<34}{med(peer, 'jobs'):>12.0f}"
        f"{med(peer, 'calls'):>11.0f}{med(peer, 'seconds'):>10.2f}{1.0:>8.2f}"
    )
    ok = med(ours, "jobs") == args.jobs and med(ours, "calls") <= TARGET_CALLS
    print()
    targets = Targets()
    targets.check(
        f"all {args.jobs} jobs in at most {TARGET_CALLS} API calls",
        ok,
        f"{med(ours, 'jobs'):.0f} jobs, {med(ours, 'calls'):.0f} calls (torchx 0.7.0 finds"
        f" {med(peer, 'jobs'):.0f}: at most 100 per queue)",
    )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
