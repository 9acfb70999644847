"""One widget for a sweep: a summary, Cancel all, a table with a row per trial (parameters,
state, elapsed, the last value of each metric, the result) kept current by the kernel's
poller, one chart per metric with a line per trial, and the log of the trial picked in the
list. When every trial has ended it becomes a static snapshot (summary, table, charts).

The view's callbacks run on the process's one refresher thread, which every watcher shares:
they only record what they were told and render. What may be slow runs elsewhere (a trial's
result, read from its output store, on the process's small pool of ``widget_base``; the final
snapshot on a thread of its own), and the end is noticed once, under the view's lock,
whichever thread sees it first."""

from __future__ import annotations

import contextlib
import html
import threading
import time
from typing import Any

from torchx_nb.errors import one_line
from torchx_nb.metrics import MetricLog
from torchx_nb.notebook import render
from torchx_nb.notebook.charts import line_chart
from torchx_nb.notebook.log_widget import LogReader, LogWidget
from torchx_nb.notebook.widget_base import (
    MIN_REFRESH_S,
    close_tree,
    display_with_text,
    in_background,
)
from torchx_nb.specs.api import AppState, AppStatus, is_terminal
from torchx_nb.specs.log_line import LogLine
from torchx_nb.sweeps import TrialsNotCancelled, sweep_rows, sweep_summary, sweep_text


class SweepView:
    """The live view of a ``Sweep`` (see the module's docstring)."""

    def __init__(self, sweep: Any, runner: Any, poller: Any, log_lines: int = 1000) -> None:
        import ipywidgets as w

        self.sweep = sweep
        self.runner = runner
        self.poller = poller
        self.log_lines = log_lines
        n = len(sweep.points)
        self.statuses: list[AppStatus | None] = [None] * n
        self.results: list[str | None] = [None] * n
        self.metrics = [MetricLog(sweep.metric_specs) for _ in range(n)]
        self._readers: dict[int, LogReader] = {}
        self._watches: dict[str, int] = {}
        self._submitted = time.time()
        self._ended_at: list[float | None] = [None] * n
        self._lock = threading.RLock()
        self._dirty = False
        self._last = 0.0
        self.ended = threading.Event()
        self.snapshotted = threading.Event()
        self._display: Any = None
        self.logs: LogWidget | None = None
        self._fetches: list[Any] = []  # results being read, off the refresher's thread

        self._summary = w.HTML()
        self._cancel = w.Button(
            description="Cancel all",
            icon="stop",
            button_style="warning",
            layout=w.Layout(width="auto"),
        )
        self._cancel.on_click(self._on_cancel)
        self._table = w.HTML()
        self._charts = w.HTML()
        self._picker = w.Select(
            options=self._options(), rows=min(n, 8), layout=w.Layout(width="100%")
        )
        self._picker.add_class("torchx-nb-sweep-trials")
        self._picker.observe(self._on_pick, names="value")
        self._log_box = w.VBox()
        top = w.HBox([self._summary, self._cancel], layout=w.Layout(align_items="center"))
        self.widget = w.VBox(
            [
                top,
                self._table,
                self._charts,
                w.HTML("<small>pick a trial to see its log:</small>"),
                self._picker,
                self._log_box,
            ]
        )
        self.widget.add_class("torchx-nb-sweep-view")
        self._render()
        self._watch_new()
        # the view's clock rides on the process's one refresher thread (no thread of its own)
        self._clock: int | None = self.poller.every(1.0, self._tick)

    # ---- watching -------------------------------------------------------------------

    def _watch_new(self) -> None:
        """Watch every trial submitted so far (the driver adds handles as slots free up)."""
        for i, handle in enumerate(self.sweep.handles):
            if handle and handle not in self._watches:
                self._watches[handle] = self.poller.watch(
                    handle, lambda s, e, i=i: self._on_status(i, s, e), runner=self.runner
                )

    def _tick(self) -> None:
        """Every second until the snapshot: new trials watched, the clocks and any render
        held back by the refresh limit shown, and the end noticed once the driver is done."""
        if self.snapshotted.is_set():
            self.poller.stop_clock(self._clock)
            return
        with contextlib.suppress(Exception):
            self._watch_new()
            if self._dirty or not all(self._ended_at):
                self._render()
            self._check_end()

    def _on_status(self, i: int, status: AppStatus | None, error: BaseException | None) -> None:
        if error is not None:
            return
        with self._lock:
            self.statuses[i] = status
            # a trial that ended between two polls was never seen running: its log is
            # still read (to its end), so its chart line is not missing
            if status is not None and (
                status.state == AppState.RUNNING or is_terminal(status.state)
            ):
                self._start_metrics(i)
            if (status is None or is_terminal(status.state)) and self._ended_at[i] is None:
                self._ended_at[i] = status.ended if status and status.ended else time.time()
                self._fetches.append(in_background(self._fetch_result, i))
        self._request_render()
        self._check_end()

    def _start_metrics(self, i: int) -> None:
        if not self.sweep.metric_specs or i in self._readers:
            return
        handle = self.sweep.handles[i]
        log = self.metrics[i]

        def read(reader: LogReader) -> None:
            with contextlib.suppress(Exception):
                app = self.runner.describe(handle)
                role = app.roles[0].name if app and app.roles else "cell"
                for line in self.runner.log_lines(handle, role, 0, should_tail=True):
                    if reader.stopped:
                        return
                    log.feed(line, LogLine.time_of(line) or time.time())
                    self._request_render()

        self._readers[i] = LogReader(read)

    def _fetch_result(self, i: int) -> None:
        handle = self.sweep.handles[i]
        if not handle:
            return
        with contextlib.suppress(Exception):
            result = self.runner.result_repr(handle)
            self.results[i] = result
            if result is not None:
                self._request_render()

    def _check_end(self) -> None:
        """Notice the end once (the refresher's callbacks, its clock and ``settle`` may see it
        at the same moment): the snapshot is made on a thread of its own."""
        with self._lock:
            if self.ended.is_set() or self.sweep.submitting:
                return
            states = self._states()
            if any(s in ("SUBMITTED", "PENDING", "RUNNING") for s in states) or any(
                h is not None and self.statuses[i] is None for i, h in enumerate(self.sweep.handles)
            ):
                return
            self.ended.set()
            shown = self._display is not None
        if shown:
            threading.Thread(target=self._snapshot, daemon=True, name="torchx-nb-snapshot").start()

    # ---- rendering ------------------------------------------------------------------

    def _states(self) -> list[str]:
        return [r[2] for r in sweep_rows(self.sweep.points, self.sweep.handles, self.statuses)]

    def _options(self) -> list[tuple[str, int]]:
        states = self._states() if hasattr(self, "statuses") else []
        out = []
        for i, point in enumerate(self.sweep.points):
            params = " ".join(f"{k}={v}" for k, v in point.items())
            state = states[i] if states else ""
            out.append((f"{i:>3}  {params}  {state}", i))
        return out

    def _extra(self) -> list[dict[str, str]]:
        now = time.time()
        rows = []
        for i, status in enumerate(self.statuses):
            row: dict[str, str] = {}
            started = self._submitted
            end = self._ended_at[i]
            row["elapsed"] = render.fmt_elapsed((end or now) - started) if status else ""
            series = self.metrics[i].series()
            for spec in self.sweep.metric_specs:
                points = series.get(spec.name) or []
                row[spec.name] = f"{points[-1][1]:.4g}" if points else ""
            result = self.results[i]
            row["result"] = render.result_line(result).removeprefix("result: ") if result else ""
            rows.append(row)
        return rows

    def _charts_html(self) -> str:
        charts = []
        for spec in self.sweep.metric_specs:
            series = {}
            for i, (point, log) in enumerate(zip(self.sweep.points, self.metrics, strict=True)):
                label = f"{i}: " + ", ".join(f"{k}={v}" for k, v in point.items())
                series[label] = [(float(x), y) for x, y in log.series().get(spec.name, [])]
            charts.append(
                f'<div class="torchx-nb-metric" data-metric="{spec.name}"'
                ' style="display:inline-block;margin-right:16px;vertical-align:top">'
                f"<small><b>{spec.name}</b></small><br>"
                f"{line_chart(series, spec.name, 'step', legend=True)}</div>"
            )
        return "".join(charts)

    def _summary_html(self) -> str:
        how = "one native array job" if self.sweep.array else "one job per trial"
        note = (
            " · <span style='color:#cf222e'>"
            + html.escape(self.sweep.error).replace("\n", "<br>")
            + "</span>"
            if self.sweep.error
            else ""
        )
        return (
            f"<code>{self.sweep.id}</code> {len(self.sweep.points)} trials on"
            f" {self.sweep.scheduler} ({how}):"
            f" <b>{sweep_summary(self._states(), self.sweep.stopped)}</b>{note}"
        )

    def html(self) -> str:
        """The whole sweep as static HTML (the snapshot)."""
        return (
            '<div class="torchx-nb-snapshot torchx-nb-sweep-snapshot" style="line-height:1.4">'
            f"{self._summary_html()}<br>"
            f"{render.sweep_table_html(self.sweep.points, self.sweep.handles, self.statuses, self._extra())}"
            f"{self._charts_html()}</div>"
        )

    def text(self) -> str:
        sw = self.sweep
        return sweep_text(sw.id, sw.points, sw.handles, self.statuses, sw.array, sw.stopped)

    def _request_render(self) -> None:
        now = time.monotonic()
        if now - self._last < MIN_REFRESH_S:
            self._dirty = True
            return
        self._last = now
        self._render()

    def _render(self) -> None:
        with self._lock:
            self._dirty = False
            self._summary.value = self._summary_html()
            self._table.value = render.sweep_table_html(
                self.sweep.points, self.sweep.handles, self.statuses, self._extra()
            )
            if self.sweep.metric_specs:
                self._charts.value = self._charts_html()
            picked = self._picker.value
            options = self._options()
            if [o[0] for o in options] != [o[0] for o in self._picker.options]:
                self._picker.options = options
                self._picker.value = picked
            if self.ended.is_set() or all(self._ended_at):
                self._cancel.layout.display = "none"

    # ---- actions --------------------------------------------------------------------

    def _on_pick(self, change: dict[str, Any]) -> None:
        i = change.get("new")
        if i is None:
            return
        handle = self.sweep.handles[i]
        if self.logs is not None:
            self.logs.close()
            self.logs = None
        if not handle:
            import ipywidgets as w

            self._log_box.children = [w.HTML(f"<small>trial {i} is not submitted yet</small>")]
            return
        self.logs = LogWidget(handle, self.runner, max_lines=self.log_lines)
        status = self.statuses[i]
        if status is not None:
            self.logs.status_changed(status)
            if is_terminal(status.state):
                self.logs.job_ended(status)
        self._log_box.children = [self.logs.widget]

    def _on_cancel(self, _button: Any) -> None:
        self._cancel.disabled = True
        self._cancel.description = "cancelling…"

        def cancel() -> None:
            try:
                self.sweep.cancel()
            except Exception as e:
                self.sweep.error = (  # a trial whose cancel failed: one line each
                    str(e) if isinstance(e, TrialsNotCancelled) else f"cancel failed: {one_line(e)}"
                )
                self._cancel.disabled = False
                self._cancel.description = "Cancel all"
            self._render()

        threading.Thread(target=cancel, daemon=True).start()

    # ---- lifecycle ------------------------------------------------------------------

    def show(self) -> None:
        """Display the view (the snapshot replaces it by its display id, as ``JobView``'s)."""
        with self._lock:  # an end noticed before this has no snapshot yet: this makes it
            self._display = display_with_text(self.widget, self.text())
            ended = self.ended.is_set()
        if ended:
            self._snapshot()

    def settle(self, statuses: list[AppStatus | None]) -> None:
        """Bring the view to ``statuses`` (from ``Sweep.wait``) and wait for the snapshot."""
        for i, status in enumerate(statuses):
            self._on_status(i, status, None)
        self._check_end()
        if self.ended.is_set():
            self.snapshotted.wait(15)

    def _snapshot(self) -> None:
        """At once the final states, then, once every log and result is read, the snapshot
        with every result and metric."""
        try:
            with contextlib.suppress(Exception):
                self._write_snapshot()
            for reader in self._readers.values():
                reader.thread.join(5)
                reader.stop()
            for fetch in list(self._fetches):
                with contextlib.suppress(Exception):
                    fetch.result(timeout=60)
            for i in range(len(self.results)):
                if self.results[i] is None:
                    self._fetch_result(i)
            self._write_snapshot()
            self.close()
            close_tree(self.widget)
        finally:
            self.snapshotted.set()

    def _write_snapshot(self) -> None:
        self._display.update({"text/html": self.html(), "text/plain": self.text()}, raw=True)

    def close(self) -> None:
        self.poller.stop_clock(self._clock)
        for watch in self._watches.values():
            self.poller.unwatch(watch)
        for reader in self._readers.values():
            reader.stop()
        for fetch in self._fetches:
            fetch.cancel()
        if self.logs is not None:
            self.logs.close()
