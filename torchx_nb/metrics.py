"""Numbers picked out of log lines: ``--metric loss=loss: ([0-9.]+)`` (or SageMaker's
``metric_definitions``) turns every matching line of any backend's log into a point
(name, step, value, time), for the live chart and ``job.metrics()``.

A metric's regex takes the number from its group named ``value``, else from its first group;
a group named ``step`` gives the step, else points are numbered per metric. Lines longer than
``MAX_LINE`` are cut before matching, and non-numbers are skipped, so hostile log contents cost
bounded time and never break the chart."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from torchx_nb.local_time import local_zone
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.specs.log_line import LogLine

if TYPE_CHECKING:
    import pandas as pd

MAX_LINE = 4096
MAX_POINTS = 100_000
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:/\-]{1,64}$")


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its name and the regex that finds it in a log line."""

    name: str
    pattern: Any

    @property
    def regex(self) -> str:
        return self.pattern.pattern


class Point(NamedTuple):
    name: str
    step: int
    value: float
    time: float | None


def metric_spec(name: str, regex: str) -> MetricSpec:
    """A checked MetricSpec; a bad name or regex raises TorchxNbError naming the fix."""
    if not _NAME_RE.match(name):
        raise TorchxNbError(
            f"metric name {name!r} must be 1-64 letters, digits or _.:/- (e.g. loss=loss: ([0-9.]+))"
        )
    from torchx_nb.user_regex import BadRegex, compile_regex

    try:
        pattern = compile_regex(regex)
    except BadRegex as e:
        raise TorchxNbError(f"metric {name!r}: {e}") from None
    if "value" not in pattern.groupindex and pattern.groups < 1:
        raise TorchxNbError(
            f"metric {name!r}: the regex needs a group around the number, "
            f"e.g. {name}={re.escape(name)}[=:] *([-0-9.eE+]+)"
        )
    return MetricSpec(name, pattern)


def parse_metric(text: str) -> MetricSpec:
    """``NAME=REGEX`` (as given to ``--metric``)."""
    name, sep, regex = text.partition("=")
    if not sep or not name or not regex:
        raise TorchxNbError(
            f"--metric expects NAME=REGEX, got {text!r} (e.g. loss=loss: ([0-9.]+))"
        )
    return metric_spec(name.strip(), regex)


def metric_definitions(
    definitions: Mapping[str, str] | Iterable[Mapping[str, str]] | None,
) -> list[MetricSpec]:
    """SageMaker's ``metric_definitions``: a ``{NAME: REGEX}`` option or ``[{"Name", "Regex"}]``."""
    if not definitions:
        return []
    if isinstance(definitions, Mapping):
        return [metric_spec(str(k), str(v)) for k, v in definitions.items()]
    return [metric_spec(str(d["Name"]), str(d["Regex"])) for d in definitions]


class MetricLog:
    """Points collected from log lines, safe to feed from one thread and read from others."""

    def __init__(self, specs: Iterable[MetricSpec]) -> None:
        self.specs = list(specs)
        self._points: list[Point] = []
        self._steps: dict[str, int] = {}
        self._lock = threading.Lock()
        self.version = 0

    def __bool__(self) -> bool:
        return bool(self.specs)

    def feed(self, line: str, when: float | None = None) -> int:
        """Parse one log line; returns how many points it added."""
        if not self.specs:
            return 0
        text = line[:MAX_LINE].rstrip("\r\n")
        added = 0
        for spec in self.specs:
            m = spec.pattern.search(text)
            if m is None:
                continue
            raw = m.group("value") if "value" in spec.pattern.groupindex else m.group(1)
            try:
                value = float(raw)
            except (TypeError, ValueError):
                continue
            if not math.isfinite(value):
                continue
            with self._lock:
                if "step" in spec.pattern.groupindex:
                    try:
                        step = int(m.group("step"))
                    except (TypeError, ValueError):
                        step = self._steps.get(spec.name, 0)
                else:
                    step = self._steps.get(spec.name, 0)
                self._steps[spec.name] = step + 1
                if len(self._points) >= MAX_POINTS:
                    del self._points[: MAX_POINTS // 10]
                self._points.append(Point(spec.name, step, value, when))
                self.version += 1
            added += 1
        return added

    def feed_all(self, lines: Iterable[str]) -> MetricLog:
        """Parse lines read after the fact: each point gets the time its line was written
        where the backend kept it (``LogLine``), else none (NaT in ``frame()``): the time of
        parsing would say nothing."""
        for line in lines:
            self.feed(line, LogLine.time_of(line))
        return self

    def points(self) -> list[Point]:
        with self._lock:
            return list(self._points)

    def series(self) -> dict[str, list[tuple[int, float]]]:
        """Per metric, its (step, value) points in arrival order."""
        out: dict[str, list[tuple[int, float]]] = {s.name: [] for s in self.specs}
        for p in self.points():
            out[p.name].append((p.step, p.value))
        return out

    def frame(self) -> pd.DataFrame:
        """A DataFrame with columns name, step, value, time (local time: when the line was
        written, or was read while followed live; NaT where neither is known)."""
        import pandas as pd

        points = self.points()
        frame = pd.DataFrame(points, columns=["name", "step", "value", "time"])
        frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True).dt.tz_convert(
            local_zone()
        )
        return frame
