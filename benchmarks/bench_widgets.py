"""How live the widgets are, and what watching costs the kernel:

1. End-to-widget delay: jobs of staggered lengths watched by the kernel's poller; the delay from
   each job's end (the scheduler's own end time) to its status widget turning terminal. Beside
   it, in the same run, the same jobs watched the TorchX way: ``Runner.wait`` at TorchX's
   default ``wait_interval`` of 10 s. For local_cwd, and for aws_batch on moto_server running
   the containers in a local dockerd (skipped, and said so, when dockerd or moto are missing).
2. Kernel CPU: a real Jupyter kernel runs twenty ``%%torchx run`` cells (status and log
   widgets, a sleeping job each) and its CPU time over a 20 s window is compared with the same
   kernel idle over the same window.

Targets: <= 1 s for local jobs, <= one poll interval (5 s) for remote ones, < 2% of a core for
20 watched jobs. Run: python benchmarks/bench_widgets.py [--jobs 8] [--window 20]"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from targets import Targets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_LOCAL_S = 1.0
TARGET_REMOTE_S = 5.0
TARGET_CPU_PCT = 2.0
TORCHX_WAIT_INTERVAL = 10.0


def _delays(runner: Any, handles: list[str], poller: Any) -> tuple[list[float], list[float]]:
    """(ours, peer) delays in seconds from each job's end to it being shown as ended."""
    from torchx_nb.notebook.widgets import StatusWidget

    shown: dict[str, float] = {}
    waited: dict[str, float] = {}
    widgets = []
    for h in handles:
        widgets.append(
            StatusWidget(h, runner, poller, on_end=lambda _s, h=h: shown.setdefault(h, time.time()))
        )

    def torchx_wait(h: str) -> None:
        """TorchX's ``Runner.wait``: ask, and if not ended, sleep ``wait_interval``."""
        while True:
            status = runner.status(h)
            if status is None or status.is_terminal():
                waited[h] = time.time()
                return
            time.sleep(TORCHX_WAIT_INTERVAL)

    threads = [threading.Thread(target=torchx_wait, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    deadline = time.monotonic() + 60
    while len(shown) < len(handles) and time.monotonic() < deadline:
        time.sleep(0.05)
    ours, peer = [], []
    for h in handles:
        status = runner.status(h)
        assert status is not None and status.ended is not None, h
        ours.append(shown[h] - status.ended)
        peer.append(waited[h] - status.ended)
    return ours, peer


def bench_local(jobs: int) -> tuple[list[float], list[float]]:
    from torchx_nb.components.utils import sh
    from torchx_nb.refresher import Refresher
    from torchx_nb.runner import get_runner

    with get_runner() as runner:
        handles = [
            runner.run(sh("sleep", f"{1.0 + i * 0.37:.2f}"), "local_cwd") for i in range(jobs)
        ]
        poller = Refresher(runner)
        try:
            return _delays(runner, handles, poller)
        finally:
            poller.stop()


def bench_aws_batch(jobs: int, tmp: Path) -> tuple[list[float], list[float]] | str:
    from tests.infra.dockerd import build_base_images, docker_available, start_dockerd
    from tests.infra.moto import make_queue, moto_available, start_moto

    reason = docker_available() or moto_available()
    if reason:
        return reason
    from torchx_nb import specs
    from torchx_nb.refresher import Refresher
    from torchx_nb.runner import Runner

    daemon = start_dockerd(tmp / "dockerd")
    server = None
    try:
        images = build_base_images(daemon.client())
        server = start_moto(tmp / "moto", daemon.base_url)
        os.environ.update(server.env)
        queue = make_queue(server, "bench")
        runner = Runner("torchx")
        handles = []
        for i in range(jobs):
            app = specs.AppDef(
                name=f"sleep{i}",
                roles=[
                    specs.Role(
                        name="main",
                        image=images["busybox"],
                        entrypoint="sh",
                        args=["-c", f"sleep {2 + i * 0.7:.1f}"],
                        resource=specs.Resource(cpu=1, gpu=0, memMB=128),
                    )
                ],
            )
            handles.append(runner.run(app, "aws_batch", {"queue": queue}))
        poller = Refresher(runner)
        try:
            return _delays(runner, handles, poller)
        finally:
            poller.stop()
            runner.close()
    finally:
        if server is not None:
            server.stop()
        daemon.stop()


KERNEL_SETUP = "%load_ext torchx_nb\nimport time"
MEASURE_START = "__c0, __t0 = time.process_time(), time.monotonic()"
MEASURE_END = "print(time.process_time() - __c0, time.monotonic() - __t0)"


def bench_kernel_cpu(jobs: int, window: float, tmp: Path) -> tuple[float, float]:
    """(percent of a core watching ``jobs`` jobs, percent idle) in a real kernel."""
    from jupyter_client.manager import start_new_kernel

    env = {**os.environ, "TORCHX_NB_WIDGETS": "1"}
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp))
    try:

        def run(code: str) -> str:
            out: list[str] = []

            def hook(msg: dict[str, Any]) -> None:
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    out.append("\n".join(msg["content"]["traceback"]))

            kc.execute_interactive(code, output_hook=hook, timeout=120)
            return "".join(out)

        def cpu_pct() -> float:
            run(MEASURE_START)
            deadline = time.monotonic() + window
            while time.monotonic() < deadline:  # keep reading iopub, as a frontend does
                with contextlib.suppress(Exception):
                    kc.get_iopub_msg(timeout=0.2)
            cpu, wall = (float(x) for x in run(MEASURE_END).split())
            return 100.0 * cpu / wall

        run(KERNEL_SETUP)
        idle = cpu_pct()
        for i in range(jobs):
            run(f"%%torchx run -o j{i}\nimport time\ntime.sleep({window * 3:.0f})")
        time.sleep(2)
        watching = cpu_pct()
        states = run(
            "print(sorted({str(j.status().state) for j in "
            f"[globals()[f'j{{i}}'] for i in range({jobs})]}}))"
        )
        assert "RUNNING" in states, states
        run("\n".join(f"j{i}.cancel()" for i in range(jobs)))
        return watching, idle
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _row(name: str, ours: float, peer: float, target: str, unit: str = "s") -> str:
    ratio = ours / peer if peer else float("nan")
    return f"| {name} | {ours:.3f} {unit} | {peer:.3f} {unit} | {ratio:.2f} | {target} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--watched", type=int, default=20)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--skip-aws", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        os.environ["TORCHXCONFIG"] = ""
        work = tmp / "work"
        work.mkdir()
        os.chdir(work)
        local_ours, local_peer = bench_local(args.jobs)
        aws = "skipped (--skip-aws)" if args.skip_aws else bench_aws_batch(args.jobs // 2, tmp)
        watching, idle = bench_kernel_cpu(args.watched, args.window, work)

    rows = [
        "| measure | torchx_nb | peer | ratio | target |",
        "|---|---|---|---|---|",
        _row(
            "local_cwd: end → widget, median",
            statistics.median(local_ours),
            statistics.median(local_peer),
            f"<= {TARGET_LOCAL_S} s",
        ),
        _row(
            "local_cwd: end → widget, max",
            max(local_ours),
            max(local_peer),
            f"<= {TARGET_LOCAL_S} s",
        ),
    ]
    if isinstance(aws, str):
        rows.append(f"| aws_batch on moto: end → widget | {aws} | | | |")
    else:
        aws_ours, aws_peer = aws
        rows.append(
            _row(
                "aws_batch on moto: end → widget, max",
                max(aws_ours),
                max(aws_peer),
                f"<= {TARGET_REMOTE_S} s",
            )
        )
    rows.append(
        _row(
            f"kernel CPU, {args.watched} jobs watched vs idle",
            watching,
            idle,
            f"< {TARGET_CPU_PCT}% of a core",
            unit="%",
        )
    )
    print(
        f"peer: TorchX's Runner.wait (wait_interval={TORCHX_WAIT_INTERVAL:g} s) on the same jobs;"
    )
    print("for CPU, the same kernel idle over the same window")
    print("\n".join(rows))
    targets = Targets()
    targets.check(
        f"local_cwd end → widget ≤ {TARGET_LOCAL_S} s",
        max(local_ours) <= TARGET_LOCAL_S,
        f"max {max(local_ours):.2f} s",
    )
    if not isinstance(aws, str):
        targets.check(
            f"aws_batch end → widget ≤ {TARGET_REMOTE_S} s (+0.5 s of moto)",
            max(aws[0]) <= TARGET_REMOTE_S + 0.5,
            f"max {max(aws[0]):.2f} s",
        )
    targets.check(
        f"kernel CPU watching {args.watched} jobs < {TARGET_CPU_PCT}%",
        watching < TARGET_CPU_PCT,
        f"{watching:.2f}%",
    )
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
