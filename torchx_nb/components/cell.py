"""The ``cell`` component: Python source text (a notebook cell) run as the job's main program,
alone or, with ``-j``, under torchrun on every process of a distributed job."""

from __future__ import annotations

import torchx_nb
from torchx_nb import specs
from torchx_nb.components.dist import _distributed_app, torchrun_command

MAX_SOURCE_BYTES = 96 * 1024
CELL_METADATA_KEY = "torchx_nb.cell"
CELL_PREFIX = ".torchx-cell-"
# the files beside a cell that runs with results (see cell_files)
RUNNER = ".torchx-nb/cell_main.py"
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
    if not source.strip():
        raise ValueError("the cell is empty: write the Python code to run below the magic line")
    refuse_magics(source)
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise ValueError(
            f"the cell is {size // 1024} KiB; at most {MAX_SOURCE_BYTES // 1024} KiB can be passed"
            " as a program: move the code into a .py file in the workspace and import it"
        )
    # Schedulers substitute ${macros} in args; "$$" comes out as a literal "$".
    program = ["python", "-c", source.replace("$", "$$"), *script_args]
    recipe = {"source": source, "script_args": list(script_args), "j": j, "rdzv_port": rdzv_port}
    if j:
        cmd, min_n, max_n = torchrun_command(program, j, rdzv_port=rdzv_port, no_python=True)
        app = _distributed_app(
            cmd,
            "cell",
            name,
            min_n,
            max_n,
            image=image,
            h=h,
            cpu=cpu,
            gpu=gpu,
            memMB=memMB,
            env=env,
            max_retries=max_retries,
            rdzv_port=rdzv_port,
            mounts=mounts,
            debug=False,
        )
        app.roles[0].metadata[CELL_METADATA_KEY] = recipe
        return app
    return specs.AppDef(
        name=name,
        roles=[
            specs.Role(
                name="cell",
                image=image,
                entrypoint="python",
                args=program[1:],
                env=dict(env or {}),
                resource=specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
                max_retries=max_retries,
                mounts=specs.parse_mounts(mounts) if mounts else [],
                metadata={CELL_METADATA_KEY: recipe},
            )
        ],
    )


def refuse_magics(source: str) -> None:
    """IPython magics (``%time``, ``%%bash``) and shell escapes (``!pip``) do not run in a
    job, which runs plain Python: one line naming the first, before anything is built. Any
    other syntax error is left to the job's own Python (it may be newer than the kernel's),
    where it comes back as the cell's exception."""
    import ast

    try:
        ast.parse(source)
    except SyntaxError:
        for number, line in enumerate(source.splitlines(), 1):
            text = line.strip()
            if text.startswith(("%", "!")):
                kind = "a shell escape" if text.startswith("!") else "an IPython magic"
                raise ValueError(
                    f"line {number} of the cell, {text[:60]!r}, is {kind}: a job runs plain"
                    " Python, so magics and ! lines do not run there (use subprocess.run for a"
                    " shell command)"
                ) from None


def cell_source(role: specs.Role) -> str | None:
    """The Python source of a role made by the ``cell`` component, else None."""
    recipe = role.metadata.get(CELL_METADATA_KEY)
    return recipe["source"] if isinstance(recipe, dict) else None


def cell_script(role: specs.Role) -> tuple[str, bytes] | None:
    """The file a workspace gets for a cell role (its name and content), or None for a role
    that is not a cell. It goes at the workspace root, so the cell imports the notebook
    folder's modules as it does in the kernel (Python puts the script's folder first on
    sys.path)."""
    import hashlib

    source = cell_source(role)
    if source is None:
        return None
    sha = hashlib.sha256(source.encode()).hexdigest()[:12]
    return f"{CELL_PREFIX}{sha}.py", source.encode()


def cell_files(role: specs.Role, push: bytes | None = None) -> dict[str, bytes] | None:
    """What a cell role needs beside its workspace to run with results (None for a role that
    is not a cell): the cell as a script, torchx_nb's cell runner, the kernel's cloudpickle
    (so the job pickles as the kernel unpickles, even in an image without it) and the pushed
    variables. Paths relative to the folder they go into."""
    import importlib.util
    from pathlib import Path

    script = cell_script(role)
    if script is None:
        return None
    files = {script[0]: script[1]}
    runner = importlib.util.find_spec("torchx_nb.apps.cell_main")
    assert runner is not None and runner.origin is not None
    files[RUNNER] = Path(runner.origin).read_bytes()
    pickler = importlib.util.find_spec("cloudpickle")
    if pickler is not None and pickler.submodule_search_locations:
        for path in sorted(Path(next(iter(pickler.submodule_search_locations))).glob("*.py")):
            files[f"{VENDOR}/cloudpickle/{path.name}"] = path.read_bytes()
    if push is not None:
        files[PUSH] = push
    return files


def run_with_runner(role: specs.Role, folder: str = "", push: bool = False) -> None:
    """Re-point a cell role at the cell runner and the script ``cell_files`` made, both in
    ``folder`` (relative to the job's working folder when empty: the workspace's root in an
    image, a job folder); with ``push``, at the pushed variables too."""
    base = f"{folder.rstrip('/')}/" if folder else ""
    script = cell_script(role)
    assert script is not None
    run_as_script(role, f"{base}{RUNNER}", [f"{base}{script[0]}"])
    if push:
        role.env["TORCHX_NB_PUSH"] = f"{base}{PUSH}"


def run_as_script(role: specs.Role, script: str, first: list[str] | None = None) -> None:
    """Re-point a cell role at ``script`` (the cell written into the image by a workspace
    builder) instead of passing the source with ``-c``: no size limit, real file names in
    tracebacks."""
    recipe = role.metadata[CELL_METADATA_KEY]
    program = ["python", script, *(first or []), *recipe["script_args"]]
    if recipe["j"]:
        cmd, _, _ = torchrun_command(
            program, recipe["j"], rdzv_port=recipe["rdzv_port"], no_python=True
        )
        role.args = ["-c", cmd]
    else:
        role.args = program[1:]
