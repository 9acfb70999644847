"""TorchX's utility components: ``utils.echo``, ``touch``, ``sh``, ``python``, ``binary``,
``copy`` and ``booth``, with TorchX's parameters and defaults."""

from __future__ import annotations

import os
import shlex
from typing import Any

import torchx_nb
from torchx_nb import specs


def _app(name: str, role: str, entrypoint: str, args: list[str], **role_kw: Any) -> specs.AppDef:
    """A one-role app (``role_kw``: the Role's other fields; 1 cpu and 1024 MB unless given)."""
    role_kw.setdefault("resource", specs.Resource(cpu=1, gpu=0, memMB=1024))
    return specs.AppDef(
        name=name, roles=[specs.Role(name=role, entrypoint=entrypoint, args=args, **role_kw)]
    )


def echo(
    msg: str = "hello world", image: str = torchx_nb.IMAGE, num_replicas: int = 1
) -> specs.AppDef:
    """Echoes a message to stdout (calls ``echo``).

    Args:
        msg: message to echo
        image: image to use
        num_replicas: number of replicas to run
    """
    return _app("echo", "echo", "echo", [msg], image=image, num_replicas=num_replicas)


def touch(file: str, image: str = torchx_nb.IMAGE) -> specs.AppDef:
    """Touches a file (calls ``touch``).

    Args:
        file: file to create
        image: the image to use
    """
    return _app("touch", "touch", "touch", [file], image=image)


def sh(
    *args: str,
    image: str = torchx_nb.IMAGE,
    num_replicas: int = 1,
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
    entrypoint: str | None = None,
) -> specs.AppDef:
    """Runs the given command through ``sh -c``.

    Args:
        args: the command and its arguments
        image: image to use
        num_replicas: number of replicas to run
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: memory per replica in MB
        h: a named resource (e.g. cpu.small); overrides cpu, gpu and memMB
        env: environment variables as K=V,K2=V2
        max_retries: how many times to retry a failed job
        mounts: mounts as type=bind,src=/a,dst=/b[,readonly],...
        entrypoint: run the arguments with this program instead of sh -c
    """
    escaped = " ".join(shlex.quote(a) for a in args)
    env = dict(env or {})
    env.setdefault("LOGLEVEL", os.getenv("LOGLEVEL", "WARNING"))
    return _app(
        "sh",
        "sh",
        entrypoint or "sh",
        [*map(str, args)] if entrypoint else ["-c", escaped],
        image=image,
        num_replicas=num_replicas,
        resource=specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
        env=env,
        max_retries=max_retries,
        mounts=specs.parse_mounts(mounts) if mounts else [],
    )


def python(
    *args: str,
    m: str | None = None,
    c: str | None = None,
    script: str | None = None,
    image: str = torchx_nb.IMAGE,
    name: str = "torchx_utils_python",
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    num_replicas: int = 1,
    mounts: list[str] | None = None,
) -> specs.AppDef:
    """Runs a Python module (-m), command (-c) or script with the given arguments.

    Args:
        args: arguments passed to the program
        m: a module to run (python -m)
        c: a program passed as a string (python -c)
        script: a .py file to run
        image: image to use
        name: the app's name
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: memory per replica in MB
        h: a named resource (e.g. cpu.small); overrides cpu, gpu and memMB
        num_replicas: number of replicas to run
        mounts: mounts as type=bind,src=/a,dst=/b[,readonly],...
    """
    given = [x for x in (m, c, script) if x is not None]
    if len(given) != 1:
        raise ValueError("utils.python needs exactly one of --m, --c or --script")
    if m is not None:
        cmd = ["-m", m]
    elif c is not None:
        cmd = ["-c", c]
    else:
        cmd = [str(script)]
    return _app(
        name,
        "python",
        "python",
        [*cmd, *args],
        image=image,
        num_replicas=num_replicas,
        resource=specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
        env={"HYDRA_MAIN_MODULE": m} if m else {},
        mounts=specs.parse_mounts(mounts) if mounts else [],
    )


def binary(
    *args: str,
    entrypoint: str,
    name: str = "torchx_utils_binary",
    num_replicas: int = 1,
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
) -> specs.AppDef:
    """Runs a program found in the image (or on the host for local_cwd) with the given arguments.

    Args:
        args: arguments passed to the program
        entrypoint: the program to run
        name: name of the job
        num_replicas: number of copies to run (each on its own container)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica
        h: a registered named resource (if given, takes precedence over cpu, gpu, memMB)
    """
    return _app(
        name,
        "binary",
        entrypoint,
        [*args],
        image=specs.NONE,
        num_replicas=num_replicas,
        resource=specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
    )


def copy(src: str, dst: str, image: str = torchx_nb.IMAGE) -> specs.AppDef:
    """Copies a file from src to dst; both may be any fsspec URL (local path, s3://, gs://...).
    Directories and recursive copies are not supported.

    Args:
        src: the source fsspec file location
        dst: the destination fsspec file location
        image: the image that contains the copy app (torchx_nb and fsspec installed)
    """
    args = ["-m", "torchx_nb.apps.copy_main", "--src", src, "--dst", dst]
    return _app("torchx-utils-copy", "torchx-utils-copy", "python", args, image=image)


def booth(
    x1: float,
    x2: float,
    trial_idx: int = 0,
    tracker_base: str = "/tmp/torchx-util-booth",
    image: str = torchx_nb.IMAGE,
) -> specs.AppDef:
    """Evaluates the booth function, ``f(x1, x2) = (x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2``.
    The result is stored as JSON ``{"booth_eval": f}`` at ``TRACKER_BASE/TRIAL_IDX``.

    Args:
        x1: x1
        x2: x2
        trial_idx: ignore if not running hpo
        tracker_base: URI of the tracker's base output directory (e.g. s3://foo/bar)
        image: the image that contains the booth app (torchx_nb and fsspec installed)
    """
    args = ["-m", "torchx_nb.apps.booth_main", "--x1", str(x1), "--x2", str(x2)]
    args += ["--trial_idx", str(trial_idx), "--tracker_base", tracker_base]
    return _app("torchx-utils-booth", "torchx-utils-booth", "python", args, image=image)
