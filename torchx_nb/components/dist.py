"""Distributed components: ``dist.ddp`` runs a script under torchrun on ``-j [min:]NxP``;
``dist.spmd`` (TorchX's recommended entry) takes ``-j N`` and infers P from the host's GPUs."""

from __future__ import annotations

import os
import re
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torchx_nb
from torchx_nb import specs
from torchx_nb.specs.exceptions import BadJobSizeError as BadJobSizeError

_J_RE = re.compile(r"(?:(?P<min>\d+):)?(?P<max>\d+)x(?P<nproc>\d+)|(?P<only>\d+)")

DEBUG_ENV = {
    "CUDA_LAUNCH_BLOCKING": "1",
    "NCCL_DESYNC_DEBUG": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}


def parse_nnodes(j: str) -> tuple[int, int, int, str]:
    """``-j`` → (min_nnodes, max_nnodes, nproc_per_node, nnodes text for torchrun).

    ``"2:4x8"`` → (2, 4, 8, "2:4"); ``"2x8"`` → (2, 2, 8, "2"); ``"8"`` → (1, 1, 8, "1")."""
    m = _J_RE.fullmatch(j.strip())
    if not m:
        raise BadJobSizeError(
            f"bad -j {j!r}: use NxP (N nodes of P processes, e.g. 2x4), MIN:MAXxP for elastic"
            " jobs (e.g. 1:4x8), or just P for one node"
        )
    if m.group("only"):
        nproc = int(m.group("only"))
        min_n = max_n = 1
    else:
        max_n = int(m.group("max"))
        min_n = int(m.group("min") or max_n)
        nproc = int(m.group("nproc"))
    if nproc < 1 or max_n < 1 or min_n < 1 or min_n > max_n:
        raise BadJobSizeError(
            f"bad -j {j!r}: node and process counts must be at least 1, and MIN at most MAX"
        )
    nnodes_rep = f"{min_n}:{max_n}" if min_n != max_n else str(max_n)
    return min_n, max_n, nproc, nnodes_rep


def parse_name(name: str, default_run: str) -> tuple[str, str]:
    """``"exp/run"`` → (experiment, run); missing parts take their defaults."""
    experiment, sep, run = name.partition("/")
    if not sep:
        experiment, run = "", name
    return experiment or "default-experiment", run or default_run


def torchrun_command(
    program: list[str],
    j: str,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    rdzv_conf: str | None = None,
    tee: int = 3,
    no_python: bool = False,
) -> tuple[str, int, int]:
    """The ``torchrun ...`` shell text for ``program`` on ``j`` nodes, and (min, max) nodes.

    The rendezvous endpoint stays unquoted: it expands the scheduler's rank-0 host variable
    (``${rank0_env}`` macro) in the shell, defaulting to localhost on rank 0."""
    min_n, max_n, nproc, nnodes_rep = parse_nnodes(j)
    if max_n == 1:
        endpoint = "localhost:0"
    else:
        endpoint = f"$${{{specs.macros.rank0_env}:=localhost}}:{rdzv_port}"
    cmd = ["torchrun", "--rdzv_backend", rdzv_backend]
    if rdzv_conf:
        cmd += ["--rdzv_conf", rdzv_conf]
    head = " ".join(shlex.quote(c) for c in cmd)
    rest = [
        "--rdzv_id",
        specs.macros.app_id,
        "--nnodes",
        nnodes_rep,
        "--nproc_per_node",
        str(nproc),
        "--tee",
        str(tee),
        "--role",
        "",
    ]
    if no_python:
        rest.append("--no-python")
    tail = " ".join(shlex.quote(c) for c in [*rest, *program])
    if rdzv_backend == "static":
        # only the static rendezvous needs the node's rank (as in TorchX); unquoted, so the
        # shell expands a scheduler's rank variable (e.g. $AWS_BATCH_JOB_NODE_INDEX)
        head += f" --node_rank {specs.macros.replica_id}"
    return f"{head} --rdzv_endpoint {endpoint} {tail}", min_n, max_n


def ddp(
    *script_args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = torchx_nb.IMAGE,
    name: str = "/",
    h: str | None = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    rdzv_conf: str | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
) -> specs.AppDef:
    """Distributed data parallel: runs a script or module under torchrun on j nodes.

    Args:
        script_args: arguments passed to the script
        script: the .py file to run
        m: a module to run instead of a script (python -m)
        image: image to use
        name: job name as {experiment}/{run}; either part may be left empty
        h: a named resource (e.g. gpu.small); overrides cpu, gpu and memMB
        cpu: number of cpus per node
        gpu: number of gpus per node
        memMB: memory per node in MB
        j: [min_nodes:]NxP (N nodes of P processes each), or just P for one node
        env: environment variables as K=V,K2=V2
        max_retries: how many times to retry a failed job
        rdzv_port: port of the c10d rendezvous on rank 0
        rdzv_backend: torchrun rendezvous backend
        rdzv_conf: extra rendezvous config (k=v,...)
        mounts: mounts as type=bind,src=/a,dst=/b[,readonly],...
        debug: turn on PyTorch's distributed debug settings
        tee: torchrun --tee value (3: copy both streams to the logs)
    """
    if (script is None) == (m is None):
        raise ValueError("dist.ddp needs exactly one of --script or --m")
    if script:
        program = [script, *script_args]
        role_name = Path(script).stem
    else:
        program = ["-m", str(m), *script_args]
        role_name = str(m).rpartition(".")[2]
    cmd, min_n, max_n = torchrun_command(
        program, j, rdzv_port=rdzv_port, rdzv_backend=rdzv_backend, rdzv_conf=rdzv_conf, tee=tee
    )
    replicas = Replicas(image, h, cpu, gpu, memMB, env, max_retries, mounts)
    return _distributed_app(cmd, role_name, name, min_n, max_n, replicas, rdzv_port, debug)


def spmd(
    *args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = torchx_nb.IMAGE,
    name: str = "/",
    h: str = "gpu.small",
    j: str = "1x1",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
    debug: bool = False,
) -> specs.AppDef:
    """Single-Program-Multiple-Data: N x P copies of one program under torchrun (DDP, FSDP, RPC).

    ``-j 2x8`` runs 2 nodes of 8 processes; ``-j 2`` takes P from the GPU count of host type
    ``-h`` (``-j 2 -h aws_p4d.24xlarge`` is ``-j 2x8``). For multi-node runs the hosts must reach
    each other on port 29500.

    Args:
        args: the arguments to the main module or script (e.g. my/trainer.py -foo bar)
        script: the main script to run (relative to the image's WORKDIR for docker runs)
        m: the main module to run (python -m), instead of a script
        image: the base image of the workspace; if workspace is disabled, the image of the job
        name: ``{experimentname}/{runname}`` or ``{experimentname}/`` or ``/{runname}`` or ``{runname}``
        h: the type of host to run on (e.g. aws_p4d.24xlarge); must be a registered named resource
        j: {nnodes}x{nproc_per_node}; for GPU hosts, {nnodes} alone takes nproc_per_node from the
            host's GPU count
        env: environment variables to be passed to the run (e.g. ENV1=v1,ENV2=v2,ENV3=v3)
        max_retries: the number of scheduler retries allowed
        mounts: mounts into the worker environment/container
            (ex. type=<bind/volume>,src=/host,dst=/job[,readonly])
        debug: whether to run with preset debug flags enabled
    """
    return ddp(
        *args,
        script=script,
        m=m,
        image=image,
        name=name,
        h=h,
        j=_spmd_j(h, j),
        env=env or {},
        max_retries=max_retries,
        mounts=mounts,
        debug=debug,
    )


def _spmd_j(h: str, j: str) -> str:
    """``-j N`` → ``NxGPUS`` for host ``h``; ``NxP`` kept (with a warning when P is not the
    host's GPU count, as TorchX warns)."""
    gpus = specs.named_resources[h].gpu
    nnodes, sep, nproc = j.strip().partition("x")
    if not sep:
        if gpus <= 0:
            raise BadJobSizeError(
                f"-j {j}: nproc_per_node cannot be inferred from the GPU count; {h!r} has no GPUs."
                f" Give -j NNODESxNPROCS_PER_NODE (e.g. -j {nnodes}x8)"
            )
        return f"{nnodes}x{gpus}"
    if gpus > 0 and nproc.isdigit() and int(nproc) != gpus:
        warnings.warn(
            f"-j {j} runs {nproc} processes per node but a {h} has {gpus} GPUs;"
            f" give -j {nnodes} to use one process per GPU",
            stacklevel=3,
        )
    return j


@dataclass(frozen=True)
class Replicas:
    """What every replica of a component's one role gets, from the component's own
    arguments: its image, resources (a named one, else cpu/gpu/memMB), env, retries and
    mounts."""

    image: str
    h: str | None = None
    cpu: int = 1
    gpu: int = 0
    memMB: int = 1024
    env: dict[str, str] | None = None
    max_retries: int = 0
    mounts: list[str] | None = None

    def role(self, name: str, entrypoint: str, args: list[str], **more: Any) -> specs.Role:
        """The role ``name`` running ``entrypoint args`` on these replicas (``more``: other
        ``Role`` fields; ``env`` given there replaces this one's)."""
        more.setdefault("env", dict(self.env or {}))
        return specs.Role(
            name=name,
            image=self.image,
            entrypoint=entrypoint,
            args=args,
            resource=specs.resource(cpu=self.cpu, gpu=self.gpu, memMB=self.memMB, h=self.h),
            max_retries=self.max_retries,
            mounts=specs.parse_mounts(self.mounts) if self.mounts else [],
            **more,
        )


def _distributed_app(
    cmd: str,
    role_name: str,
    name: str,
    min_n: int,
    max_n: int,
    replicas: Replicas,
    rdzv_port: int,
    debug: bool,
) -> specs.AppDef:
    """One role running ``bash -c CMD`` on min..max nodes, with TorchX's tracking env."""
    experiment, run = parse_name(name, role_name)
    env = dict(replicas.env or {})
    env.setdefault("LOGLEVEL", os.getenv("LOGLEVEL", "WARNING"))
    env.setdefault("TORCHX_TRACKING_EXPERIMENT_NAME", experiment)
    env.setdefault("TORCHX_TRACKING_RUN_NAME", run)
    if debug:
        env.update(DEBUG_ENV)
    role = replicas.role(
        role_name,
        "bash",
        ["-c", cmd],
        env=env,
        min_replicas=min_n,
        num_replicas=max_n,
        port_map={"c10d": rdzv_port},
    )
    return specs.AppDef(name=run, roles=[role])
