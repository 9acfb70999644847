"""A cell that trains in steps, saving its checkpoint (``torchx_nb.checkpoint()``) after each,
preempted twice: on local_cwd (``Runner.preempt``: SIGTERM, the grace, the kill, run again)
and on a real preempting Slurm cluster (tests/infra/slurm.py, ``PreemptMode=REQUEUE``: a job of
a partition of higher priority takes both nodes). Each must end SUCCEEDED with the result of an
uninterrupted run, repeat at most one step (one checkpoint interval) per preemption, and the
time from the preemption to the program running again with its checkpoint restored is
reported; on Slurm without the hold Slurm puts on every requeued job (BeginTime, ~2 minutes),
which is measured and reported apart, and released at once here.

Run (Slurm needs root and Debian's Slurm packages): python benchmarks/bench_preempt.py
[--steps 30] [--step-s 1] [--at 8 19] [--only local_cwd|slurm]"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import Targets  # noqa: E402

# the cell: each step adds step² to a total; the state is saved in the checkpoint folder after
# every step; each attempt's start (after its restore) and each step done go to LEDGER
CELL = """\
import json, os, time
import torchx_nb
ck = torchx_nb.checkpoint()
path = os.path.join(ck.path, "state.json")
state = {{"step": 0, "total": 0}}
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
def note(word):
    with open({ledger!r}, "a") as f:
        f.write(f"{{word}} {{ck.attempt}} {{state['step']}} {{time.time()}}\\n")
note("start")
while state["step"] < {steps}:
    time.sleep({step_s})
    state["step"] += 1
    state["total"] += state["step"] ** 2
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
    ck.save()
    note("step")
state["total"]
"""


def ledger_lines(ledger: Path) -> list[tuple[str, int, int, float]]:
    """(word, attempt, step, time) of each line the cell wrote."""
    out = []
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        word, attempt, step, at = line.split()
        out.append((word, int(attempt), int(step), float(at)))
    return out


def _starts(ledger: Path) -> list[float]:
    """When each attempt of the cell started (its checkpoint restored), in order."""
    return [t for w, _, _, t in ledger_lines(ledger) if w == "start"]


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def run_one(
    backend: str,
    cfg: dict[str, str],
    work: Path,
    args: argparse.Namespace,
    preempt: Callable[[str], None],
    hold: Callable[[str], tuple[float, float]] | None,
) -> dict[str, object]:
    """Run the cell on ``backend``, preempting it at each of ``args.at`` steps with
    ``preempt(handle)``; ``hold(handle)`` (Slurm) waits for the requeued job's hold, releases
    it and says (the hold Slurm set, the seconds spent waiting for it here)."""
    from torchx_nb.components.cell import cell
    from torchx_nb.runner import get_runner
    from torchx_nb.specs import AppState

    ledger = work / f"{backend}.ledger"
    source = CELL.format(ledger=str(ledger), steps=args.steps, step_s=args.step_s)
    to_running: list[float] = []
    holds: list[float] = []
    with get_runner() as runner:
        # with a workspace, the cell runs under the cell runner: its checkpoint is restored
        # before it starts and saved on SIGTERM, its value comes back
        ws = work / f"ws-{backend}"
        ws.mkdir(exist_ok=True)
        app = cell(source=source, name=f"train-{backend}", memMB=200)
        handle = runner.run(app, backend, cfg, workspace=str(ws))
        for n, step in enumerate(args.at, start=1):
            wait_until(
                lambda step=step: any(
                    w == "step" and s >= step for w, _, s, _ in ledger_lines(ledger)
                ),
                args.steps * args.step_s * 4 + 120,
                f"step {step}",
            )
            asked = time.time()
            preempt(handle)
            waited = 0.0
            if hold is not None:
                held, waited = hold(handle)
                holds.append(held)
            start = wait_until(
                lambda n=n: next((t for i, t in enumerate(_starts(ledger)) if i == n), None),
                300,
                f"attempt {n + 1} (the cell wrote: {ledger_lines(ledger)[-3:]};"
                f" {runner.status(handle)})",
            )
            to_running.append(float(start) - asked - waited)  # type: ignore[arg-type]
        status = runner.wait(handle, wait_interval=0.5, timeout=args.steps * args.step_s * 4 + 300)
        result = runner.result(handle) if status and status.state == AppState.SUCCEEDED else None
    lines = ledger_lines(ledger)
    steps_done = [s for w, _, s, _ in lines if w == "step"]
    starts = [s for w, _, s, _ in lines if w == "start"]
    # per preemption: the steps done again = the last step the attempt before it reached,
    # less the step the next one resumed at (the ledger's lines are in order)
    repeats, reached = [], 0
    for w, _, s, _ in lines:
        if w == "start" and reached:
            repeats.append(reached - s)
        reached = s
    return {
        "state": status.state.name if status else "none",
        "result": result,
        "starts": starts,
        "steps_done": len(steps_done),
        "repeats": repeats,
        "to_running": to_running,
        "holds": holds,
    }


def local_cwd(work: Path, args: argparse.Namespace) -> dict[str, object]:
    from torchx_nb.runner import get_runner

    def preempt(handle: str) -> None:
        with get_runner() as runner:
            runner.preempt(handle, grace=args.grace)

    return run_one("local_cwd", {}, work, args, preempt, None)


def slurm(work: Path, args: argparse.Namespace) -> dict[str, object]:
    from tests.infra.slurm import SlurmCluster, job_fields, preempt_nodes, requeue_hold

    cluster = SlurmCluster(work / "slurm", preempt=True).start()
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:

        def preempt(handle: str) -> None:
            preempt_nodes(cluster, seconds=1)

        def hold(handle: str) -> tuple[float, float]:
            """Wait for the requeued job's hold, release it; (the hold Slurm set, the
            seconds it was held here: from its requeue, Slurm's SubmitTime, to the release)."""
            job = handle.rsplit("/", 1)[1]
            wait_until(
                lambda: job_fields(cluster, job).get("Reason") == "BeginTime", 120, "the hold"
            )
            held = requeue_hold(cluster, job)
            requeued = datetime.fromisoformat(job_fields(cluster, job)["SubmitTime"]).timestamp()
            cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
            return held, time.time() - requeued

        return run_one("slurm", {"partition": "spot"}, work, args, preempt, hold)
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--at", type=int, nargs="+", default=[8, 19])
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--only", choices=["local_cwd", "slurm"])
    args = parser.parse_args()
    expected = sum(i * i for i in range(1, args.steps + 1))
    targets = Targets()
    backends = {"local_cwd": local_cwd, "slurm": slurm}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        work = tmp / "work"
        work.mkdir()
        os.chdir(work)
        for name, run in backends.items():
            if args.only and name != args.only:
                continue
            got = run(work, args)
            print(f"{name}: {got}")
            targets.check(
                f"{name}: preempted {len(args.at)} times, SUCCEEDED with the uninterrupted result",
                got["state"] == "SUCCEEDED" and got["result"] == expected,
                f"{got['state']}, result {got['result']} (uninterrupted: {expected}),"
                f" attempts {len(got['starts'])}",  # type: ignore[arg-type]
            )
            repeats = got["repeats"]
            targets.check(
                f"{name}: at most one checkpoint interval repeated per preemption",
                len(repeats) == len(args.at) and all(0 <= r <= 1 for r in repeats),  # type: ignore[arg-type]
                f"steps repeated {repeats} ({got['steps_done']} steps run for {args.steps};"
                f" one step = {args.step_s:g} s)",
            )
            times = ", ".join(f"{t:.1f} s" for t in got["to_running"])  # type: ignore[attr-defined]
            held = ", ".join(f"{h:.0f} s" for h in got["holds"])  # type: ignore[attr-defined]
            limit = args.grace + 10 if name == "local_cwd" else 60.0
            targets.check(
                f"{name}: preemption → program running again, checkpoint restored"
                + (" (Slurm's hold apart)" if name == "slurm" else ""),
                all(t <= limit for t in got["to_running"]),  # type: ignore[attr-defined]
                times
                + (f"; Slurm's hold (BeginTime) {held}, released at once here" if held else "")
                + f" (≤ {limit:g} s)",
            )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
