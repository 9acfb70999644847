"""Runs a whole notebook as a job's program, under nbclient (torchx_nb's notebook runner).

``python .torchx-nb/cell_main.py --notebook NB.ipynb [--cell-timeout S]`` hands over to
``main`` here (the run's start, failure records and uploads are the cell runner's).
The parameters are injected as papermill does; the executed notebook is saved into the
output folder as it runs. A cell over ``--cell-timeout`` is interrupted and, when it is still
running ``TIMEOUT_GRACE`` seconds later (it ignores or catches SIGINT), its kernel is
stopped: either way the job fails naming the cell and the limit.

Part of the job-side runner: it ships with it into images without torchx_nb (standard
library only; nbclient, nbformat and ipykernel are the job's, imported when it runs).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import math
import os
import re
import shutil
import signal
import sys
import time
from typing import Any

from . import checkpoint
from .cancel import CANCELLED_EXIT
from .common import OWN, shipped, write
from .records import record_failure
from .start import start
from .upload import upload_one

PARAMETERS_FILE = "notebook-parameters.txt"  # shipped beside the runner: the values, a literal
NOTEBOOK_SAVE_EVERY = 3.0  # seconds between saves of the executed notebook, at most
NOTEBOOK_UPLOAD_EVERY = 30.0  # and between its uploads, on an object-store backend
UPLOAD_EVERY_ENV = "TORCHX_NB_NOTEBOOK_UPLOAD_EVERY"  # seconds, to change the 30 s (tests)
KERNEL = "torchx-nb-job-python"
TIMEOUT_GRACE = 5.0  # seconds a timed-out cell has to end after its interrupt


def _first_line(source: str) -> str:
    line = next((x.strip() for x in source.splitlines() if x.strip()), "")
    return line if len(line) <= 60 else line[:59] + "…"


_NON_FINITE = {"nan": math.nan, "inf": math.inf}


def _non_finite(tree: Any, make: Any) -> bool:
    """Replace each ``nan``/``inf`` name in ``tree`` (how ``repr`` writes non-finite floats)
    with ``make(name)``; whether there was one."""
    import ast

    found = False
    for node in ast.walk(tree):
        for field, child in ast.iter_fields(node):
            items = child if isinstance(child, list) else [child]
            for i, item in enumerate(items):
                if isinstance(item, ast.Name) and item.id in _NON_FINITE:
                    found = True
                    if isinstance(child, list):
                        child[i] = make(item.id)
                    else:
                        setattr(node, field, make(item.id))
    return found


def read_literal(text: str) -> Any:
    """A value written by ``repr``, read back as ``ast.literal_eval`` reads it, and with the
    non-finite floats ``repr`` writes as ``nan`` and ``inf`` (which literal_eval refuses)."""
    import ast

    tree = ast.parse(text.strip(), mode="eval")
    _non_finite(tree, lambda name: ast.Constant(_NON_FINITE[name]))
    return ast.literal_eval(tree)


def python_source(value: Any) -> str:
    """``value`` as the injected cell writes it: its ``repr``, with a non-finite float as
    ``float('nan')``/``float('inf')``, as papermill writes them (a bare ``nan`` is a
    NameError in the kernel)."""
    import ast

    text = repr(value)
    if "nan" not in text and "inf" not in text:
        return text
    tree = ast.parse(text, mode="eval")

    def call(name: str) -> Any:
        return ast.Call(ast.Name("float", ast.Load()), [ast.Constant(name)], [])

    return ast.unparse(tree) if _non_finite(tree, call) else text


def inject_parameters(nb: Any, params: dict[str, Any]) -> None:
    """papermill's convention: the values go into a code cell tagged ``injected-parameters``
    (replacing one left by an earlier run) right after the cell tagged ``parameters``, or
    first when there is none."""
    import nbformat

    cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    if params:
        source = "# Parameters\n" + "".join(
            f"{k} = {python_source(v)}\n" for k, v in params.items()
        )
        injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
        at = next(
            (i + 1 for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])), 0
        )
        cells.insert(at, injected)
    nb.cells = cells


SOCKET_ROOM = 80  # characters a private folder's path may take: AF_UNIX paths end at 107


def _private_folder() -> str:
    """A private (0700) folder for the kernel's spec and IPC sockets: under the temporary
    folder when its path leaves room for a socket's (a long $TMPDIR does not), else /tmp,
    else the working folder. Removed when the run ends."""
    import tempfile

    for base in (tempfile.gettempdir(), "/tmp", os.getcwd()):
        if len(base) < SOCKET_ROOM - 12 and os.access(base, os.W_OK):
            return tempfile.mkdtemp(prefix="tnb-", dir=base)
    return tempfile.mkdtemp(prefix="tnb-", dir=os.path.relpath(os.getcwd()))


def _kernel_here(root: str) -> None:
    """A kernelspec running this very Python, first on the Jupyter path: the notebook's own
    kernelspec names the user's machine's kernel, not the job's."""
    folder = os.path.join(root, "kernels", KERNEL)
    os.makedirs(folder, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (job)",
        "language": "python",
    }
    with open(os.path.join(folder, "kernel.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [root, *filter(None, [os.environ.get("JUPYTER_PATH")])]
    )


def upload_every() -> float:
    """Seconds between uploads of the executed notebook: ``$TORCHX_NB_NOTEBOOK_UPLOAD_EVERY``
    when it is a number of at least 1, else 30."""
    import math

    try:
        every = float(os.environ.get(UPLOAD_EVERY_ENV, ""))
    except ValueError:
        return NOTEBOOK_UPLOAD_EVERY
    return every if math.isfinite(every) and every >= 1 else NOTEBOOK_UPLOAD_EVERY


class _OverLimit(Exception):
    """A cell went on past its time limit and then ended (its interrupt caught or ignored)."""


class CellLimit:
    """Holds each code cell to ``limit`` seconds: past it the kernel is interrupted (SIGINT,
    as the stop button does), and ``TIMEOUT_GRACE`` seconds later a cell still running has its
    kernel's process group killed. nbclient's own ``interrupt_on_timeout`` only interrupts
    (again after each further ``timeout``) and then reports no timeout at all."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.over: int | None = None  # the cell that went past the limit
        self.killed = False
        self._task: asyncio.Future[None] | None = None

    def start(self, client: Any, index: int) -> None:
        self.end()
        self._task = asyncio.ensure_future(self._watch(client, index))

    def end(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _watch(self, client: Any, index: int) -> None:
        await asyncio.sleep(self.limit)
        self.over = index
        what = f"[torchx_nb] cell {index + 1} is over --cell-timeout ({self.limit:g} s)"
        print(f"{what}: interrupting it", flush=True)
        await _maybe_await(client.km.interrupt_kernel())
        await asyncio.sleep(TIMEOUT_GRACE)
        print(f"{what} and still running: stopping its kernel", flush=True)
        self.killed = True
        await _maybe_await(client.km.signal_kernel(signal.SIGKILL))


async def _maybe_await(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) or asyncio.isfuture(value) else value


def _parameters() -> dict[str, Any]:
    """The run's own values, from the file shipped beside the runner (none without it)."""
    path = shipped(PARAMETERS_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        values = read_literal(f.read())
    return dict(values)


def _exited_cleanly(e: Any) -> bool:
    """Whether the cell ended with ``sys.exit()``, ``sys.exit(0)`` or ``sys.exit(None)``: a
    success that stops the run, as papermill has it (and Python, for a script)."""
    return e.ename == "SystemExit" and (e.evalue or "").strip() in ("", "0", "None")


#: what a SIGTERM is, as the job sees it
BY_SIGTERM = "a cancel or a preemption: the job's status says which"


def _cancelled_starting(signum: int, frame: Any) -> None:
    """A cancel while the runner starts (nbclient importing, the notebook not read yet): no
    cell ran and there is nothing to save, but the log says so (Python's own end on SIGTERM
    said nothing)."""
    sys.stderr.write(
        f"torchx_nb: stopped before its first cell by SIGTERM ({BY_SIGTERM}), while starting:"
        " nothing ran\n"
    )
    raise SystemExit(128 + signum)


def run_notebook(path: str, cell_timeout: float | None) -> int:
    """Execute the notebook at ``path`` with its parameters injected, saving it into the
    output folder as it runs (after a cell, at most every few seconds; on an object-store
    backend uploaded at most every 30 s) and at the end, however it ends. A failing cell, a
    cell over its time limit or a kernel that dies ends the job with status 1, the cell named
    (index and first line) in the error the failure card shows."""
    signal.signal(signal.SIGTERM, _cancelled_starting)  # until the notebook's own handler
    folder, point, cancelled_first = start()
    if cancelled_first:
        return CANCELLED_EXIT
    out = os.path.join(folder, OWN)
    write(out, "notebook.txt", os.path.basename(path).encode())  # result(): no value
    try:
        import ipykernel  # noqa: F401
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError, DeadKernelError
    except ImportError as e:
        text = (
            f"ModuleNotFoundError: the job's Python ({sys.executable}) has no {e.name}: a"
            " notebook job needs nbclient and ipykernel there (pip install nbclient ipykernel"
            " in the image)"
        )
        write(out, "error-0.txt", text.encode())
        sys.stderr.write(f"torchx_nb: {text}\n")
        return 1
    url = os.environ.get("TORCHX_NB_OUTPUT_URL", "")
    nb = nbformat.read(path, as_version=4)
    if nb.nbformat_minor < 5:  # as papermill: cell ids (the injected cell has one) need 4.5
        nb = nbformat.v4.upgrade(nb, from_version=4, from_minor=nb.nbformat_minor)
    kernelspec = dict(nb.metadata.get("kernelspec") or {})
    # a sweep trial's point over the run's own values
    inject_parameters(nb, {**_parameters(), **point})
    target = os.path.join(folder, os.path.basename(path))
    # never so far: a machine up for less than the intervals saves and uploads at once
    state = {"saved": -math.inf, "uploaded": -math.inf, "cell": -1, "began": 0.0}
    every = upload_every()
    later: dict[str, asyncio.TimerHandle] = {}  # a save or upload owed, made up on time

    def owe(what: str, wait: float, do: Any) -> None:
        """``do`` in ``wait`` seconds, unless it is owed already (one timer for each)."""
        if what in later:
            return

        def due() -> None:
            later.pop(what, None)
            do()

        with contextlib.suppress(RuntimeError):  # no running loop: the end saves anyway
            later[what] = asyncio.get_running_loop().call_later(wait, due)

    def settle(what: str) -> None:
        """It is being done now: a timer owing it is no longer needed."""
        timer = later.pop(what, None)
        if timer is not None:
            timer.cancel()

    def save(final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - state["saved"] < NOTEBOOK_SAVE_EVERY:
            owe("save", NOTEBOOK_SAVE_EVERY - (now - state["saved"]), save)
            return
        settle("save")
        if kernelspec:
            nb.metadata["kernelspec"] = kernelspec
        tmp = f"{target}.part"
        nbformat.write(nb, tmp)
        os.replace(tmp, target)
        state["saved"] = now
        if url and not final:
            upload()

    def upload() -> None:
        """The notebook as last saved goes up, at most every ``every`` seconds: one held back
        goes up when the interval is over, so the store is never more than that behind."""
        now = time.monotonic()
        if now - state["uploaded"] < every:
            owe("upload", every - (now - state["uploaded"]), upload)
            return
        settle("upload")
        with contextlib.suppress(Exception):  # the end uploads everything anyway
            upload_one(target, url)
            # counted from its end (the first also imports and makes the client): PUTs
            # are never closer than the interval
            state["uploaded"] = time.monotonic()

    def cancel_line() -> str:
        """The one log line of a SIGTERM, naming the cell it came during. A cancel and a
        preemption both arrive as SIGTERM and nothing in the job tells them apart on every
        backend (the backend's record does: status says which), so the line names neither."""
        i = int(state["cell"])
        where = (
            f"during cell {i + 1} ({_first_line(nb.cells[i].source)!r})"
            if i >= 0
            else "before its first cell"
        )
        return (
            f"torchx_nb: stopped {where} by SIGTERM ({BY_SIGTERM}): the notebook is saved as"
            " far as it ran"
        )

    def stop(signum: int, frame: Any) -> None:  # before the kernel runs: end at once
        checkpoint.note_sigterm()  # the runner's end saves the checkpoint within the grace
        sys.stderr.write(f"{cancel_line()}\n")
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)

    killing: list[asyncio.Future[Any]] = []

    def cancel() -> None:
        """A cancel (SIGTERM) once the event loop runs: the kernel, when there is one, is
        killed; nbclient then ends as for a dead kernel (or one that died starting), the
        notebook is saved and the job ends as killed by SIGTERM (CANCELLED)."""
        state["cancelled"] = 1.0
        checkpoint.note_sigterm()
        km = client.km
        if km is not None and km.has_kernel:
            killing.append(asyncio.ensure_future(_maybe_await(km.signal_kernel(signal.SIGKILL))))

    root = _private_folder()
    _kernel_here(root)
    from traitlets.config import Config

    # IPC sockets in a private folder, not TCP: on a shared node (Slurm) no other user can
    # reach the kernel
    ipc = {"transport": "ipc", "ip": os.path.join(root, "k")}

    class Echoing(NotebookClient):
        """Each cell's printed output goes to the job's log too, as it comes: the live log
        widget follows a notebook job as it follows a cell."""

        async def async_start_new_kernel(self, **kwargs: Any) -> None:
            # nbclient has just set its own SIGTERM handler, which tears the kernel client
            # down under its start (a raw CancelledError, exit 1): a cancel from here on is
            # ours, and a kernel started after it is killed at once
            with contextlib.suppress(RuntimeError, NotImplementedError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, cancel)
            await super().async_start_new_kernel(**kwargs)
            if state.get("cancelled"):
                cancel()

        def output(self, outs: Any, msg: Any, display_id: Any, cell_index: int) -> Any:
            content = msg.get("content") or {}
            if msg.get("msg_type") == "stream":
                to = sys.stderr if content.get("name") == "stderr" else sys.stdout
                to.write(content.get("text", ""))
                to.flush()
            return super().output(outs, msg, display_id, cell_index)

    limit = CellLimit(cell_timeout) if cell_timeout else None

    def started(cell: Any, cell_index: int, **_: Any) -> None:
        state["cell"], state["began"] = cell_index, time.monotonic()
        if cell.cell_type == "code":
            print(f"[torchx_nb] cell {cell_index + 1}: {_first_line(cell.source)}", flush=True)

    def executing(cell: Any, cell_index: int, **_: Any) -> None:
        if limit is not None:  # only cells the kernel runs (not empty or markdown ones)
            limit.start(client, cell_index)

    def executed(**_: Any) -> None:
        if limit is not None:
            limit.end()
        save()
        if limit is not None and limit.over is not None:
            raise _OverLimit  # the cell ended after its interrupt: still a failure

    client = Echoing(
        nb,
        config=Config({"KernelManager": ipc}),
        kernel_name=KERNEL,
        timeout=None,  # CellLimit holds the cells to --cell-timeout
        # the kernel runs in the notebook's folder, as in JupyterLab, whatever the workspace
        resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
        on_cell_start=started,
        on_cell_execute=executing,
        on_cell_executed=executed,
    )

    def failed(kind: str, message: str, tb: str = "") -> int:
        i = int(state["cell"])
        # counted from 1 in the executed notebook (its injected parameters cell included)
        where = f"cell {i + 1} ({_first_line(nb.cells[i].source)!r})" if i >= 0 else "the notebook"
        text = f"{kind} in {where}: {message}"
        if tb:
            sys.stderr.write(re.sub(r"\x1b\[[0-9;]*m", "", tb).rstrip() + "\n")
        return record_failure(out, kind, f"in {where}: {message}", text, tb)

    timeout = f"over --cell-timeout ({cell_timeout:g} s)" if cell_timeout else ""
    try:
        client.execute()
    except BaseException as e:
        if state.get("cancelled"):  # whatever nbclient made of its killed kernel
            sys.stderr.write(f"{cancel_line()}\n")
            return 128 + signal.SIGTERM
        if not isinstance(e, (_OverLimit, CellExecutionError, DeadKernelError)):
            raise
        if isinstance(e, CellExecutionError) and _exited_cleanly(e):
            i = int(state["cell"])
            print(
                f"[torchx_nb] cell {i + 1} called sys.exit({e.evalue}): the run ends there, a"
                " success (as papermill)",
                flush=True,
            )
            return 0
        if limit is not None and limit.over is not None:
            if limit.killed:
                timeout += (
                    f"; still running {TIMEOUT_GRACE:g} s after its interrupt, so its kernel"
                    " was stopped"
                )
            return failed("CellTimeoutError", timeout)
        if isinstance(e, DeadKernelError):
            return failed("DeadKernelError", "the kernel died (killed, out of memory, or os._exit)")
        assert isinstance(e, CellExecutionError)
        return failed(e.ename or "Exception", e.evalue or "", str(e))
    finally:
        # left registered by nbclient when its kernel failed to start (a cancel then): at
        # exit it would assert on a kernel manager that is gone
        atexit.unregister(client._cleanup_kernel)
        if limit is not None:
            limit.end()
        for handle in later.values():
            handle.cancel()
        save(final=True)
        shutil.rmtree(root, ignore_errors=True)  # nothing of the kernel is left behind
    if state.get("cancelled"):  # after its last cell: still a cancel
        sys.stderr.write(f"{cancel_line()}\n")
        return 128 + signal.SIGTERM
    return 0


def main(argv: list[str]) -> int:
    """``NB.ipynb [--cell-timeout S]``: run the notebook; the exit status."""
    limit = argv[argv.index("--cell-timeout") + 1] if "--cell-timeout" in argv else None
    return run_notebook(argv[0], float(limit) if limit else None)
