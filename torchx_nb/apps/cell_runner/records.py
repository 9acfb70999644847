"""What the program gives back, written into the runner's folder of the job's outputs: the
value (cloudpickle) with a short repr beside it, or the exception with its traceback, the
Python that pickled them, and the exit of a program that called ``sys.exit``."""

from __future__ import annotations

import contextlib
import pickle
import reprlib
import sys
import traceback
from typing import Any

from .common import rank, write

CELL = "<cell>"  # the cell's file name in its code objects and tracebacks
REPR_CHARS = 300
RANK0_RECORDS = ("result.pkl", "result.txt", "exit.txt")  # besides error-<rank>.pkl/.txt


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


def short_repr(value: Any) -> str:
    """``value``'s repr, at most ``REPR_CHARS`` characters, computed within that bound."""
    short = _Short()
    short.maxstring = short.maxother = REPR_CHARS
    try:
        text = short.repr(value)
    except Exception as e:  # a __repr__ that raises
        text = f"<{type(value).__name__} (repr failed: {e})>"
    return text[:REPR_CHARS]


def cell_traceback(exc: BaseException) -> str:
    """The traceback as Python prints it, from the cell's own frames on (this runner's are
    dropped), its lines named ``<cell>`` with the cell's line numbers."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def record_python(out: str) -> None:
    """The Python that pickled what is written here (the kernel checks it before unpickling)."""
    write(out, "python.txt", f"{sys.version_info.major}.{sys.version_info.minor}".encode())


def record_error(out: str, exc: BaseException, pickler: Any) -> None:
    """The program's exception: type, message and traceback as text, and the exception
    itself pickled when it can be."""
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    kind = kind.removeprefix("builtins.").removeprefix("__main__.")
    try:
        message = str(exc)
    except Exception as e:  # a __str__ that raises
        message = f"<str() failed: {type(e).__name__}>"
    record: dict[str, Any] = {
        "type": kind,
        "message": message,
        "traceback": cell_traceback(exc),
        "pickled": None,
    }
    # apart from the text: a kernel that cannot rebuild the exception (an __init__ with several
    # arguments, a type only the job can import) still gets type, message and traceback
    with contextlib.suppress(Exception):
        record["pickled"] = pickler.dumps(exc)
    own = rank()
    record_python(out)
    write(out, f"error-{own}.pkl", pickler.dumps(record))
    # a lone surrogate (a file name read with surrogateescape) is written as its escape
    write(out, f"error-{own}.txt", f"{kind}: {message}".encode(errors="backslashreplace"))


def record_failure(out: str, kind: str, message: str, line: str, tb: str = "") -> int:
    """A failure that is not an exception of the program's own (a module the job lacks, a
    notebook cell that failed): the same record an exception leaves (the kernel re-raises it
    as a RemoteError), its one ``line`` for the failure card and the log. Returns the exit
    status, 1."""
    record = {"type": kind, "message": message, "traceback": tb, "pickled": None}
    write(out, "error-0.pkl", pickle.dumps(record))
    write(out, "error-0.txt", line.encode())
    sys.stderr.write(f"torchx_nb: {line}\n")
    return 1


def record_exit(out: str, exc: SystemExit) -> None:
    """A program that called ``sys.exit``: its code (rank 0), and for ``sys.exit("message")``
    the message, printed to stderr as Python does and kept as the failure card's line."""
    if rank() == 0:
        with contextlib.suppress(Exception):  # a __repr__ that raises: no exit.txt
            write(out, "exit.txt", repr(exc.code).encode(errors="backslashreplace")[:200])
    if exc.code is not None and not isinstance(exc.code, int):
        # sys.exit("message"): Python prints the message to stderr and exits 1; so do we (a
        # lone surrogate escaped, as Python's stderr does; a __str__ that raises: Python
        # prints nothing)
        try:
            said = str(exc.code)
            sys.stderr.write(f"{said}\n")
        except Exception as e:
            said = f"<str() failed: {type(e).__name__}>"
        data = f"SystemExit: {said}".encode(errors="backslashreplace")[:100_000]
        write(out, f"error-{rank()}.txt", data)


def record_value(out: str, value: Any, pickler: Any) -> int:
    """Rank 0's value: pickled, with its short repr beside it (none for ``None``, as IPython
    shows no Out for it). Returns the exit status: 1 when the value cannot be pickled."""
    try:
        data = pickler.dumps({"value": value})
    except Exception as exc:
        record_error(out, TypeError(f"the cell's value cannot be pickled: {exc}"), pickler)
        sys.stderr.write(f"torchx_nb: the cell's value cannot be pickled: {exc}\n")
        return 1
    record_python(out)
    write(out, "result.pkl", data)
    if value is not None:
        write(out, "result.txt", short_repr(value).encode())
    return 0
