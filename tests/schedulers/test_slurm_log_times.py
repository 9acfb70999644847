"""When each line of a Slurm job's log was written (the batch script's ``apps/log_times``
watcher beside srun), on the real private cluster; and the watcher itself on files another
process writes, truncates and rewrites."""

from __future__ import annotations

import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

from tests.conftest import wait_for
from tests.infra.slurm import SlurmCluster
from torchx_nb import specs
from torchx_nb.metrics import parse_metric
from torchx_nb.notebook.handle import JobHandle
from torchx_nb.runner import get_runner
from torchx_nb.specs.api import AppState
from torchx_nb.specs.log_line import LogLine, Stream


def _app(script: str) -> specs.AppDef:
    role = specs.Role(
        name="r",
        image="",
        entrypoint="bash",
        args=["-c", script],
        resource=specs.Resource(cpu=1, gpu=0, memMB=200),
    )
    return specs.AppDef("timed", roles=[role])


def test_metrics_and_the_log_read_back_have_the_times_lines_were_written(
    slurm_env: SlurmCluster, isolated: Path
) -> None:
    """``job.metrics()`` of a finished Slurm job: each point has the time its line was
    written (a line written in two parts: when it began), not NaT; the combined log is
    stdout and stderr in the order they were written, not one file after the other."""
    script = (
        "for i in 1 2 3; do echo loss: 0.$i; echo step $i >&2; sleep 0.6; done;"
        " printf lo; sleep 0.6; echo 'ss: 0.9'"
    )
    with get_runner() as runner:
        before = time.time()
        handle = runner.run(_app(script), "slurm", {})
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        after = time.time()
        assert status is not None and status.state == AppState.SUCCEEDED, status
        frame = JobHandle(handle, runner, [parse_metric("loss=loss: ([0-9.]+)")]).metrics()
        both = list(runner.log_lines(handle, "r", 0))
        out = list(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
    assert frame["value"].tolist() == [0.1, 0.2, 0.3, 0.9]
    assert frame["time"].isna().sum() == 0
    stamps = [t.timestamp() for t in frame["time"]]
    assert all(before <= t <= after for t in stamps), (before, stamps, after)
    assert [round(b - a, 1) >= 0.4 for a, b in pairwise(stamps)] == [True] * 3, stamps
    assert both == [
        "loss: 0.1\n", "step 1\n", "loss: 0.2\n", "step 2\n", "loss: 0.3\n", "step 3\n",
        "loss: 0.9\n",
    ]  # fmt: skip
    assert all(isinstance(line, LogLine) and line.time for line in [*both, *out])
    assert [line.time for line in out] == stamps  # type: ignore[attr-defined]


def test_a_cancelled_job_keeps_every_line_and_the_times_seen_before_its_end(
    slurm_env: SlurmCluster, isolated: Path
) -> None:
    """scancel stops the batch script and the program together: every line stays in the log
    (slurmstepd writes the files, the watcher only reads them), the lines written before the
    cancel have their times, in order; a line written after the watcher was stopped has none
    (NaT), never a wrong one."""
    script = (
        "trap 'echo stopping; t=$((SECONDS + 2)); while [ $SECONDS -lt $t ]; do :; done;"
        " echo stopped; exit 143' TERM;"
        " for i in $(seq 1 200); do echo loss: $i; sleep 0.3; done"
    )
    with get_runner() as runner:
        handle = runner.run(_app(script), "slurm", {})
        wait_for(
            lambda: len(list(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))) >= 4,
            timeout=120,
        )
        cancelled_at = time.time()
        runner.cancel(handle)
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.CANCELLED, status
        time.sleep(3)  # the program's last line comes two seconds after the cancel
        out = list(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
    print([(str(x), x.time) for x in out])  # type: ignore[attr-defined]
    texts = [str(line) for line in out]
    n = texts.index("stopping\n")
    assert texts[:n] == [f"loss: {i}\n" for i in range(1, n + 1)] and n >= 4
    assert texts[n:] in (["stopping\n", "stopped\n"], ["stopping\n"]), texts[n:]
    times = [line.time for line in out]  # type: ignore[attr-defined]
    assert all(t is not None and t <= cancelled_at + 1 for t in times[: n - 1]), times
    known = [t for t in times if t is not None]
    assert known == sorted(known)


def _watcher(*paths: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchx_nb.apps.log_times", *map(str, paths)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def _times(log: Path) -> list[float | None]:
    from torchx_nb.schedulers.logs import LineTimes

    lines = LineTimes(log)
    try:
        return [lines.time_of(i) for i in range(log.read_bytes().count(b"\n"))]
    finally:
        lines.close()


def test_the_watcher_times_lines_as_they_grow_restarts_on_a_rewrite_and_never_guesses(
    tmp_path: Path,
) -> None:
    """The watcher against files another process writes: a line written in two parts has the
    time it began; a log truncated and rewritten (a requeued job's srun), even longer than
    before, has its times start again; closing its input ends it after one more look (the
    last line, written just before, has its time); lines written after it was killed have
    no time, not the last one it saw."""
    log = tmp_path / "slurm-1-r-0.out"
    proc = _watcher(log, tmp_path / "slurm-1-r-0.err")  # .err never written: no harm
    with log.open("ab", buffering=0) as f:
        t0 = time.time()
        f.write(b"one\nt")
        time.sleep(0.6)
        f.write(b"wo\nthree\n")
        time.sleep(0.6)
        first = _times(log)  # "two" began with the first write, "three" 0.6 s later
        assert first[0] == first[1] and t0 <= first[0] <= t0 + 1.0, (t0, first)  # type: ignore[operator]
        assert first[2] - first[1] >= 0.4, first  # type: ignore[operator]
        f.truncate(0)
        t1 = time.time()
        f.write(b"a longer first line\nsecond\n")
        time.sleep(0.6)
        f.write(b"last\n")
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    times = _times(log)
    assert len(times) == 3 and all(t is not None and t >= t1 for t in times), (t1, times)
    assert times[2] - times[0] >= 0.4  # type: ignore[operator]
    proc = _watcher(log)  # a requeued job's logs appended to (--open-mode=append): go on
    with log.open("ab", buffering=0) as f:
        f.write(b"appended\n")
        time.sleep(0.6)
        proc.kill()
        proc.wait(timeout=10)
        f.write(b"after the watcher\n")
    times = _times(log)
    assert len(times) == 5 and times[3] is not None and times[3] > times[2]  # type: ignore[operator]
    assert times[4] is None
