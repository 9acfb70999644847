"""The ``cell`` component: Python source text (a notebook cell) run as the job's main program,
alone or, with ``-j``, under torchrun on every process of a distributed job."""

from __future__ import annotations

import torchx_nb
from torchx_nb import specs
from torchx_nb.components.dist import Replicas, _distributed_app, torchrun_command
from torchx_nb.specs.program import CellApp, CellProgram

MAX_SOURCE_BYTES = 96 * 1024
# the files beside a cell that runs with results (see cell_files)
RUNNER = ".torchx-nb/cell_main.py"  # the entry point: it loads the runner beside it
#: the job-side runner, the package ``torchx_nb.apps.cell_runner``, shipped as a folder under a
#: name no workspace module has
RUNNER_PACKAGE = ".torchx-nb/torchx_nb_cell_runner"
VENDOR = ".torchx-nb/vendor"
PUSH = ".torchx-nb/push.pkl"


def cell(
    *script_args: str,
    source: str,
    name: str = "cell",
    image: str = torchx_nb.IMAGE,
    j: str | None = None,
    h: str | None = None,
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
    mounts: list[str] | None = None,
) -> specs.AppDef:
    """Runs Python source text as the job's main program (python -c SOURCE ARGS...).

    The AppDef it returns holds the cell program: a torchx_nb runner with a workspace runs it
    as a script under the cell runner (value, exception and outputs come back).

    Args:
        script_args: arguments the program sees in sys.argv[1:]
        source: the Python source to run
        name: the job's name
        image: image to use
        j: run under torchrun: [min_nodes:]NxP, or P processes on one node
        h: a named resource (e.g. gpu.small); overrides cpu, gpu and memMB
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: memory per replica in MB
        env: environment variables as K=V,K2=V2
        max_retries: how many times to retry a failed job
        rdzv_port: port of the c10d rendezvous on rank 0 (with -j)
        mounts: mounts as type=bind,src=/a,dst=/b[,readonly],...
    """
    program = cell_program(source, script_args, j, rdzv_port)
    return _app(program, name, Replicas(image, h, cpu, gpu, memMB, env, max_retries, mounts))


def cell_program(
    source: str,
    script_args: tuple[str, ...] | list[str] = (),
    j: str | None = None,
    rdzv_port: int = 29500,
) -> CellProgram:
    """A checked cell program: not empty, no IPython magics, small enough for a request."""
    if not source.strip():
        raise ValueError("the cell is empty: write the Python code to run below the magic line")
    refuse_magics(source)
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise ValueError(
            f"the cell is {size // 1024} KiB; at most {MAX_SOURCE_BYTES // 1024} KiB can be passed"
            " as a program: move the code into a .py file in the workspace and import it"
        )
    return CellProgram(source, tuple(script_args), j, rdzv_port)


def cell_app(
    program: CellProgram,
    *,
    name: str = "cell",
    image: str = torchx_nb.IMAGE,
    h: str | None = None,
    env: dict[str, str] | None = None,
) -> CellApp:
    """The AppDef of ``program`` as a run request gives it (image, named resource, env;
    the ``cell`` component gives the rest of the replicas' settings too)."""
    return _app(program, name, Replicas(image, h, env=env))


def _app(program: CellProgram, name: str, replicas: Replicas) -> CellApp:
    """The AppDef of ``program`` as it runs with no workspace: ``python -c SOURCE`` (under
    torchrun with ``j``)."""
    # Schedulers substitute ${macros} in args; "$$" comes out as a literal "$".
    command = ["python", "-c", program.source.replace("$", "$$"), *program.script_args]
    j, rdzv_port = program.j, program.rdzv_port
    if j:
        cmd, min_n, max_n = torchrun_command(command, j, rdzv_port=rdzv_port, no_python=True)
        app = _distributed_app(cmd, "cell", name, min_n, max_n, replicas, rdzv_port, False)
        return CellApp(app.name, app.roles, app.metadata, program=program)
    role = replicas.role("cell", "python", command[1:])
    return CellApp(name=name, roles=[role], program=program)


def refuse_magics(source: str) -> None:
    """IPython magics (``%time``, ``%%bash``) and shell escapes (``!pip``) do not run in a
    job, which runs plain Python: one line naming the first, before anything is built. Any
    other syntax error is left to the job's own Python (it may be newer than the kernel's),
    where it comes back as the cell's exception."""
    import ast

    try:
        ast.parse(source)
    except SyntaxError:
        found = _magic_line(source)
        if found is not None:
            number, shell = found
            text = source.splitlines()[number - 1].strip()
            kind = "a shell escape" if shell else "an IPython magic"
            raise ValueError(
                f"line {number} of the cell, {text[:60]!r}, is {kind}: a job runs plain"
                " Python, so magics and ! lines do not run there (use subprocess.run for a"
                " shell command)"
            ) from None


def _magic_line(source: str) -> tuple[int, bool] | None:
    """The first line that begins a statement with ``%`` or ``!``, or assigns one (IPython's
    ``files = !ls``, ``t = %timeit -o f()``), and whether it is a shell escape, read from
    the tokens: a ``%s`` line inside a string is the string's, not a magic. None if there is
    none before the tokenizer gives up (the job's Python then reports the syntax error)."""
    import io
    import tokenize

    skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    at_start = True
    after_assign = False  # the last token was a top-level ``=`` (not one inside brackets)
    depth = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NEWLINE:
                at_start, after_assign, depth = True, False, 0
            elif tok.type not in skip and tok.string.strip():  # 3.11: " " before "!"
                if (at_start or after_assign) and tok.string.startswith(("%", "!")):
                    return tok.start[0], tok.string.startswith("!")
                if tok.type == tokenize.OP:
                    depth += (tok.string in "([{") - (tok.string in ")]}")
                after_assign = depth == 0 and tok.type == tokenize.OP and tok.string == "="
                at_start = False
    except (tokenize.TokenError, SyntaxError):
        pass
    return None


def cell_files(program: CellProgram, push: bytes | None = None) -> dict[str, bytes]:
    """What a cell needs beside its workspace to run with results: the cell as a script (at
    the workspace root, so it imports the notebook folder's modules as in the kernel), the
    cell runner (``runner_files``) and the pushed variables. Paths relative to the folder
    they go into."""
    script = program.script()
    files = {script[0]: script[1], **runner_files()}
    if push is not None:
        files[PUSH] = push
    return files


def runner_files() -> dict[str, bytes]:
    """torchx_nb's cell runner (its entry point and its package, every module of it) and the
    kernel's cloudpickle (so the job pickles as the kernel unpickles, even in an image
    without it)."""
    import importlib.util
    from pathlib import Path

    entry = importlib.util.find_spec("torchx_nb.apps.cell_main")
    package = importlib.util.find_spec("torchx_nb.apps.cell_runner")
    assert entry is not None and entry.origin is not None
    assert package is not None and package.submodule_search_locations
    files = {RUNNER: Path(entry.origin).read_bytes()}
    for path in sorted(Path(next(iter(package.submodule_search_locations))).glob("*.py")):
        files[f"{RUNNER_PACKAGE}/{path.name}"] = path.read_bytes()
    pickler = importlib.util.find_spec("cloudpickle")
    if pickler is not None and pickler.submodule_search_locations:
        for path in sorted(Path(next(iter(pickler.submodule_search_locations))).glob("*.py")):
            files[f"{VENDOR}/cloudpickle/{path.name}"] = path.read_bytes()
    return files


def run_with_runner(
    role: specs.Role, program: CellProgram, folder: str = "", push: bool = False
) -> None:
    """Re-point the cell's role at the cell runner and the script ``cell_files`` made, both
    in ``folder`` (relative to the job's working folder when empty: the workspace's root in
    an image, a job folder), instead of passing the source with ``-c``: no size limit, real
    file names in tracebacks; with ``push``, at the pushed variables too."""
    base = f"{folder.rstrip('/')}/" if folder else ""
    command = [
        "python",
        f"{base}{RUNNER}",
        f"{base}{program.script()[0]}",
        *program.script_args,
    ]
    if program.j:
        cmd, _, _ = torchrun_command(
            command, program.j, rdzv_port=program.rdzv_port, no_python=True
        )
        role.args = ["-c", cmd]
    else:
        role.args = command[1:]
    if push:
        role.env["TORCHX_NB_PUSH"] = f"{base}{PUSH}"
