"""``JobHandle``: what a ``%%torchx run`` cell gives back (``-o VAR``): the job's handle with
status(), wait(), logs(), cancel() and rich reprs."""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchx_nb.errors import one_line
from torchx_nb.metrics import MetricLog, MetricSpec
from torchx_nb.notebook.render import elapsed, status_html
from torchx_nb.redact import redact_lines
from torchx_nb.specs.api import (
    AppDef,
    AppStatus,
    UnknownAppException,
    is_terminal,
    parse_app_handle,
)
from torchx_nb.specs.log_line import Stream

if TYPE_CHECKING:
    import pandas as pd

    from torchx_nb.notebook.widgets import JobView
    from torchx_nb.runner import Runner


class JobHandle:
    """A submitted job, by handle (``scheduler://session/app_id``)."""

    def __init__(
        self, handle: str, runner: Runner, metric_specs: Iterable[MetricSpec] = ()
    ) -> None:
        parsed = parse_app_handle(handle)
        self.handle = handle
        self.scheduler = parsed.scheduler_backend
        self.app_id = parsed.app_id
        self.metric_specs = list(metric_specs)
        self.live_metrics: MetricLog | None = None
        self.view: JobView | None = None
        self.progress: Callable[[], Any] | None = None  # the download's bar (default: text)
        self._runner = runner

    def __str__(self) -> str:
        return self.handle

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)

    def status(self) -> AppStatus | None:
        """The job's current status (None once the scheduler has forgotten it)."""
        return self._runner.status(self.handle)

    def wait(self, timeout: float | None = None, interval: float = 2.0) -> AppStatus | None:
        """Block until the job ends (or ``timeout`` seconds pass); returns the last status.
        When the job ended, every cell of this kernel showing it (the cell that ran it,
        ``%torchx watch``, ``job.watch()``) shows the end before this returns."""
        status = self._runner.wait(self.handle, wait_interval=interval, timeout=timeout)
        if status is not None and is_terminal(status.state):
            from torchx_nb.notebook.widgets import shown_views

            views = shown_views(self.handle)
            if self.view is not None and self.view not in views:
                views.append(self.view)
            for view in views:  # every cell showing this job, not only the one that ran it
                view.settle(status)
        return status

    def cancel(self) -> None:
        """Ask the scheduler to stop the job; returns at once."""
        self._runner.cancel(self.handle)

    def preempt(self, grace: float | None = None) -> None:
        """Preempt the running job as its backend would (SIGTERM, ``grace`` seconds — the
        backend's own by default — the kill, then its own retry): try the program's resume
        from its checkpoint before paying for spot. ``NotPreemptible`` (one line) on a backend
        that cannot, or for a job that is not running. A grace its backend does not honour
        (Slurm's KillWait applies) is said in one warning."""
        note = self._runner.preempt(self.handle, grace)
        if note:
            import warnings

            warnings.warn(note, stacklevel=2)

    def watch(self) -> None:
        """Show the live widgets again in this notebook (after a kernel restart, or in another
        notebook): ``%torchx watch`` for this job. Without widgets it follows the job in text
        until it ends."""
        from torchx_nb.watching import watch_in_kernel

        watch_in_kernel(self.handle)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to end, then return its cell's value (the last expression, as
        IPython shows it), or raise the exception the cell raised with the remote traceback as
        its cause. ``NoResult`` when it ended without one; ``TimeoutError`` after ``timeout``
        seconds. Unpickling runs code: results load only for jobs of this job store."""
        status = self.wait(timeout=timeout, interval=0.5)
        if status is not None and not is_terminal(status.state):
            raise TimeoutError(f"{self.handle} is still {status.state.name} after {timeout} s")
        return self._runner.result(self.handle, status)

    def environment(self) -> Any:
        """What the job's Python ran: each distribution it imported (or the environment plan
        named), its version and where it came from (the image, the environment layer, the
        workspace), and how it differs from this kernel's (``.differences()``)."""
        return self._runner.environment(self.handle)

    def outputs(self) -> list[str]:
        """The files the job wrote to ``$TORCHX_OUTPUT_DIR``, relative to it."""
        return [f.path for f in self._runner.outputs(self.handle)]

    def download(self, dest: str | os.PathLike[str] | None = None) -> Path:
        """Fetch the job's output files into ``dest`` (default: a folder named after the job
        beside the notebook), keeping their relative paths, with a progress bar; big files
        stream in chunks. Returns the folder."""
        from torchx_nb.progress import new_progress

        target = Path(dest) if dest is not None else Path.cwd() / self.app_id.replace(":", "-")
        progress = self.progress() if self.progress is not None else new_progress()
        try:
            return self._runner.download(self.handle, target, progress)
        finally:
            progress.close()

    def notebook(self, folder: str | os.PathLike[str] | None = None) -> Path:
        """A notebook job's executed notebook (as far as it ran, with its outputs and
        errors; part-way for a running job), fetched into ``folder`` (default: beside the
        original notebook, else the current folder) as ``NAME.executed.ipynb``, never
        overwriting a file; its path."""
        if folder is None:
            record = self._runner.jobstore.get(self.handle)
            original = Path(record.notebook) if record is not None and record.notebook else None
            beside = original.parent if original and original.is_absolute() else None
            folder = beside if beside is not None and beside.is_dir() else Path.cwd()
        return self._runner.executed_notebook(self.handle, Path(folder))

    def describe(self) -> AppDef | None:
        return self._runner.describe(self.handle)

    def roles(self) -> list[tuple[str, int]]:
        """(role, replica) pairs of the job."""
        status = self.status()
        if status is None:
            raise UnknownAppException(self.handle)
        return [(rs.role, r.id) for rs in status.roles for r in rs.replicas]

    def logs(
        self,
        role: str | None = None,
        k: int = 0,
        regex: str | None = None,
        tail: bool = False,
        streams: str | Stream | None = None,
    ) -> str:
        """The log text of replica ``k`` of ``role`` (default: the first role), masked as
        every log shown in a notebook is; ``tail=True`` waits for the job to end first."""
        stream = Stream(streams) if isinstance(streams, str) else streams
        lines = self._raw_lines(role, k, regex=regex, should_tail=tail, streams=stream)
        return "".join(redact_lines(lines))

    def _raw_lines(self, role: str | None, k: int, **query: Any) -> Iterable[str]:
        """The log lines of replica ``k`` of ``role`` (default: the first role), unmasked;
        ``query``: what else ``Runner.log_lines`` takes (regex, should_tail, streams)."""
        if role is None:
            role = self.roles()[0][0]
        return self._runner.log_lines(self.handle, role, k, **query)

    def phases(self) -> pd.DataFrame:
        """The job's phases (image built and pushed, queued, running; held and resumed around
        each preemption) with their start, end
        (NaT while still going) and seconds, in local time, from the job store's times (the
        scheduler's own where it reports them)."""
        import pandas as pd

        from torchx_nb.local_time import local_zone
        from torchx_nb.phases import phases

        self._runner.status(self.handle)  # the latest state and start time into the store
        rec = self._runner.jobstore.get(self.handle)
        if rec is None:
            raise UnknownAppException(self.handle)
        tries = self._runner.jobstore.attempts(self.handle) if rec.attempt > 1 else []
        rows = [(p.name, p.start, p.end, p.seconds()) for p in phases(rec, attempts=tries)]
        frame = pd.DataFrame(rows, columns=["phase", "start", "end", "seconds"])
        tz = local_zone()
        for column in ("start", "end"):
            frame[column] = pd.to_datetime(frame[column], unit="s", utc=True).dt.tz_convert(tz)
        return frame

    def metrics(self, role: str | None = None, k: int = 0) -> pd.DataFrame:
        """The ``--metric`` points as a DataFrame (name, step, value, time): those the live
        widget collected (with the time each line was seen), else parsed from the log now."""
        if self.live_metrics is not None and role is None and k == 0:
            return self.live_metrics.frame()
        log = MetricLog(self.metric_specs)
        if log:
            log.feed_all(self._raw_lines(role, k))
        return log.frame()

    def __repr__(self) -> str:
        try:
            status = self.status()
        except Exception as e:
            return f"JobHandle({self.handle!r}, status unavailable: {one_line(e)})"
        state = status.state.name if status else "UNKNOWN"
        return f"JobHandle({self.handle!r}, state={state})"

    def _repr_html_(self) -> str:
        try:
            status = self.status()
        except Exception as e:
            return (
                f"<code>{html.escape(self.handle)}</code> status unavailable:"
                f" {html.escape(one_line(e))}"
            )
        record = self._runner.jobstore.get(self.handle)
        seconds = elapsed(record.submitted, status, record.ended) if record and status else None
        return status_html(self.handle, status, seconds)
