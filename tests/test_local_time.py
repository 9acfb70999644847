"""Times shown in local time read as the clock read then, across a daylight-saving change."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# a Paris machine: +02:00 in July, +01:00 in January (one of them is not today's offset)
SUMMER, WINTER = 1783000000.0, 1768000000.0  # 2026-07-02 15:46:40 CEST, 2026-01-10 00:06:40 CET

_SHOW = """
import json, sys
from torchx_nb.metrics import MetricLog, parse_metric
from torchx_nb.notebook.frames import jobs_frame
from torchx_nb.specs.log_line import LogLine

times = json.loads(sys.argv[1])
log = MetricLog([parse_metric("loss=loss: ([0-9.]+)")])
log.feed_all([LogLine(f"loss: {i}\\n", t) for i, t in enumerate(times)])
metrics = [str(t) for t in log.frame()["time"]]
rows = [dict.fromkeys(["handle", "name", "state", "submitted"]) | {"submitted": t} for t in times]
jobs = [str(t) for t in jobs_frame(rows)["submitted"]]
print(json.dumps({"metrics": metrics, "jobs": jobs}))
"""


def test_a_summer_time_read_in_winter_shows_the_summer_clock() -> None:
    """metrics().time and the job list's submitted column: a July point of a Paris machine
    reads 15:46:40+02:00 whatever the date today (it read 14:46:40+01:00 in November: the
    offset of now was applied to every time)."""
    out = subprocess.run(
        [sys.executable, "-c", _SHOW, json.dumps([SUMMER, WINTER])],
        env={**os.environ, "TZ": "Europe/Paris"},
        capture_output=True,
        text=True,
        check=True,
    )
    shown = json.loads(out.stdout)
    assert shown["metrics"] == ["2026-07-02 15:46:40+02:00", "2026-01-10 00:06:40+01:00"]
    assert shown["jobs"] == ["2026-07-02 15:46:40+02:00", "2026-01-10 00:06:40+01:00"]
