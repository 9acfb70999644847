"""Results: what a job left behind (its value, its outputs, its executed notebook) and why
it failed (failure cards)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from torchx_nb.runner.core import RunnerContext
from torchx_nb.runner.logs import Logs
from torchx_nb.runner.watching import Watching
from torchx_nb.specs.api import (
    AppHandle,
    AppState,
    AppStatus,
    ReplicaStatus,
    UnknownAppException,
)
from torchx_nb.specs.failure import FailureCard, first_failures, torchelastic_exception


class Results:
    """Values, outputs, executed notebooks, failure cards, over the runner's shared context
    (a status from ``watching``, log tails from ``logs``)."""

    def __init__(self, ctx: RunnerContext, watching: Watching, logs: Logs) -> None:
        self.ctx = ctx
        self._watching = watching
        self._logs = logs

    def output_store(self, app_handle: AppHandle) -> Any:
        """Where the job keeps its output folder, from its own record in the job store (a job
        not submitted from here has none to read)."""
        from torchx_nb.results import NoResult, store_for

        record = self.ctx.jobstore.get(app_handle)
        if record is None:
            raise UnknownAppException(app_handle)
        if not record.outputs:
            raise NoResult(
                f"{app_handle} keeps no outputs: its scheduler stores them only with"
                " -cfg output_path=s3://BUCKET/PREFIX (gs:// on gcp_batch), set when it was"
                " submitted"
            )
        return store_for(record.outputs)

    def result(self, app_handle: AppHandle, status: AppStatus | None = None) -> Any:
        """The value of the cell the job ran (or the exception it raised, re-raised here with
        the remote traceback as its cause). Unpickling runs code: only for a job in this job
        store, read from its recorded output location. ``status``: its final status, for the
        message when there is no result."""
        from torchx_nb.results import load_result

        store = self.output_store(app_handle)
        if status is None:
            status = self._watching.status(app_handle)
        return load_result(store, status, app_handle)

    def result_repr(self, app_handle: AppHandle) -> str | None:
        """The short repr of the job's result (``raised TYPE: message`` for an exception), as
        the job wrote it: nothing is unpickled, so any surface may show it. None when the job
        keeps no outputs or left no result."""
        from torchx_nb.results import result_repr, store_for

        record = self.ctx.jobstore.get(app_handle)
        if record is None or not record.outputs:
            return None
        return result_repr(store_for(record.outputs))

    def failure_cards(
        self, app_handle: AppHandle, status: AppStatus | None = None, lines: int = 5
    ) -> list[FailureCard]:
        """A card per failing replica of a FAILED job, the first failure first (the earliest
        end where the scheduler tells; ``first_failures``). Each holds its exit code and signal,
        the exception line the cell runner wrote for it, and its last ``lines`` log lines
        (masked). Any part its backend cannot give is left out, never guessed."""
        from torchx_nb.redact import redact_lines
        from torchx_nb.results import exception_lines, store_for

        if status is None:
            status = self._watching.status(app_handle)
        if status is None or status.state != AppState.FAILED:
            return []
        raised: dict[int, str] = {}
        record = self.ctx.jobstore.get(app_handle)
        if record is not None and record.outputs:
            with contextlib.suppress(Exception):
                raised = exception_lines(store_for(record.outputs))
        failing = [
            (rs.role, r) for rs in status.roles for r in rs.replicas if r.state == AppState.FAILED
        ]
        if not status.roles and raised and record is not None and record.outputs:
            # nothing of the job is left at its scheduler (its status is the job store's):
            # the outputs of the cell (or notebook) runner still say what each rank raised
            role = "cell"
            with contextlib.suppress(Exception):
                files = store_for(record.outputs).list()
                if any("/" not in f.path and f.path.endswith(".ipynb") for f in files):
                    role = "notebook"
            failing = [(role, ReplicaStatus(rank, AppState.FAILED, role, "")) for rank in raised]
        cards = []
        for i, (role, rep) in enumerate(failing):
            exception = raised.get(rep.id)
            if exception is None and i == 0 and raised:  # ranks need not be replica ids (-j)
                exception = raised[min(raised)]
            if exception is None:  # a Python entry point under torchrun: its error file
                exception = torchelastic_exception(rep.structured_error_msg)
            tail: list[str] = []
            if lines > 0:
                with contextlib.suppress(Exception):
                    found = self._logs.log_tail(app_handle, role, rep.id, lines)
                    tail = [line.rstrip("\n") for line in redact_lines(found)]
            cards.append(
                FailureCard(
                    role,
                    rep.id,
                    rep.exit_code,
                    rep.oom,
                    exception,
                    tail,
                    signal_number=rep.signal,
                    ended=rep.ended,
                    ending=rep.ending,
                    next_step=rep.next_step,
                )
            )
        return first_failures(cards)

    def outputs(self, app_handle: AppHandle) -> Any:
        """The files the job wrote to ``$TORCHX_OUTPUT_DIR`` (``OutputFile``: path, size). A
        local folder that is gone after the job ended is ``NoResult``, not an empty list."""
        from torchx_nb.results import LocalStore, NoResult, folder_gone, outputs

        store = self.output_store(app_handle)
        if isinstance(store, LocalStore) and not store.root.is_dir():
            record = self.ctx.jobstore.get(app_handle)
            if record is not None and record.is_terminal:
                raise NoResult(folder_gone(store, app_handle))
        return outputs(store)

    def environment(self, app_handle: AppHandle) -> Any:
        """What the job's Python ran (``JobEnvironment``: each distribution it imported or
        the plan named, its version and where it came from), beside this kernel's versions;
        ``NoResult`` when the job recorded none."""
        from torchx_nb.environment.record import RECORD_FILE, read_record
        from torchx_nb.results import NoResult

        store = self.output_store(app_handle)
        if RECORD_FILE not in {f.path for f in store.list()}:
            raise NoResult(
                f"{app_handle} recorded no environment: only a cell or notebook job records"
                " one, when its runner ends"
            )
        with store.open(RECORD_FILE) as stream:
            return read_record(stream, app_handle)

    def executed_notebook(self, app_handle: AppHandle, folder: str | Path) -> Path:
        """The executed notebook of a notebook job, fetched into ``folder`` under a name
        that overwrites nothing (``NAME.executed.ipynb``); returns its path."""
        from torchx_nb.results import fetch_notebook

        record = self.ctx.jobstore.get(app_handle)
        name = Path(record.notebook).name if record is not None and record.notebook else None
        return fetch_notebook(self.output_store(app_handle), Path(folder).expanduser(), name)

    def download(self, app_handle: AppHandle, dest: str | Path, progress: Any = None) -> Path:
        """Copy the job's output files into ``dest``, keeping their paths; returns ``dest``."""
        from torchx_nb.results import download

        return download(self.output_store(app_handle), Path(dest).expanduser(), progress)
