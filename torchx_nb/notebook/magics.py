"""The ``%%torchx`` / ``%torchx`` magics (``%load_ext torchx_nb``); what a line says is parsed in
``magic_line``.

Every bad line becomes a one-line ``UsageError`` naming the fix — exactly ``UsageError``, since
IPython renders only that class (not a subclass) without a traceback — and the whole line is
checked before anything is built or submitted. Defaults come from traitlets
(``%config TorchxMagics.scheduler = "local_cwd"``) and from ``.torchxconfig``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import CaselessStrEnum, Dict, Float, Int, Unicode

from torchx_nb.errors import current_folder, one_line
from torchx_nb.notebook.magic_line import (
    COMMANDS,
    WIDGETS_ENV,
    HelpShown,
    MagicLineError,
    out_name,
    parse_line,
    split_env,
)


@magics_class
class TorchxMagics(Magics):
    """``%%torchx run`` turns a cell into a job; ``%torchx`` manages jobs."""

    scheduler = Unicode(
        "", help="default scheduler for %%torchx run ('' = .torchxconfig [cli:run], else local_cwd)"
    ).tag(config=True)
    session = Unicode("torchx", help="session name in handles").tag(config=True)
    cfg = Dict(help="default scheduler options, per scheduler: {'aws_batch': {'queue': 'q'}}").tag(
        config=True
    )
    image = Unicode("", help="default image for %%torchx run").tag(config=True)
    widgets = CaselessStrEnum(
        ["auto", "widgets", "text"],
        default_value="auto",
        help="live widgets, plain text, or auto (text when the env"
        f" variable {WIDGETS_ENV}=0/text or no widget frontend)",
    ).tag(config=True)
    log_lines = Int(1000, help="lines kept in a log widget").tag(config=True)
    poll_interval = Float(
        5.0, help="seconds between status polls of remote jobs (local jobs: 0.5 s)"
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._runner: Any = None

    @property
    def runner(self) -> Any:
        if self._runner is None:
            from torchx_nb.runner import Runner

            self._runner = Runner(self.session)
        return self._runner

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    @line_cell_magic
    @magic_arguments()
    @argument("command", choices=COMMANDS, help="what to do (each takes --help)")
    @argument("args", nargs=argparse.REMAINDER, help="the command's arguments")
    def torchx(self, line: str, cell: str | None = None) -> Any:
        """Run a cell, or a component, as a job and watch it.

        %%torchx run [-s SCHED] [-cfg k=v,...] [--image IMG] [-j NxP] [--name NAME]
                     [--env K=V ...] [-h RESOURCE] [--workspace PATH|none] [--wait] [--dryrun]
                     [-o VAR] [--metric NAME=REGEX ...] [--push VAR,...]
            Runs the cell body as the job's main program in the workspace (the notebook's
            folder by default); with -j under torchrun on N nodes of P processes. Shows a live
            status widget and a log widget; --wait blocks and streams the logs as text;
            --dryrun shows the native request and submits nothing; -o stores the handle object
            (VAR.result(), VAR.outputs(), VAR.download()); --push sends kernel variables.

        %%torchx sweep [run options] -p NAME=V1,V2 [-p ...] [--zip] [--max-parallel N]
                       [--fail-fast] [-o VAR]
            Runs the cell once per point of the grid (the product of the lists; --zip pairs
            them); each point's values are variables in the cell and $TORCHX_PARAM_NAME. One
            widget follows every trial; -o stores the Sweep (VAR.wait(), VAR.results(),
            VAR.best(metric), VAR.cancel()).

        %torchx run [options] COMPONENT ARGS...    e.g. %torchx run utils.echo --msg hi
        %torchx sweep --notebook NB.ipynb -p NAME=V1,V2 [...]  the notebook once per point
        %torchx run-notebook NB.ipynb [-p NAME=VALUE ...] [--cell-timeout S] [run options]
            Runs the whole notebook as a job (its folder is the workspace), the values
            injected after its `parameters` cell; -o VAR then VAR.notebook() fetches the
            executed notebook.
        %torchx status|describe|cancel HANDLE_OR_VAR
        %torchx log HANDLE_OR_VAR [-r ROLE] [-k N] [--regex RE] [--tail] [--streams S]
        %torchx result HANDLE_OR_VAR [--timeout S]  the cell's value (its exception re-raised)
        %torchx outputs HANDLE_OR_VAR [--download [DEST]]   the files it wrote
        %torchx list [-s SCHED] [--all]             a pandas DataFrame of jobs
        %torchx runopts [SCHED]                     a DataFrame of the schedulers' options
        %torchx schedulers                          a DataFrame of the schedulers
        %torchx workspace [PATH]                    what ships with a job (secrets left out)

        Defaults: %config TorchxMagics.scheduler / .cfg / .image / .widgets, and .torchxconfig.
        """
        try:
            parsed = parse_line(line, cell)
        except HelpShown:
            return None
        try:
            return getattr(self, f"_do_{parsed.command.replace('-', '_')}")(parsed.args, cell)
        except (MagicLineError, KeyboardInterrupt):
            raise
        except HelpShown:
            return None
        except SystemExit:
            return None
        except Exception as e:
            from torchx_nb.specs.exceptions import RemoteTraceback

            if os.environ.get("TORCHX_NB_DEBUG") or isinstance(e.__cause__, RemoteTraceback):
                raise  # the cell's own exception, shown with the job's traceback
            raise UsageError(f"%torchx {parsed.command}: {one_line(e)}") from None

    def _widget_mode(self) -> bool:
        if self.widgets == "text":
            return False
        from torchx_nb.notebook.widgets import widgets_enabled

        if self.widgets == "widgets":
            return True
        return widgets_enabled()

    def _notebook_path(self) -> str | None:
        ns = self.shell.user_ns if self.shell else {}
        for candidate in (
            ns.get("__vsc_ipynb_file__"),
            ns.get("__session__"),
            os.environ.get("JPY_SESSION_NAME"),
        ):
            if candidate:
                return str(candidate)
        return None

    def _run_request(
        self, args: argparse.Namespace, cell: str | None, command: str = "run"
    ) -> tuple[Any, str | None, list[Any]]:
        """The request a run or sweep line describes, the -o name and the --metric specs;
        everything checked before anything is built."""
        from torchx_nb.metrics import parse_metric
        from torchx_nb.run_args import run_request

        out = out_name(args.out)
        metric_specs = [parse_metric(m) for m in args.metric]
        if cell is not None and not cell.strip():
            raise MagicLineError(
                f"%%torchx {command}: the cell is empty; write the code to run below the magic line"
            )
        push = None
        if getattr(args, "push", None) is not None:
            from torchx_nb.notebook.push import pickle_push, push_names

            if cell is None:
                raise MagicLineError(
                    "%torchx run: --push sends variables into a cell: use %%torchx run --push"
                )
            push = pickle_push(self.shell.user_ns if self.shell else {}, push_names(args.push))
        if command == "run-notebook":
            from torchx_nb.run_args import notebook_fields

            fields: dict[str, Any] = notebook_fields(args)
        elif getattr(args, "notebook", None) is not None:  # a notebook sweep: -p is the grid
            fields = {"run_notebook": args.notebook, "cell_timeout": args.cell_timeout}
        else:
            fields = {
                "cell": cell,
                "component": None if cell is not None else args.component,
                "component_args": [] if cell is not None else list(args.args),
                "j": args.j,
                "notebook": self._notebook_path(),
                "push": push,
            }
        request = run_request(
            args,
            **fields,
            default_scheduler=self.scheduler or None,
            scheduler_defaults=self.cfg,
            name=args.name,
            image=args.image or self.image or None,
            env=split_env(args.env),
            resource=args.resource,
        )
        return request, out, metric_specs

    def _do_run_notebook(self, args: argparse.Namespace, cell: str | None) -> None:
        """``%torchx run-notebook``: the notebook as a job, watched as a cell's is."""
        self._do_run(args, None, "run-notebook")

    def _do_run(self, args: argparse.Namespace, cell: str | None, command: str = "run") -> None:
        from torchx_nb.metrics import metric_definitions

        request, out, metric_specs = self._run_request(args, cell, command)
        runner = self.runner
        if args.dryrun:
            prepared = runner.prepare(request)
            self._show_dryrun(prepared)
            return None
        with self._progress():
            prepared = runner.prepare(request, build=True)
        known = {m.name for m in metric_specs}
        defined = metric_definitions(prepared.metric_definitions)
        metric_specs += [m for m in defined if m.name not in known]
        handle = runner.submit(prepared)
        from torchx_nb.notebook.handle import JobHandle

        job = JobHandle(handle, runner, metric_specs)
        job.progress = self._download_progress
        if out:
            assert self.shell is not None
            self.shell.user_ns[out] = job
        self._watch(job, wait=args.wait)
        return None

    def _do_sweep(self, args: argparse.Namespace, cell: str | None) -> None:
        from torchx_nb.sweeps import SweepRequest, dryrun, start

        request, out, metric_specs = self._run_request(args, cell, "sweep")
        sweep_request = SweepRequest(
            request, list(args.param), args.zip, args.max_parallel, args.fail_fast, metric_specs
        )
        if args.dryrun:
            display_text = dryrun(self.runner, sweep_request)
            from IPython.display import display

            display({"text/plain": display_text}, raw=True)
            return None
        from torchx_nb.sweeps import SweepInterrupted

        try:
            with self._progress():
                sw = start(self.runner, sweep_request)
        except SweepInterrupted as stop:
            if out:  # the cancelled trials stay reachable: sw.statuses(), sw.results()
                assert self.shell is not None
                self.shell.user_ns[out] = stop.sweep
            print(f"{stop.args[0]}{f'; they are in {out}' if out else ''}")
            return None
        if out:
            assert self.shell is not None
            self.shell.user_ns[out] = sw
        self._show_sweep(sw, args.wait)
        return None

    def _show_sweep(self, sw: Any, wait: bool) -> None:
        """The live sweep view (a table of trials while they run, text without widgets); with
        ``wait``, block until every trial has ended."""
        if self._widget_mode():
            from torchx_nb.notebook.sweep_view import SweepView
            from torchx_nb.refresher import get_refresher

            poller = get_refresher(remote_interval=self.poll_interval)
            sw.view = SweepView(sw, self.runner, poller, log_lines=self.log_lines)
            sw.view.show()
        else:
            from torchx_nb.sweeps import sweep_text

            print(sweep_text(sw.id, sw.points, sw.handles, sw.statuses(), sw.array))
        if wait:
            try:
                sw.wait()
            except KeyboardInterrupt:
                print(f"\nstopped waiting; the trials of {sw.id} keep running")
                return None
            if sw.view is None:
                from torchx_nb.sweeps import sweep_text

                print(sweep_text(sw.id, sw.points, sw.handles, sw.statuses(), sw.array, sw.stopped))
        return None

    def _progress(self) -> Any:
        """Image build/push progress as a progress bar widget (text on stderr without widgets)."""
        if not self._widget_mode():
            return contextlib.nullcontext()
        from torchx_nb.notebook.widgets import ProgressBar
        from torchx_nb.progress import progress_to

        return progress_to(ProgressBar)

    def _download_progress(self) -> Any:
        """A download's progress: a bar widget, or text on stderr without widgets."""
        if not self._widget_mode():
            from torchx_nb.progress import TextProgress

            return TextProgress()
        from torchx_nb.notebook.widgets import ProgressBar

        return ProgressBar("downloading", "downloaded", "the outputs", "files")

    def _show_dryrun(self, prepared: Any) -> None:
        """The compact summary, then the whole request and the workspace's files collapsed
        (the plain-text fallback, for headless runs, holds everything)."""
        from IPython.display import display

        from torchx_nb.dryrun_summary import summarize
        from torchx_nb.notebook.render import dryrun_html

        summary = summarize(self.runner, prepared, whole="below (collapsed)")
        display({"text/plain": summary.full(), "text/html": dryrun_html(summary)}, raw=True)

    def _watch(self, job: Any, wait: bool, again: bool = False) -> None:
        """The job's widgets (or, without widgets, its status in text), from what is known:
        as submitted, or, when it is watched ``again``, its state in the job store (an ended
        job's final status and snapshot at once)."""
        from IPython.display import display

        runner = self.runner
        if again:
            from torchx_nb.notebook.widgets import known_status

            first = known_status(runner, job.handle)
        else:
            first = runner.submitted_status(job.handle)
        if self._widget_mode():
            from torchx_nb.metrics import MetricLog
            from torchx_nb.notebook.widgets import JobView
            from torchx_nb.refresher import get_refresher

            poller = get_refresher(remote_interval=self.poll_interval)
            view = JobView(
                job.handle,
                runner,
                poller,
                metrics=MetricLog(job.metric_specs),
                log_lines=self.log_lines,
                show_logs=not wait,
                first=first,
            )
            job.live_metrics = view.metrics
            job.view = view
            view.show()
        else:
            from torchx_nb.notebook.render import status_text

            shown = status_text(job.handle, first)
            out = display({"text/plain": shown}, raw=True, display_id=True)

            def noticed(line: str) -> None:
                # the line is about the job's end: it comes with that end as the job store
                # has it (no describe: that would be another notice), not under the
                # SUBMITTED this output was printed with
                from torchx_nb.specs.api import AppState, AppStatus

                rec = runner.jobstore.get(job.handle)
                now = first
                if rec is not None and rec.is_terminal and rec.state in AppState.__members__:
                    now = AppStatus(AppState[rec.state], msg=rec.msg, ended=rec.ended)
                out.update({"text/plain": f"{status_text(job.handle, now)}\n  {line}"}, raw=True)

            runner.follow_notice(job.handle, noticed)
            if not wait:
                print(
                    f"(not waiting: `%torchx status {job.handle}`, `%torchx log "
                    f"{job.handle}`, or -o VAR then VAR.wait())"
                )
        if wait:
            self._wait_and_stream(job)

    def _wait_and_stream(self, job: Any) -> None:
        from torchx_nb.logtail import follow, replica_targets
        from torchx_nb.specs.api import AppState, message_text

        runner = self.runner
        try:
            targets = replica_targets(runner, job.handle)
            prefixed = len(targets) > 1
            for role, k, line in follow(runner, job.handle, targets, tail=True):
                sys.stdout.write(f"{role}/{k} {line}" if prefixed else line)
            sys.stdout.flush()
            status = job.wait(interval=1)
        except KeyboardInterrupt:
            print(
                f"\nstopped waiting; {job.handle} keeps running (`%torchx cancel "
                f"{job.handle}` stops it)"
            )
            return
        state = status.state.name if status else "UNKNOWN"
        line = f"{job.handle} {state}"
        cards = runner.failure_cards(job.handle, status, lines=0) if status else []
        if cards:
            from torchx_nb.redact import redact_text

            line += ": " + "; ".join(redact_text(card.headline()) for card in cards)
        elif status and status.state != AppState.SUCCEEDED and message_text(status.msg):
            line += f": {status.msg}"
        print(line)
        if job.view is None:  # the widget's snapshot shows it otherwise
            from torchx_nb.notebook.render import result_line

            with contextlib.suppress(Exception):
                result = runner.result_repr(job.handle)
                if result is not None:
                    print(result_line(result))

    def _resolve_handle(self, token: str) -> str:
        from torchx_nb.notebook.handle import JobHandle
        from torchx_nb.specs.api import parse_app_handle

        value = self.shell.user_ns.get(token) if self.shell and token.isidentifier() else None
        if isinstance(value, JobHandle):
            return value.handle
        if isinstance(value, str):
            token = value
        parse_app_handle(token)
        return token

    def _do_status(self, args: argparse.Namespace, cell: str | None) -> None:
        from IPython.display import display

        from torchx_nb.notebook.render import attempts_html, elapsed, status_html
        from torchx_nb.redact import redact_text
        from torchx_nb.specs.api import UnknownAppException

        handle = self._resolve_handle(args.handle)
        status = self.runner.status(handle)
        if status is None:
            raise UnknownAppException(handle)
        record = self.runner.jobstore.get(handle)
        seconds = elapsed(record.submitted, status, record.ended) if record else None
        cards = self.runner.failure_cards(handle, status)
        plain = f"{handle}\n{status.format()}" + "".join(f"\n{c.text()}" for c in cards)
        tried = self.runner.attempt_lines(handle)  # its preemptions, as the CLI's status
        plain += "".join(f"\n{line}" for line in tried)
        display(
            {
                "text/plain": redact_text(plain),
                "text/html": status_html(handle, status, seconds, "", cards) + attempts_html(tried),
            },
            raw=True,
        )

    def _do_describe(self, args: argparse.Namespace, cell: str | None) -> None:
        import json
        from dataclasses import asdict

        from IPython.display import display

        from torchx_nb.redact import redact
        from torchx_nb.specs.api import UnknownAppException

        handle = self._resolve_handle(args.handle)
        app = self.runner.describe(handle)
        if app is None:
            raise UnknownAppException(handle)
        display({"text/plain": json.dumps(redact(asdict(app)), indent=2, default=str)}, raw=True)

    def _do_cancel(self, args: argparse.Namespace, cell: str | None) -> None:
        from torchx_nb.specs.api import TorchxNbError
        from torchx_nb.sweeps import TrialsNotCancelled

        sw = self._sweep(args.handle)
        if sw is not None:
            try:
                sw.cancel()
            except TrialsNotCancelled as e:  # one line per trial that may still run
                print(str(e), file=sys.stderr)
                raise TorchxNbError(f"{len(e.failed)} trial(s) could not be cancelled") from None
            print(f"cancel requested for the trials of {sw.id}")
            return
        handle = self._resolve_handle(args.handle)
        self.runner.cancel(handle)
        print(f"cancel requested for {handle}")

    def _do_log(self, args: argparse.Namespace, cell: str | None) -> None:
        from torchx_nb.logtail import follow, replica_targets
        from torchx_nb.specs.log_line import Stream

        handle = self._resolve_handle(args.handle)
        replicas = [args.replica] if args.replica is not None else None
        targets = replica_targets(self.runner, handle, args.role, replicas)
        streams = Stream(args.streams) if args.streams else None
        prefixed = len(targets) > 1
        try:
            for role, k, line in follow(
                self.runner, handle, targets, args.regex, args.tail, streams
            ):
                sys.stdout.write(f"{role}/{k} {line}" if prefixed else line)
        except KeyboardInterrupt:
            print("\nstopped following the log")
        sys.stdout.flush()

    def _token(self, token: str) -> str:
        """A handle or sweep id as typed, or the one a variable of that name holds."""
        value = self.shell.user_ns.get(token) if self.shell and token.isidentifier() else None
        return value if isinstance(value, str) else token

    def _sweep(self, token: str) -> Any:
        """The sweep ``token`` names (a ``Sweep`` variable, a ``sweep-…`` id, or a variable
        holding one), or None for anything else (a job)."""
        from torchx_nb.sweeps import Sweep

        value = self.shell.user_ns.get(token) if self.shell and token.isidentifier() else None
        if isinstance(value, Sweep):
            return value
        token = self._token(token)
        if not isinstance(value, str) and value is not None:
            return None
        return Sweep.attach(self.runner, token) if token.startswith("sweep-") else None

    def _job(self, token: str) -> Any:
        from torchx_nb.notebook.handle import JobHandle

        value = self.shell.user_ns.get(token) if self.shell and token.isidentifier() else None
        if isinstance(value, JobHandle):
            job = value
        else:
            job = JobHandle(self._resolve_handle(token), self.runner)
        job.progress = self._download_progress
        return job

    def _do_watch(self, args: argparse.Namespace, cell: str | None) -> None:
        """The live widgets again, for a job or a sweep submitted earlier: after a kernel
        restart, or from another notebook. Without widgets it follows the job as ``--wait``
        does (a sweep: until every trial has ended)."""
        from torchx_nb.metrics import parse_metric
        from torchx_nb.specs.api import UnknownAppException

        sw = self._sweep(args.target)
        if sw is not None:
            self._show_sweep(sw, wait=not self._widget_mode())
            return
        job = self._job(self._token(args.target))
        if self.runner.jobstore.get(job.handle) is None and self.runner.status(job.handle) is None:
            raise UnknownAppException(job.handle)
        job.metric_specs = [*job.metric_specs, *(parse_metric(m) for m in args.metric)]
        self._watch(job, wait=not self._widget_mode(), again=True)

    def _do_result(self, args: argparse.Namespace, cell: str | None) -> Any:
        job = self._job(args.handle)
        try:
            return job.result(timeout=args.timeout)
        except KeyboardInterrupt:
            print(f"\nstopped waiting; {job.handle} keeps running")
            return None

    def _do_outputs(self, args: argparse.Namespace, cell: str | None) -> Any:
        from torchx_nb.notebook.frames import outputs_frame

        job = self._job(args.handle)
        if args.download is not None:
            folder = job.download(args.download or None)
            print(f"downloaded the outputs of {job.handle} to {folder}")
            return None
        return outputs_frame(self.runner.outputs(job.handle))

    def _do_list(self, args: argparse.Namespace, cell: str | None) -> Any:
        from torchx_nb.joblist import job_rows
        from torchx_nb.notebook.frames import jobs_frame

        rows = job_rows(
            self.runner, scheduler=args.scheduler, limit=None if args.all else args.limit
        )
        return jobs_frame(rows)

    def _do_runopts(self, args: argparse.Namespace, cell: str | None) -> Any:
        from torchx_nb.notebook.frames import all_runopts_frame, runopts_frame

        if args.scheduler:
            return runopts_frame(self.runner.scheduler_run_opts(args.scheduler))
        return all_runopts_frame(self.runner)

    def _do_workspace(self, args: argparse.Namespace, cell: str | None) -> None:
        from IPython.display import display

        preview = self.runner.workspace_preview(args.path or current_folder(), args.rows)
        display({"text/plain": preview}, raw=True)

    def _do_schedulers(self, args: argparse.Namespace, cell: str | None) -> Any:
        from torchx_nb.notebook.frames import schedulers_frame

        return schedulers_frame(self.runner.scheduler_factories())


_LOADED: dict[int, TorchxMagics] = {}


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics and make them configurable with ``%config TorchxMagics...``."""
    magics = TorchxMagics(shell=ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)
    _LOADED[id(ipython)] = magics


def unload_ipython_extension(ipython: Any) -> None:
    magics = _LOADED.pop(id(ipython), None)
    if magics is not None:
        magics.close()
        if magics in ipython.configurables:
            ipython.configurables.remove(magics)
