"""``Sweep``: the handle of a submitted sweep, its trials' handles, states, results and cancel,
found again after a kernel restart (``Sweep.attach``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_nb.errors import one_line
from torchx_nb.grid import Value
from torchx_nb.metrics import MetricLog, MetricSpec
from torchx_nb.runner import Runner
from torchx_nb.specs.api import AppState, AppStatus, TorchxNbError, is_terminal
from torchx_nb.specs.exceptions import SweepPartlySubmitted as SweepPartlySubmitted
from torchx_nb.specs.exceptions import TrialsNotCancelled as TrialsNotCancelled
from torchx_nb.sweeps.text import NOT_SUBMITTED

if TYPE_CHECKING:
    import pandas as pd


class Sweep:
    """The trials of one sweep, in grid order: ``handles``, ``statuses()``, ``wait()``,
    ``cancel()``, ``results()`` (a DataFrame) and ``best(metric)``."""

    def __init__(
        self,
        runner: Runner,
        sweep_id: str,
        points: list[dict[str, Value]],
        handles: list[str | None],
        array: bool = False,
        metrics: Sequence[MetricSpec] = (),
        scheduler: str = "",
    ) -> None:
        self.runner = runner
        self.id = sweep_id
        self.points = points
        self.array = array
        self.scheduler = scheduler
        self.metric_specs = list(metrics)
        self._handles = handles
        self._lock = threading.Lock()
        self._submitting = threading.Lock()  # held while one trial is prepared and submitted
        self._driver: threading.Thread | None = None
        self.error: str | None = None  # why the driver stopped submitting, if it failed
        self.stopped = False  # cancelled (or --fail-fast): no more trials are submitted
        self.view: Any = None

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for rec in self._records():
            counts[rec] = counts.get(rec, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return f"Sweep({self.id}, {len(self.points)} trials: {summary})"

    def _records(self) -> list[str]:
        by_handle = {r.handle: r.state for r in self.runner.jobstore.trials(self.id)}
        return [by_handle.get(h, NOT_SUBMITTED) if h else NOT_SUBMITTED for h in self.handles]

    @property
    def handles(self) -> list[str | None]:
        """Each trial's handle, in grid order (None: not submitted yet, or never)."""
        with self._lock:
            return list(self._handles)

    @property
    def names(self) -> list[str]:
        return list(self.points[0]) if self.points else []

    def _set_handle(self, i: int, handle: str) -> None:
        with self._lock:
            self._handles[i] = handle

    @property
    def submitting(self) -> bool:
        """Whether trials are still waiting for a free slot."""
        return self._driver is not None and self._driver.is_alive()

    def statuses(self) -> list[AppStatus | None]:
        """Each trial's status (None for one not submitted), one batched call per scheduler."""
        handles = [h for h in self.handles if h]
        found = self.runner.status_many(handles) if handles else {}
        return [found.get(h) if h else None for h in self.handles]

    def _recorded(self, handles: list[str]) -> dict[str, AppStatus | None]:
        """Each trial's last state in the job store: what ``wait`` gives at its timeout for a
        trial the refresher had no answer for yet — never a describe of its own, which a
        backend that hangs would hold past the timeout (for ever, against an API that never
        answers)."""
        try:
            records = {r.handle: r for r in self.runner.jobstore.trials(self.id)}
        except Exception:
            records = {}
        out: dict[str, AppStatus | None] = {}
        for handle in handles:
            rec = records.get(handle)
            state = AppState[rec.state] if rec is not None else AppState.UNKNOWN
            out[handle] = AppStatus(
                state,
                msg=rec.msg if rec is not None else "",
                started=rec.started if rec is not None else None,
                ended=rec.ended if rec is not None else None,
            )
        return out

    def done(self) -> bool:
        if self.submitting:
            return False
        return all(s is None or is_terminal(s.state) for s in self.statuses())

    def wait(self, timeout: float | None = None, interval: float = 1.0) -> list[AppStatus | None]:
        """Until every trial has ended (or ``timeout`` seconds); each trial's status. The trials
        are watched through the process's one refresher (the widgets' too): a sweep waited on
        asks its scheduler nothing of its own (at the timeout, a trial the refresher has no
        answer for yet, its backend hanging, gets its last state in the job store).
        ``interval``: how often, at most, it looks for trials submitted since."""
        from torchx_nb.refresher import get_refresher

        refresher = get_refresher()
        deadline = time.monotonic() + timeout if timeout is not None else None
        heard: dict[str, AppStatus | None] = {}
        changed = threading.Event()
        watches: dict[str, int] = {}

        def hear(handle: str) -> Callable[[AppStatus | None, BaseException | None], None]:
            def callback(status: AppStatus | None, error: BaseException | None) -> None:
                if error is None:
                    heard[handle] = status
                    changed.set()

            return callback

        def ended(handle: str | None) -> bool:
            if handle is None:
                return True
            if handle not in heard:
                return False
            status = heard[handle]
            return status is None or is_terminal(status.state)

        try:
            while True:
                submitting = self.submitting
                handles = self.handles
                for h in handles:
                    if h and h not in watches:
                        watches[h] = refresher.watch(h, hear(h), runner=self.runner)
                if all(ended(h) for h in handles) and not submitting:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                changed.wait(timeout=interval if left is None else min(interval, left))
                changed.clear()
        finally:
            for watch_id in watches.values():
                refresher.unwatch(watch_id)
        missing = [h for h in self.handles if h and h not in heard]
        if missing:  # a timeout before the refresher answered for them (a backend that hangs)
            heard.update(self._recorded(missing))
        statuses = [heard.get(h) if h else None for h in self.handles]
        if self.view is not None:
            self.view.settle(statuses)
        return statuses

    def cancel(self) -> None:
        """Stop submitting trials and cancel every trial not yet ended (a native array in
        one go, where its backend stops a whole array at once). A trial being prepared at
        that moment (a slow image build) is waited for and cancelled with the rest: no
        trial runs on after ``cancel()``. A trial whose cancel fails (a handle its backend
        no longer knows, a backend error) does not keep the others from being cancelled;
        then ``TrialsNotCancelled`` says which could not be, one line each."""
        self.stopped = True
        with self._submitting:
            live = [
                (i, handle)
                for i, (handle, status) in enumerate(
                    zip(self.handles, self.statuses(), strict=True)
                )
                if handle and (status is None or not is_terminal(status.state))
            ]
        if self.array and live:
            try:
                self.runner.cancel_array([h for _, h in live])
                return
            except Exception:
                pass  # one by one below: what fails is named per trial
        failed: list[tuple[int, str, str]] = []
        for i, handle in live:
            try:
                self.runner.cancel(handle)
            except Exception as e:
                failed.append((i, handle, one_line(e)))
        if failed:
            raise TrialsNotCancelled(self.id, failed)

    def watch(self) -> None:
        """Show the live widgets again in this notebook (after a kernel restart, or in another
        notebook): ``%torchx watch`` for this sweep. Without widgets it follows its trials in text
        until they end."""
        from torchx_nb.watching import watch_in_kernel

        watch_in_kernel(self.id)

    def results(self) -> pd.DataFrame:
        """One row per trial, in grid order: its parameters, ``state``, ``exit_code``,
        ``result`` (the cell's value, for a trial that succeeded), ``error`` (what a failed
        trial raised), the last value of each metric, and ``handle``."""
        import pandas as pd

        rows = []
        for i, (point, handle, status) in enumerate(
            zip(self.points, self.handles, self.statuses(), strict=True)
        ):
            row: dict[str, Any] = {"trial": i, **point}
            row["state"] = status.state.name if status else NOT_SUBMITTED
            codes = [r.exit_code for rs in (status.roles if status else []) for r in rs.replicas]
            row["exit_code"] = next((c for c in codes if c), codes[0] if codes else None)
            row["result"] = None
            row["error"] = None
            if handle and status is not None and is_terminal(status.state):
                try:
                    if status.state == AppState.SUCCEEDED:
                        row["result"] = self.runner.result(handle, status)
                    else:
                        row["error"] = self.runner.result_repr(handle)
                except Exception as e:
                    row["error"] = one_line(e)
            for name, value in self._last_metrics(handle).items():
                row[name] = value
            row["handle"] = handle
            rows.append(row)
        frame = pd.DataFrame(rows)
        for column in ("result", "error"):  # values as they are: no int turned float by a None
            frame[column] = pd.Series([r[column] for r in rows], dtype=object)
        return frame

    def _last_metrics(self, handle: str | None) -> dict[str, float | None]:
        if not self.metric_specs:
            return {}
        log = MetricLog(self.metric_specs)
        if handle:
            try:
                app = self.runner.describe(handle)
                role = app.roles[0].name if app and app.roles else None
                if role:
                    log.feed_all(self.runner.log_lines(handle, role, 0))
            except Exception:
                pass  # a trial whose log cannot be read has no metric values
        series = log.series()
        return {
            m.name: (series[m.name][-1][1] if series.get(m.name) else None)
            for m in self.metric_specs
        }

    def best(self, metric: str, mode: str = "min") -> pd.Series:
        """The row of ``results()`` with the lowest (``mode="min"``) or highest (``"max"``)
        ``metric``: a column (a ``--metric``), or a key of the trials' dict results."""
        if mode not in ("min", "max"):
            raise TorchxNbError(f"best: mode is 'min' or 'max', not {mode!r}")
        frame = self.results()
        if metric in frame.columns and metric not in ("result", "state", "handle"):
            values = frame[metric]
        else:
            values = frame["result"].map(
                lambda r: r.get(metric) if isinstance(r, Mapping) else None
            )
        values = values.map(lambda v: v if isinstance(v, (int, float)) and v == v else None)
        if values.isna().all():
            raise TorchxNbError(
                f"best: no trial has a value for {metric!r} (a --metric name, or a key of the"
                " trials' dict results)"
            )
        index = values.astype(float).idxmin() if mode == "min" else values.astype(float).idxmax()
        return frame.loc[index]

    @classmethod
    def attach(cls, runner: Runner, sweep_id: str) -> Sweep:
        """A sweep found again in the job store (after a kernel restart, from another
        process): its trials, in grid order."""
        records = runner.jobstore.trials(sweep_id)
        if not records:
            raise TorchxNbError(
                f"no sweep {sweep_id!r} in the job store (see %torchx list, or torchx-nb list)"
            )
        size = max(r.trial or 0 for r in records) + 1
        points: list[dict[str, Value]] = [{} for _ in range(size)]
        handles: list[str | None] = [None] * size
        for r in records:
            i = r.trial or 0
            points[i] = json.loads(r.params or "{}")
            handles[i] = r.handle
        return cls(runner, sweep_id, points, handles, scheduler=records[0].scheduler)
