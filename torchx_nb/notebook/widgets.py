"""Live widgets for a job: a status widget fed by the kernel's poller, and a log widget that
tails one replica. ipywidgets is imported when a widget is built, never when this module is.

Widgets only change trait values from background threads (never print into an Output widget
from a thread: ipykernel 7 drops such output) and refresh at most 10 times a second."""

from __future__ import annotations

import base64
import contextlib
import html
import os
import re
import tempfile
import threading
import time
from collections import deque
from typing import Any

from torchx_nb.specs.api import AppStatus, is_terminal

WIDGETS_ENV = "TORCHX_NB_WIDGETS"
MIN_REFRESH_S = 0.1
DOWNLOAD_CAP_BYTES = 20 * 1024 * 1024


def widgets_enabled() -> bool:
    """False for ``TORCHX_NB_WIDGETS=0|false|text|off``, without ipywidgets, or outside a Jupyter
    kernel (a terminal IPython cannot show widgets); True otherwise."""
    if os.environ.get(WIDGETS_ENV, "").strip().lower() in ("0", "false", "text", "off", "no"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def display_with_text(widget: Any, text: str) -> None:
    """Display ``widget`` with ``text`` as its text/plain fallback, so headless runs (nbconvert,
    nbclient) and frontends without widgets show the information instead of ``VBox(...)``."""
    from IPython.display import display

    display(
        {
            "application/vnd.jupyter.widget-view+json": {
                "model_id": widget.model_id,
                "version_major": 2,
                "version_minor": 0,
            },
            "text/plain": text,
        },
        raw=True,
    )


def _fmt_elapsed(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def format_status_text(handle: str, status: AppStatus | None, elapsed: float) -> str:
    """The plain-text status: handle, state, elapsed time, replicas, message, UI link."""
    state = status.state.name if status else "UNKNOWN"
    lines = [f"{handle} {state} ({_fmt_elapsed(elapsed)})"]
    if status:
        reps = ", ".join(
            f"{rs.role}/{r.id}: {r.state.name}" for rs in status.roles for r in rs.replicas
        )
        if reps:
            lines.append(f"  replicas: {reps}")
        if status.msg and status.msg != "<NONE>":
            lines.append(f"  {status.msg}")
        if status.ui_url:
            lines.append(f"  {status.ui_url}")
    return "\n".join(lines)


class StatusWidget:
    """State badge, replicas, elapsed time, UI link and a Cancel button, kept current by the
    kernel's poller."""

    def __init__(self, handle: str, runner: Any, poller: Any) -> None:
        import ipywidgets as w

        self.handle = handle
        self.runner = runner
        self.state: Any = None
        self.update_count = 0
        self._status: AppStatus | None = None
        self._error: str | None = None
        self._last_render = 0.0
        record = runner.jobstore.get(handle)
        self._submitted = record.submitted if record else time.time()
        self._ended: float | None = None
        self._html = w.HTML(value=self._render_html())
        self._cancel = w.Button(
            description="Cancel", icon="stop", button_style="warning", layout=w.Layout(width="auto")
        )
        self._cancel.on_click(self._on_cancel)
        self.widget = w.HBox([self._html, self._cancel], layout=w.Layout(align_items="flex-start"))
        self._watch_id = poller.watch(handle, self._on_status)

    def _elapsed(self) -> float:
        return (self._ended or time.time()) - self._submitted

    def text(self) -> str:
        return format_status_text(self.handle, self._status, self._elapsed())

    def _render_html(self) -> str:
        from torchx_nb.notebook.handle import status_html

        body = status_html(self.handle, self._status)
        extra = f" <small>{_fmt_elapsed(self._elapsed())}</small>"
        if self._error:
            extra += (
                f' <small style="color:#9a6700">reconnecting… ({html.escape(self._error)})</small>'
            )
        return f'<div style="line-height:1.4">{body}{extra}</div>'

    def _on_status(self, status: AppStatus | None, error: BaseException | None) -> None:
        if error is not None:
            self._error = f"{type(error).__name__}: {error}"[:200]
        else:
            self._error = None
            self._status = status
            self.state = status.state if status else None
            if status is None or is_terminal(status.state):
                self._ended = self._ended or time.time()
                self._cancel.disabled = True
                self._cancel.layout.display = "none"
        terminal = self._ended is not None
        now = time.monotonic()
        if not terminal and now - self._last_render < MIN_REFRESH_S:
            return
        self._last_render = now
        self._html.value = self._render_html()
        self.update_count += 1

    def _on_cancel(self, _button: Any) -> None:
        self._cancel.disabled = True
        self._cancel.description = "cancelling…"
        threading.Thread(target=self._cancel_job, daemon=True).start()

    def _cancel_job(self) -> None:
        try:
            self.runner.cancel(self.handle)
        except Exception as e:
            self._error = f"cancel failed: {e}"[:200]
            self._cancel.disabled = False
            self._cancel.description = "Cancel"
            self._html.value = self._render_html()


class LogWidget:
    """The last ``max_lines`` lines of one replica's log, with replica, stream and regex
    selectors; the full log is spooled to a file on disk and offered as a download."""

    def __init__(self, handle: str, runner: Any, max_lines: int = 1000) -> None:
        import ipywidgets as w

        self.handle = handle
        self.runner = runner
        self.max_lines = max_lines
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.update_count = 0
        self.spool_path: str | None = None
        self._generation = 0
        self._lock = threading.Lock()
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._last_render = 0.0
        self._pattern: re.Pattern[str] | None = None
        self._closed = False
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
        self._view = w.HTML(
            value="<pre style='margin:0'></pre>",
            layout=w.Layout(max_height="320px", overflow="auto"),
        )
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

    def _replicas(self) -> list[str]:
        status = self.runner.status(self.handle)
        if status is None:
            return []
        return [f"{rs.role}/{r.id}" for rs in status.roles for r in rs.replicas]

    def _restart(self) -> None:
        """(Re)start tailing the selected replica and stream into a fresh spool file."""
        from torchx_nb.schedulers.api import Stream

        with self._lock:
            self._generation += 1
            gen = self._generation
            self.lines.clear()
            fd, path = tempfile.mkstemp(prefix="torchx-nb-log-", suffix=".log")
            os.close(fd)
            old, self.spool_path = self.spool_path, path
        if old:
            with contextlib.suppress(OSError):
                os.unlink(old)
        if not self._replica.value:
            return
        role, _, k = str(self._replica.value).rpartition("/")
        stream = Stream(self._stream.value)
        threading.Thread(
            target=self._tail,
            args=(gen, role, int(k), stream, path),
            daemon=True,
            name="torchx-nb-log",
        ).start()
        self._request_render()

    def _tail(self, gen: int, role: str, k: int, stream: Any, path: str) -> None:
        try:
            with open(path, "a", encoding="utf-8") as spool:
                for line in self.runner.log_lines(
                    self.handle, role, k, should_tail=True, streams=stream
                ):
                    if gen != self._generation or self._closed:
                        return
                    spool.write(line)
                    with self._lock:
                        self.lines.append(line.rstrip("\n"))
                    self._request_render()
                spool.flush()
        except Exception as e:
            if gen == self._generation:
                with self._lock:
                    self.lines.append(f"[torchx_nb: log unavailable: {e}]")
        self._request_render()

    def _request_render(self) -> None:
        """Render now if the last render is old enough, else once, shortly (≤ 10/s)."""
        with self._lock:
            self._dirty = True
            if self._timer is not None:
                return
            wait = MIN_REFRESH_S - (time.monotonic() - self._last_render)
            if wait <= 0:
                self._timer = None
            else:
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
            lines = list(self.lines)
        if self._pattern is not None:
            lines = [ln for ln in lines if self._pattern.search(ln)]
        text = html.escape("\n".join(lines))
        self._view.value = f"<pre style='margin:0'>{text}</pre>"
        self.update_count += 1

    def _on_filter(self, change: dict[str, Any]) -> None:
        value = change["new"]
        try:
            self._pattern = re.compile(value) if value else None
            self._filter_error.value = ""
        except re.error as e:
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
        name = f"{self.handle.rsplit('/', 1)[-1]}-{str(self._replica.value).replace('/', '-')}.log"
        b64 = base64.b64encode(data).decode()
        note = " (first 20 MB)" if len(data) >= DOWNLOAD_CAP_BYTES else ""
        self._link.value = (
            f'<a download="{html.escape(name)}" '
            f'href="data:text/plain;base64,{b64}">save {html.escape(name)}</a>'
            f"{note}"
        )

    def close(self) -> None:
        """Stop tailing and remove the spool file."""
        self._closed = True
        self._generation += 1
        if self._timer is not None:
            self._timer.cancel()
        if self.spool_path:
            with contextlib.suppress(OSError):
                os.unlink(self.spool_path)
