"""Job end → job-end notice received, with a real Jupyter server watching (its poller sends the
notice) and a webhook receiver on 127.0.0.1; beside it, the same server's event stream saying
SUCCEEDED for the same job (what the panel shows), measured in the same run.

Each of --jobs local_cwd jobs (``sleep 1``) is submitted by this process, which does not watch
it; its end is the time its supervisor recorded. Run: python benchmarks/bench_notify.py"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
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

from tests.conftest import shell_app  # noqa: E402
from tests.infra.lab import jupyter_lab, lab_missing  # noqa: E402
from tests.infra.webhook import webhook_receiver  # noqa: E402

TARGET_S = 2.0


def follow_events(url: str, token: str, seen: dict[str, float], stop: threading.Event) -> None:
    """The event stream: when each job's row first said SUCCEEDED (until the server goes)."""
    with contextlib.suppress(OSError, http.client.HTTPException):
        _follow(url, token, seen, stop)


def _follow(url: str, token: str, seen: dict[str, float], stop: threading.Event) -> None:
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=60)
    conn.request("GET", "/torchx-nb/api/events", headers={"Authorization": f"token {token}"})
    resp = conn.getresponse()
    buffer = b""
    while not stop.is_set():
        chunk = resp.read1(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            lines = block.decode().splitlines()
            if "event: job" in lines:
                data = json.loads(next(x[6:] for x in lines if x.startswith("data: ")))
                if data["state"] == "SUCCEEDED":
                    seen.setdefault(data["handle"], time.time())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5)
    args = parser.parse_args()
    reason = lab_missing()
    if reason:
        print(f"cannot run: {reason}")
        return 1
    work = Path(tempfile.mkdtemp(prefix="bench-notify-"))
    data = work / "data"
    os.environ["TORCHX_NB_DATA_DIR"] = str(data)
    from torchx_nb.runner import get_runner

    notice: list[float] = []
    stream: list[float] = []
    with (
        webhook_receiver() as hook,
        jupyter_lab(
            work / "root", env={"TORCHX_NB_DATA_DIR": str(data), "TORCHX_NB_NOTIFY_URL": hook.url}
        ) as lab,
    ):
        seen: dict[str, float] = {}
        stop = threading.Event()
        threading.Thread(
            target=follow_events, args=(lab.url, lab.token, seen, stop), daemon=True
        ).start()
        time.sleep(1)
        for i in range(args.jobs):
            with get_runner() as runner:
                handle = runner.run(shell_app("sleep 1", name=f"notice-{i}"), "local_cwd", {})
                deadline = time.time() + 30
                while time.time() < deadline and not any(
                    b["handle"] == handle for b in hook.bodies()
                ):
                    time.sleep(0.02)
                got = next(t for t, _, b in hook.posts if b["handle"] == handle)
                rec = runner.jobstore.get(handle)
                ended = rec.ended if rec and rec.ended else None
                if ended is None:
                    print(f"cannot run: {handle} has no recorded end")
                    return 1
                notice.append(got - ended)
                wait = time.time() + 10
                while handle not in seen and time.time() < wait:
                    time.sleep(0.02)
                stream.append(seen.get(handle, float("nan")) - ended)
        stop.set()
        sent = len(hook.posts)
    print(
        f"{args.jobs} local_cwd jobs (sleep 1) watched by a real Jupyter server; {sent} notices received"
    )
    print("| measure | torchx_nb | peer | ratio | target |")
    print("|---|---|---|---|---|")
    med, peer = statistics.median(notice), statistics.median(stream)
    print(
        f"| job end → webhook received (median / max) | {med:.2f} s / {max(notice):.2f} s"
        f" | the event stream's SUCCEEDED row: {peer:.2f} s / {max(stream):.2f} s"
        f" | {med / peer if peer > 0 else float('nan'):.2f} | ≤ {TARGET_S:g} s |"
    )
    targets = Targets()
    targets.check(
        f"job end → webhook ≤ {TARGET_S:g} s",
        max(notice) <= TARGET_S and sent == args.jobs,
        f"max {max(notice):.2f} s, {sent} notices for {args.jobs} jobs",
    )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
