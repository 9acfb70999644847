"""``torchx-nb``: the command line, shaped like ``torchx`` (run, status, describe, log, list,
cancel, runopts, schedulers, configure, resources), plus a cell job's ``result`` and
``outputs``: the commands here, their parser in ``parser``. Errors print as one line naming
the fix."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from torchx_nb.cli.parser import PROG, build_parser, builtins_text
from torchx_nb.errors import current_folder
from torchx_nb.redact import redact_text
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.specs.exceptions import CliError as CliError

_LOG_TARGET_RE = re.compile(
    r"(?P<handle>[^:/]+://[^/]*/[^/]+)(?:/(?P<role>[^/]+)(?:/(?P<replicas>[0-9,]+))?)?/?"
)


def _runner() -> Any:
    from torchx_nb.runner import get_runner

    runner = get_runner()
    runner.hand_off_notices = True  # a command exits soon: a sender process sends them
    runner.keep_store_connections = True  # until it exits (the job store's ``keep``)
    return runner


def _print_logs(
    runner: Any,
    handle: str,
    targets: list[tuple[str, int]],
    out: TextIO,
    regex: str | None = None,
    tail: bool = False,
    streams: Any = None,
) -> None:
    """Print the logs of each (role, replica), each line prefixed ``role/replica`` (as TorchX's
    ``torchx log`` and ``run --wait`` do)."""
    from torchx_nb.logtail import follow

    for role, k, line in follow(runner, handle, targets, regex, tail, streams):
        prefix = f"{role}/{k} "
        out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
        out.flush()


def _replicas(
    runner: Any, handle: str, role: str | None = None, replicas: list[int] | None = None
) -> list[tuple[str, int]]:
    from torchx_nb.logtail import replica_targets

    return replica_targets(runner, handle, role, replicas)


def cmd_run(args: argparse.Namespace) -> int:
    from torchx_nb.run_args import run_request

    comp_args = list(args.component_args)
    if comp_args and comp_args[0] == "--":
        comp_args = comp_args[1:]
    request = run_request(
        args,
        component=args.component,
        component_args=comp_args,
        parent_run_id=args.parent_run_id,
    )
    return _submit(args, request)


def cmd_run_notebook(args: argparse.Namespace) -> int:
    """``run-notebook``: the notebook as a job, through the same submit path as ``run``."""
    from torchx_nb.run_args import notebook_fields, run_request

    request = run_request(args, name=args.name, image=args.image, **notebook_fields(args))
    args.no_log = getattr(args, "no_log", False)
    return _submit(args, request)


def _submit(args: argparse.Namespace, request: Any) -> int:
    """Prepare ``request``: print its dry run, or submit it, print the handle and (with
    ``--wait``/``--log``) follow it to its end."""
    with _runner() as runner:
        prepared = runner.prepare(request, build=not args.dryrun)
        if args.dryrun:
            from torchx_nb.dryrun_summary import summarize

            summary = summarize(runner, prepared, whole="--json")
            print(summary.full() if args.json else summary.text())
            return 0
        handle = runner.submit(prepared)
        print(handle, flush=True)
        local = runner.is_local(prepared.scheduler)
        show_logs = args.log or (args.wait and local and not args.no_log)
        if not (args.wait or args.log):
            return 0
        return _follow_to_end(runner, handle, show_logs)


def _follow_to_end(runner: Any, handle: str, show_logs: bool) -> int:
    """Print the job's logs (with ``show_logs``) and wait for its end; its final state on
    stderr, and why when it did not succeed. 0 for SUCCEEDED, else 1."""
    from torchx_nb.specs.api import AppState, is_terminal, message_text

    if show_logs:
        _print_logs(runner, handle, _replicas(runner, handle), sys.stdout, tail=True)
    status = runner.wait(handle, wait_interval=1)
    if status is None:
        raise CliError(f"{handle} disappeared from its scheduler while waiting")
    print(f"{PROG}: {handle} {status.state}", file=sys.stderr)
    if is_terminal(status.state) and status.state != AppState.SUCCEEDED:
        cards = runner.failure_cards(handle, status, lines=0 if show_logs else 5)
        for card in cards:
            print(f"{PROG}: {redact_text(card.text())}", file=sys.stderr)
        if not cards and message_text(status.msg):
            from torchx_nb.specs.failure import clean_line

            print(f"{PROG}: {clean_line(status.msg, 2000)}", file=sys.stderr)
        return 1
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    """Follow a job submitted earlier (from any process) to its end, as ``run --wait``
    does; a sweep (its id): wait for every trial and print the table."""
    from torchx_nb.specs.api import AppState, UnknownAppException, parse_app_handle

    with _runner() as runner:
        if args.target.startswith("sweep-"):
            from torchx_nb.sweeps import Sweep, sweep_text

            sw = Sweep.attach(runner, args.target)
            statuses = sw.wait()
            print(sweep_text(sw.id, sw.points, sw.handles, statuses, sw.array, sw.stopped))
            ok = all(s is not None and s.state == AppState.SUCCEEDED for s in statuses)
            return 0 if ok else 1
        handle = args.target
        parse_app_handle(handle)
        if runner.status(handle) is None:
            raise UnknownAppException(handle)
        return _follow_to_end(runner, handle, show_logs=not args.no_log)


def cmd_sweep(args: argparse.Namespace) -> int:
    from torchx_nb.run_args import run_request
    from torchx_nb.specs.api import AppState
    from torchx_nb.sweeps import SweepRequest, dryrun, start

    comp_args = list(args.component_args)
    if comp_args and comp_args[0] == "--":
        comp_args = comp_args[1:]
    if args.notebook is not None:
        if args.component is not None:
            raise CliError("give a component or --notebook, not both")
        run = run_request(args, run_notebook=args.notebook, cell_timeout=args.cell_timeout)
    elif args.component is None:
        raise CliError("give the component to sweep (or --notebook NB.ipynb)")
    else:
        run = run_request(args, component=args.component, component_args=comp_args)
    request = SweepRequest(
        run,
        list(args.param),
        args.zip,
        args.max_parallel,
        args.fail_fast,
    )
    with _runner() as runner:
        if args.dryrun:
            print(dryrun(runner, request))
            return 0
        sw = start(runner, request)
        how = "one native array job" if sw.array else "one job per trial"
        print(f"{PROG}: {sw.id}: {len(sw.points)} trials, {how}", file=sys.stderr)
        printed = 0
        while True:  # each handle as it is submitted, in grid order
            handles = sw.handles
            while printed < len(handles) and handles[printed] is not None:
                print(handles[printed], flush=True)
                printed += 1
            if printed == len(handles) or not sw.submitting:
                break
            time.sleep(0.2)
        if not (args.wait or args.max_parallel or args.fail_fast):
            return 0
        statuses = sw.wait()
        from torchx_nb.sweeps import sweep_text

        print(sweep_text(sw.id, sw.points, sw.handles, statuses, sw.array, sw.stopped))
        ok = all(s is not None and s.state == AppState.SUCCEEDED for s in statuses)
        return 0 if ok else 1


def cmd_status(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from torchx_nb.specs.api import UnknownAppException, display_url
    from torchx_nb.specs.failure import strip_escapes

    with _runner() as runner:
        status = runner.status(args.app_handle)
        if status is None:
            raise UnknownAppException(args.app_handle)
        shown = replace(status, ui_url=display_url(status.ui_url)).format()
        print(strip_escapes(shown))  # a message may quote a program's coloured output
        for card in runner.failure_cards(args.app_handle, status):
            print(redact_text(card.text()))
        for line in runner.attempt_lines(args.app_handle):
            print(strip_escapes(line))
        notice = runner.notice_line(args.app_handle)
        if notice:
            print(f"Notice: {notice}")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from torchx_nb.redact import redact
    from torchx_nb.specs.api import UnknownAppException

    with _runner() as runner:
        app = runner.describe(args.app_handle)
        if app is None:
            raise UnknownAppException(args.app_handle)
        print(json.dumps(redact(asdict(app)), indent=2, default=str))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    if args.app_handle.startswith("sweep-"):
        from torchx_nb.sweeps import Sweep, TrialsNotCancelled

        with _runner() as runner:
            sw = Sweep.attach(runner, args.app_handle)
            try:
                sw.cancel()
            except TrialsNotCancelled as e:  # one line per trial that may still run
                for line in str(e).splitlines():
                    print(f"{PROG}: error: {line}", file=sys.stderr)
                return 1
            print(f"{PROG}: cancel requested for the trials of {sw.id}", file=sys.stderr)
        return 0
    with _runner() as runner:
        runner.cancel(args.app_handle)
        print(f"{PROG}: cancel requested for {args.app_handle}", file=sys.stderr)
    return 0


def cmd_preempt(args: argparse.Namespace) -> int:
    with _runner() as runner:
        note = runner.preempt(args.app_handle, args.grace)
        if note:
            print(f"{PROG}: {note}", file=sys.stderr)
        print(
            f"{PROG}: preempted {args.app_handle}: it gets SIGTERM, then runs again as its"
            " backend runs a preempted job",
            file=sys.stderr,
        )
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    from torchx_nb.specs.api import is_terminal
    from torchx_nb.specs.exceptions import RemoteTraceback

    with _runner() as runner:
        status = runner.wait(args.app_handle, wait_interval=0.5, timeout=args.timeout)
        if status is not None and not is_terminal(status.state):
            raise CliError(f"{args.app_handle} is still {status.state.name} after {args.timeout} s")
        try:
            value = runner.result(args.app_handle, status)
        except Exception as e:
            if not isinstance(e.__cause__, RemoteTraceback):
                raise
            sys.stderr.write(e.__cause__.text)
            raise TorchxNbError(f"the cell raised {type(e).__name__}: {e}") from None
    print(repr(value))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    with _runner() as runner:
        for line in runner.environment(args.app_handle).lines():
            print(line)
    return 0


def cmd_outputs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from torchx_nb.progress import TextProgress
    from torchx_nb.specs.api import parse_app_handle

    with _runner() as runner:
        if args.download is None:
            for f in runner.outputs(args.app_handle):
                print(f"{f.size:>12}  {f.path}")
            return 0
        app_id = parse_app_handle(args.app_handle).app_id
        dest = Path(args.download or Path(current_folder()) / app_id.replace(":", "-"))
        progress = TextProgress()
        try:
            folder = runner.download(args.app_handle, dest, progress)
        finally:
            progress.close()
        print(f"{PROG}: downloaded the outputs of {args.app_handle} to {folder}", file=sys.stderr)
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    from torchx_nb.specs.api import parse_app_handle
    from torchx_nb.specs.log_line import Stream

    m = _LOG_TARGET_RE.fullmatch(args.identifier)
    if not m:
        parse_app_handle(args.identifier)
        raise CliError(f"cannot read {args.identifier!r}: expected HANDLE[/ROLE[/REPLICA,...]]")
    handle, role, reps = m.group("handle"), m.group("role"), m.group("replicas")
    replicas = [int(x) for x in reps.split(",") if x] if reps else None
    with _runner() as runner:
        targets = _replicas(runner, handle, role, replicas)
        streams = Stream(args.streams) if args.streams else None
        _print_logs(
            runner, handle, targets, sys.stdout, regex=args.regex, tail=args.tail, streams=streams
        )
    return 0


def _fmt_time(ts: float | None) -> str:
    if not ts:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def cmd_list(args: argparse.Namespace) -> int:
    from torchx_nb.joblist import job_rows

    with _runner() as runner:
        rows = job_rows(runner, scheduler=args.scheduler, limit=None if args.all else args.limit)
    from torchx_nb.phases import fmt_duration

    headers = ["HANDLE", "STATE", "NAME", "SUBMITTED", "DURATION", "QUEUED", "RAN"]
    table = [
        [
            r["handle"],
            r["state"],
            r["name"],
            _fmt_time(r["submitted"]),
            fmt_duration(r["duration"]),
            fmt_duration(r["queued"]),
            fmt_duration(r["ran"]),
        ]
        for r in rows
    ]
    _print_table(headers, table)
    return 0


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip())


def cmd_runopts(args: argparse.Namespace) -> int:
    with _runner() as runner:
        names = [args.scheduler] if args.scheduler else runner.scheduler_backends()
        for name in names:
            print(f"{name}:")
            print(repr(runner.scheduler_run_opts(name)))
    return 0


def cmd_builtins(args: argparse.Namespace) -> int:
    print(builtins_text())
    return 0


def cmd_schedulers(args: argparse.Namespace) -> int:
    with _runner() as runner:
        factories = runner.scheduler_factories()
    rows = [[name, getattr(f, "module", "")] for name, f in factories.items()]
    _print_table(["SCHEDULER", "MODULE"], rows)
    return 0


def cmd_resources(args: argparse.Namespace) -> int:
    from torchx_nb.specs import named_resources

    rows = []
    for name in named_resources.names():
        r = named_resources[name]
        rows.append([name, str(r.cpu), str(r.gpu), str(r.memMB)])
    _print_table(["NAME", "CPU", "GPU", "MEM_MB"], rows)
    return 0


def cmd_configure(args: argparse.Namespace) -> int:
    from torchx_nb import config

    with _runner() as runner:
        names = args.schedulers.split(",") if args.schedulers else runner.scheduler_backends()
        opts = {n: runner.scheduler_run_opts(n) for n in names}
    if args.print_:
        config.dump_runopts(sys.stdout, opts, required_only=not args.all)
        return 0
    path = os.path.join(current_folder(), config.CONFIG_FILE)
    if os.path.exists(path):
        raise CliError(f"{path} exists already; use --print and merge by hand")
    with open(path, "w") as f:
        config.dump_runopts(f, opts, required_only=not args.all)
    print(f"{PROG}: wrote {path}", file=sys.stderr)
    return 0


COMMANDS = {
    "builtins": cmd_builtins,
    "run": cmd_run,
    "watch": cmd_watch,
    "sweep": cmd_sweep,
    "status": cmd_status,
    "describe": cmd_describe,
    "cancel": cmd_cancel,
    "preempt": cmd_preempt,
    "result": cmd_result,
    "outputs": cmd_outputs,
    "env": cmd_env,
    "log": cmd_log,
    "list": cmd_list,
    "runopts": cmd_runopts,
    "schedulers": cmd_schedulers,
    "resources": cmd_resources,
    "configure": cmd_configure,
    "run-notebook": cmd_run_notebook,
}


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchx-nb`` command."""
    warnings.showwarning = _one_line_warning
    try:
        args = build_parser().parse_args(argv)
        current_folder()
        try:
            return COMMANDS[args.cmd](args)
        finally:
            # a job-end notice this command took gets up to 2 s more; one still owed stays in
            # the job store for the next process (a command that never saw a job end or an
            # owed notice never loaded the module: nothing to wait for)
            notices = sys.modules.get("torchx_nb.notices")
            if notices is not None:
                for handle in notices.finish(2.0):
                    print(f"{PROG}: {notices.owed_line(handle)}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    except Exception as e:
        from torchx_nb.errors import one_line

        if os.environ.get("TORCHX_NB_DEBUG"):
            raise
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        from torchx_nb.specs.exceptions import exit_status

        return exit_status(e)


def command() -> NoReturn:
    """The ``torchx-nb`` console script (and ``python -m torchx_nb.cli``): ``main``, then the
    interpreter's exit without its teardown (``exit_now``)."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """Exit as the interpreter does (wait for non-daemon threads, run the ``atexit``
    handlers, flush stdout and stderr) without its teardown: freeing every module and object
    took a command 20 to 45 ms of its ~200 (the job store's connection is closed by an atexit
    handler, so its WAL is written into the file: ``jobstore._close_at_exit``)."""
    import atexit
    import contextlib
    import threading

    # as the interpreter's exit: the hooks registered with threading (concurrent.futures shuts
    # its thread pools down there), then a wait for the non-daemon threads
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)
