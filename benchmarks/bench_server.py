"""The server extension under load, with 100,000 jobs in the store (a real Jupyter server):

- first page: ``GET /torchx-nb/api/jobs?per_page=50`` (the very first request, a second after
  the server answers, as the panel asks once JupyterLab's page has loaded; and the median of
  --requests), beside Jupyter's own ``GET /api/status`` on the same server;
- Jupyter's ``GET /api/status`` while 10 clients stream events and a hostile regex
  (``(a+)+$`` over lines of a's) is served over and over, beside the same request idle;
- the server's CPU while idle for --idle seconds: no client, then 10 event clients connected
  (5 local jobs running, the rest finished).

Run: python benchmarks/bench_server.py [--jobs 100000]"""

from __future__ import annotations

import argparse
import http.client
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from targets import Targets  # noqa: E402

from tests.infra.lab import jupyter_lab, lab_missing  # noqa: E402

API = "/torchx-nb/api"
TARGET_PAGE_MS = 50.0
TARGET_STATUS_MS = 50.0
TARGET_IDLE_CPU = 1.0
HOSTILE = "(a+)+$"


def fill_store(path: Path, jobs: int) -> None:
    """``jobs`` finished jobs, written straight into the store (the schema by JobStore)."""
    from torchx_nb.jobstore import JobStore

    JobStore(path)
    db = sqlite3.connect(path)
    start = time.time() - jobs
    states = ("SUCCEEDED", "FAILED", "CANCELLED")
    db.executemany(
        "INSERT INTO jobs (handle, scheduler, session, app_id, name, image, submitted, state,"
        " updated, ended, notebook) VALUES (?, 'local_cwd', 'torchx', ?, ?, '', ?, ?, ?, ?, ?)",
        (
            (
                f"local_cwd://torchx/bench-{i}",
                f"bench-{i}",
                f"bench-{i}",
                start + i,
                states[i % 3],
                start + i + 1,
                start + i + 1,
                f"/home/u/nb-{i % 50}.ipynb",
            )
            for i in range(jobs)
        ),
    )
    db.commit()
    db.close()


class Client:
    """One keep-alive HTTP connection with Jupyter's token."""

    def __init__(self, url: str, token: str) -> None:
        self.netloc = urllib.parse.urlsplit(url).netloc
        self.token = token
        self.conn = http.client.HTTPConnection(self.netloc, timeout=120)

    def get_ms(self, path: str) -> float:
        t0 = time.perf_counter()
        self.conn.request("GET", path, headers={"Authorization": f"token {self.token}"})
        resp = self.conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: {resp.status}")
        return (time.perf_counter() - t0) * 1000


def stream_events(url: str, token: str, stop: threading.Event) -> None:
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=60)
    conn.request("GET", f"{API}/events", headers={"Authorization": f"token {token}"})
    resp = conn.getresponse()
    while not stop.is_set():
        if not resp.read1(65536):
            break
    conn.close()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    reason = lab_missing()
    if reason:
        print(f"cannot run: {reason}")
        return 2
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "data"
        os.environ["TORCHX_NB_DATA_DIR"] = str(data)
        os.environ["TORCHXCONFIG"] = ""
        fill_store(data / "jobs.sqlite", args.jobs)
        from tests.conftest import shell_app
        from torchx_nb.runner import get_runner

        with get_runner() as runner:
            line = "a" * 30 + "b"
            hostile_job = runner.run(
                shell_app(f"for i in $(seq 2000); do echo {line}; done", name="hostile"),
                "local_cwd",
                {},
            )
            runner.wait(hostile_job, wait_interval=0.1, timeout=60)
            sleepers = [
                runner.run(shell_app("sleep 600", name=f"sleeper{i}"), "local_cwd", {})
                for i in range(5)
            ]
        try:
            with jupyter_lab(tmp / "lab", env={"TORCHX_NB_DATA_DIR": str(data)}) as lab:
                client = Client(lab.url, lab.token)
                time.sleep(1.0)  # the browser loads JupyterLab before the panel asks
                first_page = client.get_ms(f"{API}/jobs?per_page=50")
                pages = [client.get_ms(f"{API}/jobs?per_page=50") for _ in range(args.requests)]
                status_idle = [client.get_ms("/api/status") for _ in range(args.requests)]
                time.sleep(35)  # the page's poller lease runs out: the server is idle
                pid = lab.proc.pid
                t0, c0 = time.monotonic(), cpu_seconds(pid)
                time.sleep(args.idle)
                idle_cpu = 100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
                stop = threading.Event()
                streams = [
                    threading.Thread(target=stream_events, args=(lab.url, lab.token, stop))
                    for _ in range(args.clients)
                ]
                for s in streams:
                    s.start()
                time.sleep(3)
                t0, c0 = time.monotonic(), cpu_seconds(pid)
                time.sleep(args.idle)
                clients_cpu = 100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
                hostile_ms: list[float] = []

                def hostile() -> None:
                    other = Client(lab.url, lab.token)
                    path = (
                        f"{API}/jobs/{urllib.parse.quote(hostile_job, safe='')}/logs"
                        f"?tail=100000&regex={urllib.parse.quote(HOSTILE)}"
                    )
                    while not stop.is_set():
                        hostile_ms.append(other.get_ms(path))

                attacker = threading.Thread(target=hostile)
                attacker.start()
                time.sleep(0.5)
                status_busy = [client.get_ms("/api/status") for _ in range(args.requests)]
                stop.set()
                attacker.join()
                for s in streams:
                    s.join(timeout=20)
        finally:
            with get_runner() as runner:
                for h in sleepers:
                    runner.cancel(h)

    def row(name: str, ours: float, peer: float, unit: str, target: str) -> str:
        ratio = f"{ours / peer:.2f}" if peer else "—"
        return f"| {name} | {ours:.1f} {unit} | {peer:.1f} {unit} | {ratio} | {target} |"

    page_ms = statistics.median(pages)
    busy_ms = statistics.median(status_busy)
    print(f"{args.jobs:,} jobs in the store; {args.clients} event clients; peer: Jupyter's own")
    print("/api/status on the same server, idle, in the same run")
    print("| measure | torchx_nb | peer | ratio | target |")
    print("|---|---|---|---|---|")
    print(
        row(
            "first page, first request",
            first_page,
            statistics.median(status_idle),
            "ms",
            f"< {TARGET_PAGE_MS:g} ms",
        )
    )
    print(
        row(
            "first page (median)",
            page_ms,
            statistics.median(status_idle),
            "ms",
            f"< {TARGET_PAGE_MS:g} ms",
        )
    )
    print(
        row(
            "/api/status under load (median)",
            busy_ms,
            statistics.median(status_idle),
            "ms",
            f"< {TARGET_STATUS_MS:g} ms",
        )
    )
    print(
        row(
            "/api/status under load (max)",
            max(status_busy),
            max(status_idle),
            "ms",
            "",
        )
    )
    print(
        f"| hostile regex request (median of {len(hostile_ms)}) |"
        f" {statistics.median(hostile_ms):.1f} ms | — | — | |"
    )
    print(f"| server CPU, idle, no client | {idle_cpu:.2f} % | — | — | < {TARGET_IDLE_CPU:g} % |")
    print(
        f"| server CPU, idle, {args.clients} event clients | {clients_cpu:.2f} % | — | — |"
        f" < {TARGET_IDLE_CPU:g} % |"
    )
    targets = Targets()
    targets.check(
        f"first page < {TARGET_PAGE_MS:g} ms",
        max(first_page, page_ms) < TARGET_PAGE_MS,
        f"first {first_page:.1f} ms, median {page_ms:.1f} ms",
    )
    targets.check(
        f"/api/status under load < {TARGET_STATUS_MS:g} ms",
        busy_ms < TARGET_STATUS_MS,
        f"median {busy_ms:.1f} ms",
    )
    targets.check(
        f"idle server CPU < {TARGET_IDLE_CPU:g}%",
        max(idle_cpu, clients_cpu) < TARGET_IDLE_CPU,
        f"{idle_cpu:.2f}% without clients, {clients_cpu:.2f}% with {args.clients}",
    )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
