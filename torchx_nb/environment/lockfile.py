"""``--packages uv.lock``: the lock evaluated for the image, as ``uv sync`` would install it
there: from the project (the lock's root package) through its dependencies, each dependency's
marker evaluated for the image's Python and platform (``packaging.markers``), the right
version of a forked package (the one whose marker holds), a dependency's extras followed,
and the project's own extras and dependency groups only when asked (``uv.lock[gpu,dev]``).
The project itself, when it is a package (``source = { editable = "." }``), ships as a wheel
built from its folder at submit; a virtual one ships nothing of its own. A ``git`` or ``url``
source is fetched at submit (direct.py): the lock's commit, the lock's file and hash."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchx_nb.environment.direct import DirectRef, lock_source
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_contents import normalize

if TYPE_CHECKING:
    from torchx_nb.workspace.image_contents import ImageContents

_ROOT_SOURCES = ("editable", "virtual", "directory")


@dataclass(frozen=True)
class FilePin:
    """One distribution a ``--packages FILE`` gives: from an index at ``version``, or built
    from a folder (``folder`` set) at submit."""

    name: str
    version: str
    folder: str | None = None
    note: str = ""
    hashes: tuple[str, ...] = ()  # "sha256:…" the file allows for it (pip's --hash, the lock's)
    direct: DirectRef | None = None  # a URL or git checkout, fetched at submit
    identity: str = ""  # what a fetched one is ("git:<commit>", "sha256:<file>")


def marker_environment(contents: ImageContents | None) -> dict[str, str]:
    """What PEP 508 markers see on the image (its Python and CPU; Linux, CPython).
    ``python_full_version`` is the image's when it says it (its ``PYTHON_VERSION``), this
    kernel's when no image was read; otherwise absent: ``marker_holds`` then answers only
    what holds at every patch version of the image's Python."""
    import platform

    if contents is not None and contents.python:
        python, full = contents.python, contents.python_full
    else:
        from torchx_nb.environment.kernel import kernel_python

        python, full = kernel_python(), platform.python_version()
    arch = contents.arch if contents is not None else "x86_64"
    env = {
        "python_version": python,
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": arch,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }
    if full:
        env.update(python_full_version=full, implementation_version=full)
    return env


def marker_holds(marker: object, env: dict[str, str], where: object) -> bool:
    """Whether ``marker`` holds on the image (True when there is none). Without the image's
    full version, a marker is evaluated at every patch release of its Python where its answer
    can change (see ``_patches``): one whose answer depends on the patch
    (``python_full_version < '3.11.4'``, ``== '3.11.7'``) is one line."""
    from packaging.markers import InvalidMarker, Marker

    if not marker:
        return True
    try:
        parsed = Marker(str(marker))
        if "python_full_version" in env:  # packaging fills a missing name from this kernel
            return parsed.evaluate(env)
        python = env["python_version"]
        answers = {
            parsed.evaluate({**env, "python_full_version": full, "implementation_version": full})
            for full in _patches(python, str(marker))
        }
    except (InvalidMarker, ValueError) as e:
        raise TorchxNbError(
            f"--packages {where}: cannot read the marker {marker!r} ({e})"
        ) from None
    if len(answers) > 1:
        raise TorchxNbError(
            f"--packages {where}: the marker {str(marker)!r} depends on the image's Python patch"
            f" version, which the image does not say (Python {python}; its config has no"
            f" PYTHON_VERSION): set ENV PYTHON_VERSION={python}.N in the image, or write the"
            " marker with python_version"
        )
    return answers.pop()


def _patches(python: str, marker: str) -> list[str]:
    """The patch releases of ``python`` (``3.11``) a marker is evaluated at to know every
    answer it can give: 0, a late one, and each patch release the marker names with its
    neighbours (an answer changes only there: ``== '3.11.7'`` holds at 3.11.7 alone), every
    one up to the highest named when that is small (``in '3.11.10'`` compares text)."""
    named = {int(n) for n in re.findall(re.escape(python) + r"\.(\d{1,6})", marker)}
    points = {0, 999_999, *named, *(n + 1 for n in named), *(n - 1 for n in named if n)}
    if named and max(named) <= 100:
        points.update(range(max(named) + 2))
    return [f"{python}.{n}" for n in sorted(points)]


def _wheel_fits(url: str, contents: ImageContents) -> bool:
    """Whether the wheel a URL names is tagged for the image's Python and platform."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    from torchx_nb.environment.tags import fitting

    try:
        _, _, _, tags = parse_wheel_filename(url.rsplit("/", 1)[-1].split("#", 1)[0])
    except InvalidWheelFilename:
        return False
    return bool(fitting([str(t) for t in tags], contents))


def _load(path: Path) -> list[dict[str, Any]]:
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TorchxNbError(f"--packages {path}: not a readable uv.lock ({e})") from None
    packages = data.get("package", [])
    if not isinstance(packages, list):
        raise TorchxNbError(f"--packages {path}: not a uv.lock (no [[package]] list)")
    return [p for p in packages if isinstance(p, dict) and isinstance(p.get("name"), str)]


def pins_from_lock(
    path: Path, contents: ImageContents | None, asked: tuple[str, ...] = ()
) -> list[FilePin]:
    """The distributions ``path`` installs on the image (``asked``: the project's extras or
    dependency groups to include)."""
    packages = _load(path)
    env = marker_environment(contents)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for pkg in packages:
        by_name.setdefault(normalize(pkg["name"]), []).append(pkg)
    roots = [
        p
        for p in packages
        if isinstance(p.get("source"), dict)
        and any(p["source"].get(k) == "." for k in _ROOT_SOURCES)
    ]
    if not roots:
        raise TorchxNbError(
            f"--packages {path}: no project in it (a package with source editable or virtual"
            ' "."): give the uv.lock of a project'
        )
    root = roots[0]
    extras = root.get("optional-dependencies") or {}
    groups = root.get("dev-dependencies") or {}
    unknown = [a for a in asked if a not in extras and a not in groups]
    if unknown:
        known = ", ".join(sorted([*extras, *groups])) or "none"
        raise TorchxNbError(
            f"--packages {path}[{','.join(asked)}]: {', '.join(unknown)} is neither an extra"
            f" nor a dependency group of {root['name']} (it has: {known})"
        )
    queue: list[dict[str, Any]] = list(root.get("dependencies") or [])
    for name in asked:
        queue += list(extras.get(name) or []) + list(groups.get(name) or [])
    chosen: dict[tuple[str, str], dict[str, Any]] = {}
    followed: set[tuple[str, str, str]] = set()
    while queue:
        dep = queue.pop(0)
        if not isinstance(dep, dict) or not marker_holds(dep.get("marker"), env, path):
            continue
        key = normalize(str(dep.get("name", "")))
        candidates = by_name.get(key, [])
        if "version" in dep:
            candidates = [c for c in candidates if c.get("version") == dep["version"]]
        if isinstance(dep.get("source"), dict):  # one version from two sources (indexes)
            candidates = [c for c in candidates if c.get("source") == dep["source"]]
        if len(candidates) != 1:
            raise TorchxNbError(
                f"--packages {path}: the lock names {dep.get('name')!r}"
                f"{' ' + str(dep['version']) if 'version' in dep else ''}"
                f" {'nowhere' if not candidates else 'more than once'}: run uv lock again"
            )
        pkg = candidates[0]
        ident = (key, str(pkg.get("version", "")))
        wanted_extras = [""] + [str(e) for e in dep.get("extra") or []]
        for extra in wanted_extras:
            if (*ident, extra) in followed:
                continue
            followed.add((*ident, extra))
            if extra:
                queue += list((pkg.get("optional-dependencies") or {}).get(extra) or [])
            else:
                chosen[ident] = pkg
                queue += list(pkg.get("dependencies") or [])
    pins = [_pin(pkg, path, contents) for pkg in chosen.values()]
    if (
        root.get("source", {}).get("editable") == "."
        or root.get("source", {}).get("directory") == "."
    ):
        pins.append(
            FilePin(
                str(root["name"]),
                str(root.get("version", "0")),
                str(path.parent.resolve()),
                "the project, built from its folder",
            )
        )
    return pins


def _pin(pkg: dict[str, Any], path: Path, contents: ImageContents | None = None) -> FilePin:
    source = pkg.get("source") or {}
    name, version = str(pkg["name"]), str(pkg.get("version", ""))
    if not isinstance(source, dict) or "registry" in source:
        files = [*(pkg.get("wheels") or []), pkg.get("sdist") or {}]
        hashes = sorted(
            {str(f["hash"]).lower() for f in files if isinstance(f, dict) and f.get("hash")}
        )
        return FilePin(name, version, hashes=tuple(hashes))
    for kind in ("editable", "directory", "path"):
        if kind in source:
            folder = (path.parent / str(source[kind])).resolve()
            if not folder.is_dir():
                break
            return FilePin(name, version, str(folder), f"built from {source[kind]}")
    ref = lock_source(source, name)
    if ref is not None:
        if ref.vcs is None:  # a url source: the wheel it lists for the image, its hash
            wheels = [w for w in pkg.get("wheels") or [] if isinstance(w, dict) and w.get("url")]
            wheels.sort(key=lambda w: not str(w["url"]).endswith("-none-any.whl"))
            sdist = pkg.get("sdist") if isinstance(pkg.get("sdist"), dict) else None
            if contents is not None and contents.python:  # one that fits it, else the sdist
                fit = [w for w in wheels if _wheel_fits(str(w["url"]), contents)]
                wheels = fit or ([] if sdist else wheels)
            chosen = wheels[0] if wheels else sdist
            if chosen and chosen.get("url"):
                ref = DirectRef(name, str(chosen["url"]), sha256=chosen.get("hash"))
            elif chosen and chosen.get("hash"):
                ref = DirectRef(name, ref.url, sha256=chosen.get("hash"))
        return FilePin(name, version, note=f"from {ref.shown}, fetched at submit", direct=ref)
    kind = next(iter(source), "its source")
    raise TorchxNbError(
        f"--packages {path}: {name} {version} comes from {kind} {source.get(kind)!r}, which"
        " is not there: run uv lock again, or install it in the base image"
    )
