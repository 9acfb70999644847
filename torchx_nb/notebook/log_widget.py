"""The log widget: one replica's log followed live (each line masked), at most 10 redraws a
second, a download of the whole log, and the last lines as plain HTML or text when the job
ends (the snapshot a saved notebook keeps)."""

from __future__ import annotations

import base64
import contextlib
import html
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from torchx_nb.errors import one_line
from torchx_nb.notebook import render
from torchx_nb.notebook.widget_base import MIN_REFRESH_S, close_tree
from torchx_nb.redact import LineMasker
from torchx_nb.specs.api import AppState, AppStatus

DOWNLOAD_CAP_BYTES = 20 * 1024 * 1024
SNAPSHOT_LINES = 40
READER_THREAD = "torchx-nb-log"


class LogReader:
    """One daemon thread following one log, stoppable from any thread (``TailStop``)."""

    def __init__(self, target: Callable[[LogReader], None]) -> None:
        from torchx_nb.logtail import TailStop

        self.tail = TailStop()

        def run() -> None:
            with self.tail:
                target(self)

        self.thread = threading.Thread(target=run, daemon=True, name=READER_THREAD)
        self.thread.start()

    def stop(self) -> None:
        self.tail.stop()

    @property
    def stopped(self) -> bool:
        return self.tail.stopped


class LogWidget:
    """The last ``max_lines`` lines of one replica's log, newest at the bottom and followed
    unless the user scrolls up, with replica, stream and regex selectors; the full log is
    spooled to a file on disk and offered as a download."""

    def __init__(self, handle: str, runner: Any, max_lines: int = 1000) -> None:
        import ipywidgets as w

        self.handle = handle
        self.runner = runner
        self.max_lines = max_lines
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.update_count = 0
        self.spool_path: str | None = None
        self.note = ""
        self._reader: LogReader | None = None
        self._lock = threading.Lock()
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._last_render = 0.0
        self._pattern: Any = None
        self._closed = False
        self._ended: AppState | None = None
        replicas = self._replicas()
        self._replica = w.Dropdown(
            options=replicas,
            value=replicas[0] if replicas else None,
            description="replica",
            layout=w.Layout(width="220px"),
        )
        self._stream = w.Dropdown(
            options=["combined", "stdout", "stderr"],
            value="combined",
            description="stream",
            layout=w.Layout(width="200px"),
        )
        self._filter = w.Text(placeholder="regex filter", layout=w.Layout(width="220px"))
        self._filter_error = w.HTML()
        self._download = w.Button(
            description="full log", icon="download", layout=w.Layout(width="auto")
        )
        self._link = w.HTML()
        # column-reverse keeps the view at the bottom as lines arrive, and where it is once the
        # user scrolls up: the browser follows the tail with no script.
        self._view = w.HTML(
            value=self._view_html([]),
            layout=w.Layout(
                max_height="320px", overflow="auto", display="flex", flex_flow="column-reverse"
            ),
        )
        self._view.add_class("torchx-nb-logview")
        self._replica.observe(lambda _c: self._restart(), names="value")
        self._stream.observe(lambda _c: self._restart(), names="value")
        self._filter.observe(self._on_filter, names="value")
        self._download.on_click(self._on_download)
        controls = w.HBox(
            [
                self._replica,
                self._stream,
                self._filter,
                self._download,
                self._filter_error,
                self._link,
            ]
        )
        self.widget = w.VBox([controls, self._view])
        self._restart()

    @property
    def replica(self) -> str:
        return str(self._replica.value or "")

    def reader_alive(self) -> bool:
        return self._reader is not None and self._reader.thread.is_alive()

    def _replicas(self, status: AppStatus | None = None) -> list[str]:
        if status is None:
            try:
                status = self.runner.submitted_status(self.handle) or self.runner.status(
                    self.handle
                )
            except Exception:
                return []
        if status is None:
            return []
        return [f"{rs.role}/{r.id}" for rs in status.roles for r in rs.replicas]

    def status_changed(self, status: AppStatus) -> None:
        """Fill the replica selector once the scheduler names the replicas (it may not at
        submission, or may have been unreachable then)."""
        if self._replica.options or self._closed:
            return
        replicas = self._replicas(status)
        if replicas:
            self._replica.options = replicas
            self._replica.value = replicas[0]

    def select(self, replica: str | None = None, stream: str | None = None) -> None:
        """Switch replica and/or stream (as the dropdowns do)."""
        if replica is not None:
            self._replica.value = replica
        if stream is not None:
            self._stream.value = stream

    def _restart(self) -> None:
        """Stop the current reader and tail the selected replica and stream into a new spool."""
        from torchx_nb.specs.log_line import Stream

        with self._lock:
            old_reader, self._reader = self._reader, None
            self.lines.clear()
            fd, path = tempfile.mkstemp(prefix="torchx-nb-log-", suffix=".log")
            os.close(fd)
            old, self.spool_path = self.spool_path, path
        if old_reader is not None:
            old_reader.stop()
        if old:
            with contextlib.suppress(OSError):
                os.unlink(old)
        if self._closed or not self._replica.value:
            self._request_render()
            return
        role, _, k = str(self._replica.value).rpartition("/")
        stream = Stream(self._stream.value)
        reader = LogReader(lambda r: self._tail(r, role, int(k), stream, path))
        with self._lock:
            self._reader = reader
        self._request_render()

    def _tail(self, reader: LogReader, role: str, k: int, stream: Any, path: str) -> None:
        try:
            with open(path, "a", encoding="utf-8") as spool:
                mask = LineMasker()
                for raw in self.runner.log_lines(
                    self.handle, role, k, should_tail=True, streams=stream
                ):
                    if reader.stopped:
                        return
                    line = mask(raw)
                    spool.write(line)
                    with self._lock:
                        self.lines.append(line.rstrip("\n"))
                    self._request_render()
                spool.flush()
        except Exception as e:
            if not reader.stopped:
                with self._lock:
                    self.lines.append(f"[torchx_nb: log unavailable: {one_line(e)}]")
        self._request_render()

    def job_ended(self, status: AppStatus | None) -> None:
        """The job ended: say so under the log when it was cancelled or failed."""
        self._ended = status.state if status is not None else AppState.UNKNOWN
        self._request_render()

    def wait_reader(self, timeout: float) -> None:
        """Give the reader up to ``timeout`` seconds to read the last lines of an ended job."""
        reader = self._reader
        if reader is not None:
            reader.thread.join(timeout)

    def visible_lines(self) -> list[str]:
        with self._lock:
            lines = list(self.lines)
        if self._pattern is not None:
            lines = [ln for ln in lines if self._pattern.search(ln)]
        return lines

    def _placeholder(self, has_lines: bool) -> str:
        if self._ended in (AppState.CANCELLED, AppState.FAILED):
            return f"— job {self._ended.name} —"
        if has_lines:
            return ""
        if self._ended is not None:
            return "(the job wrote no output)"
        if not self._replica.value:
            return "(no replica to show)"
        return "(no output yet)"

    def _view_html(self, lines: list[str]) -> str:
        note = self._placeholder(bool(lines))
        self.note = note
        text = html.escape("\n".join(lines))
        if note:
            sep = "\n" if lines else ""
            text += f"{sep}<i class='torchx-nb-lognote' style='color:#6e7781'>{note}</i>"
        return f"<pre class='torchx-nb-log' style='margin:0'>{text}</pre>"

    def _request_render(self) -> None:
        """Render now if the last render is old enough, else once, shortly (≤ 10/s)."""
        with self._lock:
            self._dirty = True
            if self._timer is not None:
                return
            wait = MIN_REFRESH_S - (time.monotonic() - self._last_render)
            if wait > 0:
                self._timer = threading.Timer(wait, self._render_pending)
                self._timer.daemon = True
                self._timer.start()
                return
        self._render_pending()

    def _render_pending(self) -> None:
        with self._lock:
            self._timer = None
            if not self._dirty:
                return
            self._dirty = False
            self._last_render = time.monotonic()
        self._view.value = self._view_html(self.visible_lines())
        self.update_count += 1

    def _on_filter(self, change: dict[str, Any]) -> None:
        from torchx_nb.user_regex import BadRegex, compile_regex

        value = change["new"]
        try:
            self._pattern = compile_regex(value) if value else None
            self._filter_error.value = ""
        except BadRegex as e:
            self._filter_error.value = (
                f'<small style="color:#cf222e">bad regex: {html.escape(str(e))}</small>'
            )
            return
        self._request_render()

    def _on_download(self, _button: Any) -> None:
        """An ``<a download>`` link with the spooled log as a data URI (capped at 20 MB): works
        in JupyterLab, Notebook 7 and VS Code without a server route."""
        if not self.spool_path:
            return
        with open(self.spool_path, "rb") as f:
            data = f.read(DOWNLOAD_CAP_BYTES)
        name = f"{self.handle.rsplit('/', 1)[-1]}-{self.replica.replace('/', '-')}.log"
        b64 = base64.b64encode(data).decode()
        note = " (first 20 MB)" if len(data) >= DOWNLOAD_CAP_BYTES else ""
        self._link.value = (
            f'<a download="{html.escape(name)}" '
            f'href="data:text/plain;base64,{b64}">save {html.escape(name)}</a>'
            f"{note}"
        )

    def html(self, lines: int = SNAPSHOT_LINES) -> str:
        """The last ``lines`` lines as static HTML (the snapshot)."""
        shown = self.visible_lines()[-lines:]
        note = self._placeholder(bool(shown))
        caption = (
            f"last {len(shown)} lines of {self.replica} ({self._stream.value}); "
            f"the full log: %torchx log {self.handle}"
        )
        return render.log_html([*shown, *([note] if note else [])], caption)

    def text(self, lines: int = SNAPSHOT_LINES) -> str:
        shown = self.visible_lines()[-lines:]
        return "\n".join([f"logs of {self.handle} ({self.replica}):", *shown])

    def close(self) -> None:
        """Stop tailing and remove the spool file."""
        self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.stop()
        if self._timer is not None:
            self._timer.cancel()
        if self.spool_path:
            with contextlib.suppress(OSError):
                os.unlink(self.spool_path)
        close_tree(self.widget)
