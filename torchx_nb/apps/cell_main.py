"""Runs a notebook cell as a job's main program and keeps what it gives back (torchx_nb).

``python cell_main.py CELL.py [ARGS...]`` runs the cell's source in a fresh namespace (with the
variables the kernel pushed, ``$TORCHX_NB_PUSH``), as IPython would: the value of the last
statement when it is an expression (and the cell does not end with ``;``) is the job's result.
Rank 0 (``$RANK``, torchrun's) writes it with cloudpickle to ``$TORCHX_OUTPUT_DIR/.torchx-nb/``
with a short repr beside it (none for ``None``: nothing to show); a rank whose cell raises writes its exception and traceback there
and exits 1. With ``$TORCHX_NB_OUTPUT_URL`` (``s3://`` or ``gs://``) the output folder is
uploaded there at the end, with boto3 or google-cloud-storage from the image.

An array task whose backend cannot stop one task (GCP Batch) is given
``$TORCHX_NB_CANCEL_POLL`` (seconds): the runner looks that often for a cancel mark
(``.torchx-nb/cancel`` under its upload target) and, once it is there, uploads what the cell
wrote so far and exits with ``CANCELLED_EXIT`` — at once, before the cell runs, if the mark was
there first.

Standalone on purpose: it ships into images that do not have torchx_nb, with the kernel's own
cloudpickle beside it (so both sides pickle alike); only the standard library is imported here.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import linecache
import math
import os
import pickle
import reprlib
import sys
import threading
import time
import traceback
from typing import Any

CELL = "<cell>"
OWN = ".torchx-nb"
SITE_DIRS = {"site-packages", "dist-packages"}  # where IPython puts '' before the first
REPR_CHARS = 300
CANCEL_MARK = "cancel"  # in OWN under a trial's upload target: "stop this trial"
CANCELLED_EXIT = 170  # the exit status of a trial stopped by its cancel mark


def _cloudpickle() -> Any:
    """cloudpickle: the image's, else the copy shipped beside this file."""
    try:
        import cloudpickle
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor"))
        import cloudpickle
    return cloudpickle


def _rank() -> int:
    for name in ("RANK", "TORCHX_REPLICA_ID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def _env_record() -> Any:
    """The module beside this file that records what the job ran (None when it is absent)."""
    return _beside("env_record")


def _beside(name: str) -> Any:
    """The module ``name`` shipped beside this file (None when it is absent)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"torchx_nb_{name}", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(folder: str, name: str, data: bytes) -> None:
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(folder, name))


class _Short(reprlib.Repr):
    """reprlib's bounded repr (a huge list costs no more than a short one), keeping a dict's
    order as ``repr`` shows it (reprlib sorts the keys)."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [
            f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
            for k, v in list(x.items())[: self.maxdict]
        ]
        if len(x) > self.maxdict:
            items.append("...")
        return "{" + ", ".join(items) + "}"

    def repr_bytes(self, x: bytes | bytearray, level: int) -> str:
        """Only the ends of ``x`` are copied and shown: reprlib has no bytes handler and would
        ``repr`` the whole value first (4 characters a byte of binary data, so a multi-GB result
        could kill the job after its cell succeeded)."""
        n = self.maxstring
        if len(x) <= n:
            return repr(bytes(x))
        head = max(0, (n - 3) // 2)
        tail = max(0, n - 3 - head)
        left = repr(bytes(x[:head]))  # b'...' (or b"..." when it holds a ')
        right = repr(bytes(x[len(x) - tail :]))
        quote = right[-1]
        return left[:-1][: head + 2] + self.fillvalue + right[2:-1][-tail:] + quote

    def repr_bytearray(self, x: bytearray, level: int) -> str:
        """As :meth:`repr_bytes`, inside ``bytearray(...)``."""
        return f"bytearray({self.repr_bytes(x, level)})"


def _short_repr(value: Any) -> str:
    short = _Short()
    short.maxstring = short.maxother = REPR_CHARS
    try:
        text = short.repr(value)
    except Exception as e:  # a __repr__ that raises
        text = f"<{type(value).__name__} (repr failed: {e})>"
    return text[:REPR_CHARS]


def _cell_traceback(exc: BaseException) -> str:
    """The traceback as Python prints it, from the cell's own frames on (this runner's are
    dropped), its lines named ``<cell>`` with the cell's line numbers."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _record_python(out: str) -> None:
    """The Python that pickled what is written here (the kernel checks it before unpickling)."""
    _write(out, "python.txt", f"{sys.version_info.major}.{sys.version_info.minor}".encode())


def _record_error(out: str, exc: BaseException, pickler: Any) -> None:
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    kind = kind.removeprefix("builtins.").removeprefix("__main__.")
    try:
        message = str(exc)
    except Exception as e:  # a __str__ that raises
        message = f"<str() failed: {type(e).__name__}>"
    record: dict[str, Any] = {
        "type": kind,
        "message": message,
        "traceback": _cell_traceback(exc),
        "pickled": None,
    }
    # apart from the text: a kernel that cannot rebuild the exception (an __init__ with several
    # arguments, a type only the job can import) still gets type, message and traceback
    with contextlib.suppress(Exception):
        record["pickled"] = pickler.dumps(exc)
    rank = _rank()
    _record_python(out)
    _write(out, f"error-{rank}.pkl", pickler.dumps(record))
    # a lone surrogate (a file name read with surrogateescape) is written as its escape
    _write(out, f"error-{rank}.txt", f"{kind}: {message}".encode(errors="backslashreplace"))


def _record_failure(out: str, kind: str, message: str, line: str, tb: str = "") -> int:
    """A failure that is not an exception of the program's own (a module the job lacks, a
    notebook cell that failed): the same record an exception leaves (the kernel re-raises it
    as a RemoteError), its one ``line`` for the failure card and the log. Returns the exit
    status, 1."""
    record = {"type": kind, "message": message, "traceback": tb, "pickled": None}
    _write(out, "error-0.pkl", pickle.dumps(record))
    _write(out, "error-0.txt", line.encode())
    sys.stderr.write(f"torchx_nb: {line}\n")
    return 1


def grid_point(grid: dict[str, Any], index: int) -> dict[str, Any]:
    """Point ``index`` of a grid given as its names and lists (``Grid.spec``): with ``zip``
    the i-th value of each list, else the product's, the last list varying fastest."""
    names, lists = grid["names"], grid["lists"]
    size = len(lists[0]) if grid["zip"] else math.prod(len(values) for values in lists)
    if not 0 <= index < size:
        raise RuntimeError(f"torchx_nb: array task {index} is outside the grid's {size} points")
    if grid["zip"]:
        return {name: lists[j][index] for j, name in enumerate(names)}
    picked = [0] * len(names)
    for j in reversed(range(len(names))):
        index, picked[j] = divmod(index, len(lists[j]))
    return {name: lists[j][picked[j]] for j, name in enumerate(names)}


def _trial() -> tuple[int | None, dict[str, Any]]:
    """A sweep trial's index and parameters: ``$TORCHX_NB_PARAMS`` (a JSON object: a trial
    run as its own job), or the point of ``$TORCHX_NB_GRID`` (names and lists) at the index
    the native array gives (``$TORCHX_NB_TRIAL_FROM`` names the variable holding it; AWS
    Batch's child job id ``PARENT:INDEX`` stands in when the index variable is missing)."""

    params = os.environ.get("TORCHX_NB_PARAMS")
    if params:
        return None, json.loads(params)
    grid = os.environ.get("TORCHX_NB_GRID")
    if not grid:
        return None, {}
    raw = os.environ.get(os.environ.get("TORCHX_NB_TRIAL_FROM", ""), "")
    if not raw.isdigit():
        raw = os.environ.get("AWS_BATCH_JOB_ID", "").rpartition(":")[2]
    if not raw.isdigit():
        raise RuntimeError("torchx_nb: this array task has no index: cannot pick its point")
    index = int(raw)
    return index, grid_point(json.loads(grid), index)


_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _guarded(handlers: list[ast.ExceptHandler]) -> bool:
    """Whether a ``try`` catches a failed import (so the import is optional)."""
    for h in handlers:
        if h.type is None:
            return True
        names = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any(isinstance(n, ast.Name) and n.id in _GUARDS for n in names):
            return True
    return False


def required_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """The top-level modules of a program's leading imports (before its first other
    statement, so a cell that installs or puts a folder on ``sys.path`` first is never judged
    early), skipping a ``try`` that catches ImportError: each with its line."""
    found: list[tuple[str, int]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.extend((a.name.split(".")[0], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Try) and _guarded(node.handlers):
            continue
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break
    return found


def missing_import(tree: ast.Module, source_lines: list[str]) -> str | None:
    """One line naming the first module the program needs that this Python cannot find
    (checked before anything runs, without importing it), with where it runs; else None."""
    import importlib.util

    for name, line in required_imports(tree):
        if name == "__future__" or name in sys.builtin_module_names:
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            text = source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""
            image = os.environ.get("TORCHX_NB_BASE_IMAGE")
            where = f"{sys.executable}" + (f" in the image {image}" if image else "")
            return (
                f"No module named {name!r} in this job (line {line}: {text[:80]}): the job's"
                f" Python is {where}; install {name} there, or ship it in the workspace"
            )
    return None


def _ends_with_semicolon(source: str) -> bool:
    """IPython's rule: a cell whose last token (comments aside) is ``;`` shows no value."""
    import io
    import tokenize

    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.ENDMARKER,
        tokenize.INDENT,
        tokenize.DEDENT,
    }
    last = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in skip:
                last = tok
    except (tokenize.TokenError, SyntaxError):
        return source.rstrip().endswith(";")
    return last is not None and last.type == tokenize.OP and last.string == ";"


def _env_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _start() -> tuple[str, dict[str, Any], bool]:
    """What a cell and a notebook share at the start: this run's output folder (an array
    task: its own, and its own upload target), its sweep values (also as
    ``$TORCHX_PARAM_NAME``), and whether it was cancelled before it started (a trial with a
    cancel mark to look for is watched from then on)."""
    folder = os.environ.get("TORCHX_OUTPUT_DIR") or "torchx-outputs"
    index, params = _trial()
    for name, value in params.items():
        os.environ[f"TORCHX_PARAM_{name.upper()}"] = _env_value(value)
    if index is not None:  # one array task: its own folder and upload target
        folder = os.path.join(folder, str(index))
        os.environ["TORCHX_OUTPUT_DIR"] = folder
        url = os.environ.get("TORCHX_NB_OUTPUT_URL")
        if url:
            os.environ["TORCHX_NB_OUTPUT_URL"] = f"{url.rstrip('/')}/{index}/"
    os.makedirs(folder, exist_ok=True)  # the program may write there at once
    _record_python(
        os.path.join(folder, OWN)
    )  # the runner started: a missing result is the program's
    record = _env_record()
    if record is not None and _rank() == 0:  # a planned distribution it lacks: one line each
        record.check_plan(record.planned())
    url = os.environ.get("TORCHX_NB_OUTPUT_URL", "")
    poll = os.environ.get("TORCHX_NB_CANCEL_POLL", "")
    if url and poll:
        mark = f"{url.rstrip('/')}/{OWN}/{CANCEL_MARK}"
        if _looked_for(mark, warn=True):
            sys.stderr.write("torchx_nb: this trial was cancelled before it started\n")
            return folder, params, True
        every = max(float(poll), 0.1) if poll.replace(".", "", 1).isdigit() else 5.0
        threading.Thread(target=_watch_cancel, args=(mark, every, folder, url), daemon=True).start()
    return folder, params, False


def _workspace_on_path(*folders: str) -> None:
    """The job runs in its workspace: put it (then the cell's own folder: on local_cwd and
    Slurm a private one) where IPython puts ``''`` in a kernel, after the standard library
    and before the first site-packages, so a ``statistics.py`` there shadows the standard
    module in the job exactly when it does in the kernel (not at all)."""
    for path in folders:
        while path in sys.path:
            sys.path.remove(path)
    # none (python -S): first, as IPython does then
    at = next((i for i, p in enumerate(sys.path) if os.path.basename(p) in SITE_DIRS), 0)
    sys.path[at:at] = list(folders)


def run(script: str, args: list[str]) -> int:
    """Run the cell; returns the process's exit status."""
    pickler = _cloudpickle()
    folder, params, cancelled = _start()
    if cancelled:
        return CANCELLED_EXIT
    out = os.path.join(folder, OWN)
    with open(script, encoding="utf-8") as f:
        source = f.read()
    linecache.cache[CELL] = (len(source), None, source.splitlines(keepends=True), CELL)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__, **params}
    sys.argv = [script, *args]
    _workspace_on_path(os.getcwd(), os.path.dirname(os.path.abspath(script)))
    try:
        tree = ast.parse(source, CELL)
        missing = missing_import(tree, source.splitlines())
        if missing is not None:  # one line, before anything of the cell runs
            return _record_failure(
                out, "ModuleNotFoundError", missing, f"ModuleNotFoundError: {missing}"
            )
        last = tree.body[-1] if tree.body else None
        wants_value = isinstance(last, ast.Expr) and not _ends_with_semicolon(source)
        body = tree.body[:-1] if wants_value else tree.body
        push = os.environ.get("TORCHX_NB_PUSH")
        if push:
            with open(push, "rb") as f:
                pushed = pickle.load(f)
            namespace.update({name: pickler.loads(data) for name, data in pushed.items()})
        exec(compile(ast.Module(body=body, type_ignores=[]), CELL, "exec"), namespace)
        value = None
        if wants_value:
            assert isinstance(last, ast.Expr)
            value = eval(compile(ast.Expression(body=last.value), CELL, "eval"), namespace)
    except SystemExit as exc:
        if _rank() == 0:
            with contextlib.suppress(Exception):  # a __repr__ that raises: no exit.txt
                _write(out, "exit.txt", repr(exc.code).encode(errors="backslashreplace")[:200])
        if exc.code is not None and not isinstance(exc.code, int):
            # sys.exit("message"): Python prints the message to stderr and exits 1; so do
            # we, and the message is the failure card's line (a lone surrogate escaped, as
            # Python's stderr does; a __str__ that raises: Python prints nothing)
            try:
                said = str(exc.code)
                sys.stderr.write(f"{said}\n")
            except Exception as e:
                said = f"<str() failed: {type(e).__name__}>"
            data = f"SystemExit: {said}".encode(errors="backslashreplace")[:100_000]
            _write(out, f"error-{_rank()}.txt", data)
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        _record_error(out, exc, pickler)
        sys.stderr.write(_cell_traceback(exc))
        return 1
    if _rank() == 0:
        try:
            data = pickler.dumps({"value": value})
        except Exception as exc:
            _record_error(out, TypeError(f"the cell's value cannot be pickled: {exc}"), pickler)
            sys.stderr.write(f"torchx_nb: the cell's value cannot be pickled: {exc}\n")
            return 1
        _record_python(out)
        _write(out, "result.pkl", data)
        if value is not None:  # as IPython, which shows no Out for None: nothing to show
            _write(out, "result.txt", _short_repr(value).encode())
    return 0


def _split(url: str) -> tuple[str, str, str]:
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key


@functools.cache
def _gcs() -> Any:
    """google-cloud-storage's client, made once (the cancel watcher looks every few seconds)."""
    from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]

    try:
        return storage.Client()
    except Exception:
        if not os.environ.get("STORAGE_EMULATOR_HOST"):
            raise
        return storage.Client.create_anonymous_client()


def cancel_requested(url: str) -> bool:
    """Whether the object ``url`` exists: a trial's cancel mark (``gs://``: only GCP Batch,
    which cannot stop one task of a job, gives its tasks one)."""
    scheme, bucket, key = _split(url)
    if scheme != "gs":
        raise ValueError(f"a cancel mark is looked for in gs:// only, not {url!r}")
    # no retries of its own: the watcher looks again in a few seconds anyway
    return bool(_gcs().bucket(bucket).blob(key).exists(timeout=10, retry=None))


def _looked_for(mark: str, warn: bool) -> bool:
    """Whether the cancel mark is there; a look that fails is a warning (the first one only)
    and counts as no mark: the cell runs on rather than fail for a storage hiccup."""
    try:
        return cancel_requested(mark)
    except Exception as e:
        if warn:
            sys.stderr.write(f"torchx_nb: cannot look for this trial's cancel mark: {e}\n")
        return False


def _watch_cancel(mark: str, every: float, folder: str, url: str) -> None:
    """Look for ``mark`` every ``every`` seconds; once it is there, upload the outputs so far
    and end the process (and so the task) with ``CANCELLED_EXIT``."""
    while True:
        time.sleep(every)
        if _looked_for(mark, warn=False):
            sys.stderr.write("torchx_nb: this trial was cancelled\n")
            sys.stderr.flush()
            try:
                upload(folder, url)
            except Exception as e:
                sys.stderr.write(f"torchx_nb: the outputs were not uploaded to {url}: {e}\n")
            os._exit(CANCELLED_EXIT)


def upload(folder: str, url: str) -> None:
    """Copy every file under ``folder`` to ``url`` (``s3://B/PREFIX`` or ``gs://B/PREFIX``)."""
    scheme, bucket, prefix = _split(url)
    prefix = prefix.strip("/")
    files = [
        os.path.join(root, name) for root, _, names in os.walk(folder) for name in sorted(names)
    ]
    if scheme == "s3":
        import boto3

        client = boto3.client("s3")
        for path in files:
            key = f"{prefix}/{os.path.relpath(path, folder)}".lstrip("/")
            client.upload_file(path, bucket, key)
    elif scheme == "gs":
        target = _gcs().bucket(bucket)
        for path in files:
            key = f"{prefix}/{os.path.relpath(path, folder)}".lstrip("/")
            target.blob(key).upload_from_filename(path)
    else:
        raise ValueError(f"cannot upload to {url!r}: use s3:// or gs://")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write(
            "usage: cell_main.py CELL.py [ARGS...] | --notebook NB.ipynb [--cell-timeout S]\n"
        )
        return 2
    code = 1
    try:
        if argv[1] == "--notebook":
            code = _beside("notebook_main").main(argv[2:], sys.modules[__name__])
        else:
            code = run(argv[1], argv[2:])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        url = os.environ.get("TORCHX_NB_OUTPUT_URL")
        folder = os.environ.get("TORCHX_OUTPUT_DIR")
        record = _env_record()
        if record is not None and folder and os.path.isdir(folder) and _rank() == 0:
            try:  # what the job ran, into its outputs
                record.record(os.path.join(folder, OWN), record.planned())
            except Exception as e:
                sys.stderr.write(f"torchx_nb: the job's environment was not recorded: {e}\n")
        if url and folder and os.path.isdir(folder):
            try:
                upload(folder, url)
            except Exception as e:
                sys.stderr.write(f"torchx_nb: the outputs were not uploaded to {url}: {e}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
