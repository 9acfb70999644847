"""Live widgets for a job, and the static snapshot that replaces them when it ends.

``JobView`` shows a status widget (handle, state badge, a labelled elapsed clock, Cancel, a
roles-by-replicas table, live metric charts) fed by the kernel's poller, and a log widget that
tails one replica (``log_widget``; what every widget shares is in ``widget_base``). When the
job ends both outputs are replaced by plain HTML (final state,
replica table, charts, the last log lines), so a saved notebook reopened without its kernel,
on GitHub or nbviewer still shows the job instead of "model not found".

Background threads only change trait values or update display outputs (never print into an
Output widget from a thread: ipykernel 7 drops such output); the log view refreshes at most 10
times a second; ipywidgets is imported when a widget is built, never when this module is."""

from __future__ import annotations

import contextlib
import html
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from torchx_nb.errors import one_line
from torchx_nb.metrics import MetricLog
from torchx_nb.notebook import render
from torchx_nb.notebook.log_widget import LogReader, LogWidget
from torchx_nb.notebook.widget_base import (
    MIN_REFRESH_S,
    close_tree,
    display_with_text,
    widgets_enabled,
)
from torchx_nb.redact import redact_text
from torchx_nb.specs.api import AppState, AppStatus, is_terminal
from torchx_nb.specs.failure import FailureCard


def known_status(runner: Any, handle: str) -> AppStatus | None:
    """What is known of a job at once, for ``%torchx watch``: an ended job's final status (one
    describe: its replicas and failure cards, for the snapshot; the job store's state where
    its scheduler no longer knows it), a live job's last state and message in the job store,
    or, for a job this kernel has just submitted and nothing has seen since, its submitted
    status. Never SUBMITTED for a job known to be further on."""
    record = runner.jobstore.get(handle)
    mine = runner.submitted_status(handle)
    if record is None or (record.state in ("SUBMITTED", "UNKNOWN") and mine is not None):
        return mine
    stored = AppStatus(
        AppState[record.state] if record.state in AppState.__members__ else AppState.UNKNOWN,
        msg=record.msg or "",
        started=record.started,
        ended=record.ended,
    )
    if record.is_terminal:
        with contextlib.suppress(Exception):
            status = runner.status(handle)
            if status is not None and is_terminal(status.state):
                return status
    return stored


class StatusWidget:
    """Handle, state badge, elapsed clock, Cancel, message, UI link, roles-by-replicas table and
    metric charts, kept current by the kernel's poller (the clock ticks every second)."""

    def __init__(
        self,
        handle: str,
        runner: Any,
        poller: Any,
        status: AppStatus | None = None,
        metrics: MetricLog | None = None,
        on_end: Callable[[AppStatus | None], None] | None = None,
        on_change: Callable[[AppStatus], None] | None = None,
    ) -> None:
        import ipywidgets as w

        self.handle = handle
        self._on_change = on_change
        self.runner = runner
        self.metrics = metrics
        self.update_count = 0
        self.status = status
        self._on_end = on_end
        self._error: str | None = None
        self._seen_end: float | None = None
        self._unknown_since: float | None = None  # its clock stops while nothing knows it
        self._metrics_version = -1
        self.result: str | None = None  # the short repr of the cell's value, once ended
        self.failures: list[FailureCard] = []  # once it failed: a card per failing replica
        self.phases = ""  # once it ended: "built 0:12 · queued 0:03 · ran 1:20"
        self.notice = ""  # a job-end notice not delivered yet: why, in one line
        self.chip = (
            ""  # a job that ran more than once: "preempted x2 · attempt 3" (with a times sign)
        )
        self.attempts: list[str] = []  # then its attempts and a line per preemption
        self._lock = threading.RLock()
        record = runner.jobstore.get(handle)
        self.submitted = record.submitted if record else time.time()
        self._header = w.HTML(value=self._header_html())
        self._cancel = w.Button(
            description="Cancel", icon="stop", button_style="warning", layout=w.Layout(width="auto")
        )
        self._cancel.on_click(self._on_cancel)
        self._body = w.HTML(value=self._body_html())
        self._chart = w.HTML(value="")
        top = w.HBox([self._header, self._cancel], layout=w.Layout(align_items="center"))
        self.widget = w.VBox([top, self._body, self._chart])
        if status is not None and is_terminal(status.state):
            self._finish()
        else:
            self._watch_id = poller.watch(handle, self._on_status, tick=self._tick, runner=runner)

    @property
    def state(self) -> AppState | None:
        return self.status.state if self.status else None

    def seconds(self) -> float:
        return render.elapsed(self.submitted, self.status, self._seen_end or self._unknown_since)

    def text(self) -> str:
        text = render.status_text(self.handle, self.status, self.seconds(), self.failures)
        if self.chip:  # beside the state, on the first line
            head, sep, rest = text.partition("\n")
            text = f"{head} [{self.chip}]{sep}{rest}"
        if self.attempts:
            text += "".join(f"\n  {line}" for line in self.attempts)
        if self.phases:
            text += f"\n  {self.phases}"
        if self.result is not None and not self.failures:
            text += f"\n  {render.result_line(self.result)}"
        if self.metrics:
            text += "\n" + render.metrics_text(self.metrics.series())
        if self.notice:
            text += f"\n  {self.notice}"
        return text

    def html(self) -> str:
        """The whole status as static HTML (the snapshot)."""
        charts = render.metrics_svg(self.metrics.series()) if self.metrics else ""
        chip = render.chip_html(self.chip)
        return (
            '<div class="torchx-nb-snapshot" style="line-height:1.4">'
            f"{render.status_html(self.handle, self.status, self.seconds(), chip, self.failures)}"
            f"{render.attempts_html(self.attempts)}{render.phases_html(self.phases)}"
            f"{'' if self.failures else render.result_html(self.result)}"
            f"{'<br>' + charts if charts else ''}{render.notice_html(self.notice)}</div>"
        )

    def _header_html(self) -> str:
        note = ""
        if self._error:
            note = (
                f' <small style="color:#9a6700">reconnecting… ({html.escape(self._error)})</small>'
            )
        chip = render.chip_html(self.chip)
        return render.status_header_html(self.handle, self.status, self.seconds(), chip + note)

    def _body_html(self) -> str:
        return render.status_details_html(self.status) + render.attempts_html(self.attempts)

    def read_attempts(self) -> None:
        """The chip and the attempts' lines of a job that ran more than once, from the job
        store (and its checkpoint ledger: where each attempt resumed from)."""
        with contextlib.suppress(Exception):  # the store is a convenience: the status stands
            record = self.runner.jobstore.get(self.handle)
            if record is None or (record.attempt < 2 and not record.preemptions):
                return
            self.chip = render.attempt_chip(record.attempt, record.preemptions)
            self.attempts = self.runner.attempt_lines(self.handle)

    def _tick(self) -> None:
        self._header.value = self._header_html()
        self.render_metrics()

    def render_metrics(self) -> None:
        if self.metrics and self.metrics.version != self._metrics_version:
            self._metrics_version = self.metrics.version
            self._chart.value = render.metrics_svg(self.metrics.series())

    def settle(self, status: AppStatus) -> None:
        """Show ``status``, a final status the caller already has, without waiting for the
        poller's next round."""
        self._on_status(status, None)

    def _on_status(self, status: AppStatus | None, error: BaseException | None) -> None:
        with self._lock:
            if self._seen_end is None:
                self._show_status(status, error)

    def _show_status(self, status: AppStatus | None, error: BaseException | None) -> None:
        if error is not None:
            try:
                said = f"{type(error).__name__}: {error}"
            except Exception:  # an exception whose __str__ raises is still an error to show
                said = f"{type(error).__name__} (its message cannot be read)"
            self._error = redact_text(said)[:200]
            self._header.value = self._header_html()
            return
        self._error = None
        if status is not None:
            unknown = status.state == AppState.UNKNOWN
            if unknown and self._unknown_since is None:
                self._unknown_since = time.time()
            elif not unknown:
                self._unknown_since = None
            self.status = status
            self.read_attempts()
            if self._on_change is not None:
                self._on_change(status)
        if status is None or is_terminal(status.state):
            # the end is written into the cell's output before the badge shows it: a notebook
            # saved once its user sees the end holds the snapshot, not the live widgets
            self._finish()
        self._header.value = self._header_html()
        self._body.value = self._body_html()
        self.update_count += 1

    def _finish(self) -> None:
        if self._seen_end is not None:
            return
        self._seen_end = time.time()
        self._cancel.disabled = True
        self._cancel.layout.display = "none"
        self.render_metrics()
        if self._on_end is not None:
            self._on_end(self.status)

    def _on_cancel(self, _button: Any) -> None:
        self._cancel.disabled = True
        self._cancel.description = "cancelling…"
        threading.Thread(target=self._cancel_job, daemon=True).start()

    def _cancel_job(self) -> None:
        try:
            self.runner.cancel(self.handle)
        except Exception as e:
            self._error = f"cancel failed: {one_line(e)}"[:200]
            self._cancel.disabled = False
            self._cancel.description = "Cancel"
            self._header.value = self._header_html()


# every JobView shown in this kernel, by handle: ``wait()`` settles them all, so a job watched
# in two cells (``%torchx watch`` and ``job.watch()``) shows its end in both before it returns
_SHOWN: dict[str, weakref.WeakSet[JobView]] = {}
_SHOWN_LOCK = threading.Lock()


def shown_views(handle: str) -> list[JobView]:
    """The views of ``handle`` shown in this kernel and still alive."""
    with _SHOWN_LOCK:
        return list(_SHOWN.get(handle, ()))


class JobView:
    """A submitted job in a cell: the status widget, the log widget (optional), a metrics reader
    when metrics are asked for, and the static snapshot that replaces them when the job ends."""

    def __init__(
        self,
        handle: str,
        runner: Any,
        poller: Any,
        metrics: MetricLog | None = None,
        log_lines: int = 1000,
        show_logs: bool = True,
        first: AppStatus | None = None,
    ) -> None:
        self.handle = handle
        self.runner = runner
        self.metrics = metrics if metrics else None
        self.ended = threading.Event()
        self.snapshotted = threading.Event()
        self._display: Any = None
        self._log_display: Any = None
        self._metrics_reader: LogReader | None = None
        self.logs: LogWidget | None = None
        # as submitted (no scheduler call), or what is known of a job watched again
        # (``known_status``): the poller asks for the status at once
        if first is None:
            first = runner.submitted_status(handle)
        if show_logs:
            self.logs = LogWidget(handle, runner, max_lines=log_lines)
        if self.metrics is not None:
            self._start_metrics(first)
        self.status = StatusWidget(
            handle, runner, poller, first, self.metrics, self._on_end, self._on_change
        )
        runner.follow_notice(handle, self._notice_trouble)

    def show(self) -> None:
        """Display the widgets (each with a text fallback). The snapshot, written later from
        another thread, updates these outputs by their display id; it goes with the kernel's
        current request as its parent (the one running, not this cell's: nbclient and
        papermill take only the running cell's messages, JupyterLab follows the display id)."""
        self._display = display_with_text(self.status.widget, self.status.text())
        with _SHOWN_LOCK:
            _SHOWN.setdefault(self.handle, weakref.WeakSet()).add(self)
        if self.logs is not None:
            self._log_display = display_with_text(
                self.logs.widget, f"logs of {self.handle}: %torchx log {self.handle}"
            )
        if self.ended.is_set():
            self._snapshot()

    def _start_metrics(self, status: AppStatus | None) -> None:
        if status is None or not status.roles or not status.roles[0].replicas:
            return
        role = status.roles[0].role
        metrics = self.metrics
        assert metrics is not None

        def read(reader: LogReader) -> None:
            with contextlib.suppress(Exception):
                for line in self.runner.log_lines(self.handle, role, 0, should_tail=True):
                    if reader.stopped:
                        return
                    metrics.feed(line, time.time())

        self._metrics_reader = LogReader(read)

    def _on_change(self, status: AppStatus) -> None:
        if self.logs is not None:
            self.logs.status_changed(status)
        if self.metrics is not None and self._metrics_reader is None:
            self._start_metrics(status)

    def _on_end(self, status: AppStatus | None) -> None:
        if self.ended.is_set():
            return
        self.ended.set()
        if self.logs is not None:
            self.logs.job_ended(status)
        if self._display is not None:
            # at once what is known (the final state, the lines read so far), then the full
            # snapshot once the readers have read the end and the result is loaded
            with contextlib.suppress(Exception):
                self._write_snapshot()
            threading.Thread(target=self._snapshot, daemon=True, name="torchx-nb-snapshot").start()

    def _notice_trouble(self, line: str) -> None:
        """The job-end notice is not delivered yet: one line in this cell's snapshot (made
        again if it is already shown)."""
        self.status.notice = line
        if self.snapshotted.is_set() and self._display is not None:
            bundle = {"text/html": self.status.html(), "text/plain": self.status.text()}
            self._display.update(bundle, raw=True)

    def settle(self, status: AppStatus, timeout: float = 10.0) -> None:
        """Bring the widgets to ``status`` (a final status from ``wait()``) and wait until the
        snapshot replaced them, so the cell's output is final once ``wait()`` returns."""
        if self._display is None:
            return
        self.status.settle(status)
        self.snapshotted.wait(timeout)

    def _snapshot(self) -> None:
        """Replace the widgets with static HTML once the readers have read the job's end."""
        try:
            self._replace_with_snapshot()
        finally:
            self.snapshotted.set()

    def _replace_with_snapshot(self) -> None:
        if self._metrics_reader is not None:
            self._metrics_reader.thread.join(5)
            self._metrics_reader.stop()
            self.status.render_metrics()
        if self.logs is not None:
            self.logs.wait_reader(5)
        with contextlib.suppress(Exception):  # an unreachable store leaves the line out
            self.status.result = self.runner.result_repr(self.handle)
        with contextlib.suppress(Exception):
            self.status.failures = self.runner.failure_cards(self.handle, self.status.status)
        self.status.read_attempts()
        with contextlib.suppress(Exception):
            from torchx_nb.phases import phases_line

            store = self.runner.jobstore
            record = store.get(self.handle)
            tries = store.attempts(self.handle) if record and record.attempt > 1 else []
            self.status.phases = phases_line(record, attempts=tries) if record else ""
        self._write_snapshot()
        if self.logs is not None and self._log_display is not None:
            self.logs.close()
        close_tree(self.status.widget)

    def _write_snapshot(self) -> None:
        """Replace the widgets' outputs with static HTML of what is known now: the log's first,
        so by the time the status shows the end (a user may save then) both are replaced."""
        if self.logs is not None and self._log_display is not None:
            self._log_display.update(
                {"text/html": self.logs.html(), "text/plain": self.logs.text()}, raw=True
            )
        status_bundle = {"text/html": self.status.html(), "text/plain": self.status.text()}
        self._display.update(status_bundle, raw=True)

    def close(self) -> None:
        if self._metrics_reader is not None:
            self._metrics_reader.stop()
        if self.logs is not None:
            self.logs.close()


class ProgressBar:
    """Image build/push progress as an ipywidgets progress bar, shown on the first report;
    ``progress(done, total, what)`` like ``TextProgress`` (at most 10 redraws a second). Not
    tqdm's notebook bar: that one has no text fallback, so a headless run or a saved notebook
    shows "Error displaying widget" where this one says what was pushed."""

    def __init__(
        self,
        doing: str = "pushing",
        done: str = "pushed",
        what: str = "the image",
        parts: str = "parts",
    ) -> None:
        self._bar: Any = None
        self._label: Any = None
        self._last = 0.0
        self._parts: dict[str, tuple[int, int]] = {}
        self._words = (doing, done, what, parts)

    def __call__(self, done: int, total: int, what: str) -> None:
        import ipywidgets as w

        self._parts[what] = (done, total)
        if self._bar is None:
            doing, _, target, _ = self._words
            self._bar = w.FloatProgress(
                value=0.0, min=0.0, max=1.0, description=doing, bar_style="info"
            )
            self._label = w.Label()
            box = w.HBox([self._bar, self._label])
            box.add_class("torchx-nb-progress")
            display_with_text(box, f"{doing} {target}…")
        now = time.monotonic()
        if done < total and now - self._last < MIN_REFRESH_S:
            return
        self._last = now
        done = sum(d for d, _ in self._parts.values())
        total = sum(t for _, t in self._parts.values())
        self._bar.value = done / total if total else 1.0
        self._label.value = f"{what[:28]} {done / 1e6:.1f}/{total / 1e6:.1f} MB"

    def close(self) -> None:
        if self._bar is None:
            return
        self._bar.value = 1.0
        self._bar.bar_style = "success"
        self._bar.description = self._words[1]
        total = sum(t for _, t in self._parts.values())
        self._label.value = f"{total / 1e6:.1f} MB in {len(self._parts)} {self._words[3]}"


__all__ = ["JobView", "LogWidget", "ProgressBar", "StatusWidget", "widgets_enabled"]
