"""Which Python a job on an image really runs, found without running the image: the
``python`` command (``python3`` when there is none) looked up on the image's ``PATH`` (its
config's ``Env``, else Docker's default), symlinks followed through the image's own files,
then what that interpreter is: a virtualenv (``pyvenv.cfg`` beside its ``bin``), a conda
environment (``conda-meta``), or a plain prefix (``/usr/local`` as the official images
build it, Debian's ``/usr``). Its site directories are where the environment layer hooks in
and whose distributions the image is said to have."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_NAME = re.compile(r"^python(?:3(?:\.\d+)?)?$")
_MAX_HOPS = 40


@dataclass(frozen=True)
class ImageFiles:
    """What the image's layers hold that says which Python runs (paths without a leading
    slash, as in a layer's tar)."""

    links: Mapping[str, str]  # symlink -> its target
    executables: frozenset[str]  # regular files named python, python3, python3.N in a bin/
    pythons: Mapping[str, str]  # prefix ("usr/", "opt/conda/") -> version of its stdlib
    venvs: Mapping[str, Mapping[str, str]]  # folder holding pyvenv.cfg -> its settings
    condas: frozenset[str]  # folders holding conda-meta/


@dataclass(frozen=True)
class Interpreter:
    """The Python a ``python`` command runs in the image."""

    command: str  # the path found on PATH (/opt/venv/bin/python)
    executable: str  # where its symlinks lead (/usr/bin/python3.11)
    version: str  # MAJOR.MINOR
    prefix: str  # sys.prefix: the venv's folder, or the installation's prefix
    site_candidates: tuple[str, ...]  # its site directories, the layer's hook first
    why: str  # one phrase: what was found, and how


def resolve(path: str, links: Mapping[str, str]) -> str:
    """``path`` with every symlink in it followed (through the image's own links)."""
    parts = [p for p in path.strip("/").split("/") if p]
    done: list[str] = []
    hops = 0
    while parts:
        head = parts.pop(0)
        if head == "..":
            if done:
                done.pop()
            continue
        if head == ".":
            continue
        current = "/".join([*done, head])
        target = links.get(current)
        if target is not None and hops < _MAX_HOPS:
            hops += 1
            base = "" if target.startswith("/") else "/".join(done)
            joined = posixpath.normpath(posixpath.join("/", base, target))
            parts = [p for p in joined.strip("/").split("/") if p] + parts
            done = []
            continue
        done.append(head)
    return "/".join(done)


def _version(text: str) -> str | None:
    m = re.match(r"\s*(3)\.(\d+)", text)
    return f"{m[1]}.{m[2]}" if m else None


def _prefix_sites(prefix: str, version: str) -> tuple[str, ...]:
    """A plain installation's site directories, the hook's first: Debian's python3 reads
    ``lib/python3/dist-packages`` (and ``local/lib/python3.N/dist-packages``), a CPython
    built from source (the official images' ``/usr/local``, conda) ``lib/python3.N/site-packages``."""
    return (
        f"{prefix}lib/python{version}/site-packages",
        f"{prefix}lib/python3/dist-packages",
        f"{prefix}local/lib/python{version}/dist-packages",
        f"{prefix}lib/python{version}/dist-packages",
    )


def _find(files: ImageFiles, dirs: list[str], name: str) -> tuple[str, str] | None:
    for folder in dirs:
        command = f"{folder.rstrip('/')}/{name}".lstrip("/")
        real = resolve(command, files.links)
        if real in files.executables:
            return command, real
    return None


def find_interpreter(files: ImageFiles, env: list[str] | None) -> Interpreter | str:
    """The interpreter ``python`` resolves to on the image's PATH, or one phrase saying what
    was tried when it cannot be told."""
    values = dict(item.partition("=")[::2] for item in env or [])
    path = values.get("PATH") or DEFAULT_PATH
    dirs = [d for d in path.split(":") if d.startswith("/")]
    found, name = _find(files, dirs, "python"), "python"
    if found is None:
        found, name = _find(files, dirs, "python3"), "python3"
    if found is None:
        where = f"PATH {path}" + ("" if "PATH" in values else " (Docker's default)")
        stdlib = ", ".join(f"/{p}lib/python{v}" for p, v in sorted(files.pythons.items()))
        seen = f"; a standard library is at {stdlib} but no command on PATH runs it"
        return f"no python or python3 on the image's {where}" + (seen if stdlib else "")
    command, real = found
    shown = f"/{command}" + (f" -> /{real}" if real != command else "")
    lead = (
        f"`python` on the image's PATH is {shown}"
        if name == "python"
        else f"no `python` on the image's PATH; `python3` is {shown}"
    )
    folder = resolve(posixpath.dirname(command), files.links)
    home = posixpath.dirname(folder)
    venv = files.venvs.get(home)
    if venv is not None:
        base = posixpath.dirname(posixpath.dirname(real)) + "/"
        version = (
            _version(venv.get("version_info", "") or venv.get("version", ""))
            or files.pythons.get(base)
            or _version(posixpath.basename(real)[len("python") :])
        )
        if version is None:
            return f"{lead}, a virtualenv (/{home}/pyvenv.cfg) whose Python version is not known"
        sites: tuple[str, ...] = (f"{home}/lib/python{version}/site-packages",)
        if venv.get("include-system-site-packages", "").strip().lower() == "true":
            sites += _prefix_sites(base, version)
        named = " (VIRTUAL_ENV names it too)" if values.get("VIRTUAL_ENV") == f"/{home}" else ""
        why = f"{lead}, a virtualenv (/{home}/pyvenv.cfg){named} of Python {version}"
        return Interpreter(f"/{command}", f"/{real}", version, f"/{home}", sites, why)
    prefix = posixpath.dirname(posixpath.dirname(real)) + "/"
    version = files.pythons.get(prefix)
    if version is None:
        return f"{lead}, but no standard library (/{prefix}lib/python3.N/os.py) is beside it"
    if prefix.rstrip("/") in files.condas:
        kind = f"a conda environment (/{prefix}conda-meta)"
    elif prefix == "usr/":
        kind = "the system's python3"
    else:
        kind = f"an installation in /{prefix.rstrip('/')}"
    why = f"{lead}, {kind}, Python {version}"
    return Interpreter(
        f"/{command}",
        f"/{real}",
        version,
        f"/{prefix.rstrip('/')}",
        _prefix_sites(prefix, version),
        why,
    )
