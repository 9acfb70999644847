"""The kernel's side of the environment: which installed distributions provide the modules a
program imports, closed over their requirements (markers evaluated for this Python, extras
followed), each pinned at its installed version and with where it came from (an index, a
local folder or wheel, an editable install, a VCS checkout, conda)."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata as md
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from torchx_nb.environment.index import file_url_path
from torchx_nb.workspace.image_contents import normalize


@dataclass(frozen=True)
class KernelDist:
    """One installed distribution as the kernel has it."""

    name: str
    version: str
    source: str  # index | local | archive | editable | vcs | conda
    source_path: str | None  # the local folder or file it was installed from
    pure: bool
    size: int
    wanted_by: str  # the module or distribution that brought it in
    location: str = ""
    tags: tuple[str, ...] = ()  # its installed WHEEL file's tags (cp311-cp311-manylinux_…)

    @property
    def key(self) -> str:
        return normalize(self.name)

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass
class KernelEnvironment:
    """The pins, in the order they were found, and the modules nothing installed provides."""

    dists: dict[str, KernelDist] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # module -> where it is imported
    unpackaged: dict[str, str] = field(default_factory=dict)  # module -> its file


def _source(dist: md.Distribution) -> tuple[str, str | None]:
    """Where ``dist`` was installed from, by its ``direct_url.json`` (PEP 610) and INSTALLER."""
    raw = dist.read_text("direct_url.json")
    if raw:
        try:
            info = json.loads(raw)
        except ValueError:
            info = {}
        url = str(info.get("url", ""))
        path = file_url_path(url)
        if "vcs_info" in info:
            return "vcs", path
        if info.get("dir_info", {}).get("editable"):
            return "editable", path
        if "dir_info" in info:
            return "local", path
        if "archive_info" in info:
            return "archive", path
    develop = _develop_folder(dist)
    if develop is not None:
        return "editable", develop
    if (dist.read_text("INSTALLER") or "").strip() == "conda":
        return "conda", None
    return "index", None


_PROJECT_FILES = ("setup.py", "pyproject.toml", "setup.cfg")


def _develop_folder(dist: md.Distribution) -> str | None:
    """The source folder of a ``setup.py develop`` install (older setuptools', conda's, a
    legacy ``pip install -e``): no ``direct_url.json``, its metadata an ``.egg-info`` folder
    inside the folder an ``.egg-link`` puts on ``sys.path``. That folder is the project's
    (beside its ``setup.py`` or ``pyproject.toml``), or, for a src layout
    (``package_dir={'': 'src'}``), the one the ``.egg-link``'s second line leads back from
    to the project's. The kernel imports that folder as it is now, so it is an editable
    install, whatever an index serves at its version. An ``.egg-info`` in a site directory
    (a legacy non-editable install) has no project file beside it and no ``.egg-link``."""
    folder = Path(str(dist.locate_file(""))).resolve()
    want = normalize(str(dist.metadata["Name"] or ""))
    if not any(
        info.is_dir() and normalize(info.name[: -len(".egg-info")].split("-", 1)[0]) == want
        for info in folder.glob("*.egg-info")
    ):
        return None
    for root in (folder, _egg_link_projects(_path_stamp()).get(folder)):
        if root is not None and any((root / f).is_file() for f in _PROJECT_FILES):
            return str(root)
    return None


@lru_cache(maxsize=4)
def _egg_link_projects(stamp: tuple[tuple[str, int], ...]) -> Mapping[Path, Path]:
    """Each ``.egg-link`` on ``sys.path``'s folders: the folder it puts on the path -> its
    project's folder (the link's second line, relative to the first: ``../`` from ``src``);
    read once per ``sys.path`` state (a system Python has many ``.egg-info`` installs)."""
    out: dict[Path, Path] = {}
    for entry, _ in stamp:
        try:
            links = list(Path(entry or ".").glob("*.egg-link"))
        except OSError:
            continue
        for link in links:
            try:
                lines = link.read_text().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            if lines and lines[0].strip():
                target = Path(lines[0].strip()).resolve()
                back = lines[1].strip() if len(lines) > 1 else ""
                out.setdefault(target, (target / back).resolve() if back else target)
    return out


def _pure(dist: md.Distribution) -> bool:
    wheel = dist.read_text("WHEEL") or ""
    if "Root-Is-Purelib: false" in wheel:
        return False
    return not any(str(f).endswith((".so", ".pyd", ".dylib")) for f in dist.files or ())


def _tags(dist: md.Distribution) -> tuple[str, ...]:
    wheel = dist.read_text("WHEEL") or ""
    return tuple(
        line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")
    )


def _size(dist: md.Distribution) -> int:
    total = 0
    for f in dist.files or ():
        total += int(getattr(f, "size", None) or 0)
    return total


def _requirements(dist: md.Distribution, extras: set[str]) -> list[tuple[str, set[str]]]:
    """The distributions ``dist`` requires on this Python, with the extras asked of each."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None:
            envs = [{"extra": e} for e in (extras or {""})] or [{"extra": ""}]
            if not any(req.marker.evaluate(env) for env in envs):
                continue
        out.append((req.name, set(req.extras)))
    return out


def _path_stamp() -> tuple[tuple[str, int], ...]:
    """``sys.path`` with each folder's mtime: an install or removal changes it."""
    out = []
    for entry in sys.path:
        try:
            out.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            out.append((entry, 0))
    return tuple(out)


@lru_cache(maxsize=4)
def _providers(stamp: tuple[tuple[str, int], ...]) -> Mapping[str, list[str]]:
    """Top-level module -> the distributions providing it (read once per ``sys.path`` state)."""
    return md.packages_distributions()


def _named_provider(module: str, spec: importlib.machinery.ModuleSpec | None) -> str | None:
    """The distribution named as ``module`` is, in the folder the module is imported from,
    when its RECORD lists the module's file (``numpy``, ``requests``, ``torch``): found
    without reading every installed distribution's files, which costs a quarter of a second
    in a large environment. None when that is not so (``yaml`` from PyYAML, a namespace
    package shared by several): then every distribution is read."""
    origin = spec.origin if spec is not None else None
    if not origin or not os.path.isabs(origin) or not spec or not spec.has_location:
        return None
    path = Path(origin)
    site = path.parent.parent if spec.submodule_search_locations is not None else path.parent
    want = normalize(module)
    rel = path.relative_to(site).as_posix()
    try:
        entries = list(os.scandir(site))
    except OSError:
        return None
    for entry in entries:
        if not entry.name.endswith(".dist-info"):
            continue
        if normalize(entry.name[: -len(".dist-info")].split("-", 1)[0]) != want:
            continue
        dist = md.PathDistribution(Path(entry.path))
        if any(str(f) == rel for f in dist.files or ()):
            return str(dist.metadata["Name"])
    return None


def _origin(spec: importlib.machinery.ModuleSpec | None) -> str | None:
    """The file or folder a module is imported from (a namespace package: its first folder)."""
    if spec is None:
        return None
    if spec.origin not in (None, "built-in", "frozen", "namespace"):
        return str(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    return str(locations[0]) if locations else None


def _editable_owner(origin: str) -> str | None:
    """The editable install whose source folder holds ``origin`` (an editable install that
    puts its folder on ``sys.path`` through a ``.pth`` file lists no modules of its own)."""
    path = Path(origin).resolve()
    for dist in md.distributions():
        source, folder = _source(dist)
        if source == "editable" and folder and path.is_relative_to(Path(folder).resolve()):
            return str(dist.metadata["Name"])
    return None


def _distribution(name: str) -> md.Distribution | None:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def kernel_environment(
    modules: Mapping[str, str], exclude: frozenset[str] = frozenset()
) -> KernelEnvironment:
    """The distributions providing ``modules`` (module -> where it is imported) and all they
    require, as this kernel has them installed."""
    env = KernelEnvironment()
    providers: Mapping[str, list[str]] | None = None
    queue: list[tuple[str, set[str], str]] = []
    for module, where in modules.items():
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        named = _named_provider(module, spec)
        if named is not None:
            queue.append((named, set(), module))
            continue
        if providers is None:
            providers = _providers(_path_stamp())
        names = providers.get(module)
        if names:
            queue.extend((n, set(), module) for n in names)
            continue
        origin = _origin(spec)
        owner = _editable_owner(origin) if origin else None
        if spec is None:
            env.missing[module] = where
        elif owner is not None:
            queue.append((owner, set(), module))
        elif origin is not None:
            env.unpackaged[module] = origin
    seen_extras: dict[str, set[str]] = {}
    while queue:
        name, extras, wanted_by = queue.pop(0)
        key = normalize(name)
        if key in exclude:
            continue
        known = seen_extras.setdefault(key, set())
        if key in env.dists and extras <= known:
            continue
        known |= extras
        dist = _distribution(name)
        if dist is None:
            continue
        if key not in env.dists:
            source, path = _source(dist)
            env.dists[key] = KernelDist(
                name=dist.metadata["Name"] or name,
                version=dist.version,
                source=source,
                source_path=path,
                pure=_pure(dist),
                size=_size(dist),
                wanted_by=wanted_by,
                location=str(dist.locate_file("")),
                tags=_tags(dist),
            )
        for req, req_extras in _requirements(dist, extras):
            queue.append((req, req_extras, env.dists[key].name))
    return env


def kernel_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def installed_files(dist_name: str) -> tuple[Path, list[tuple[str, Path]]]:
    """The files an installed distribution put under its site directory (RECORD's paths that
    stay inside it), for a wheel rebuilt from what the kernel has."""
    dist = md.distribution(dist_name)
    root = Path(str(dist.locate_file(""))).resolve()
    out = []
    for f in dist.files or ():
        path = Path(str(dist.locate_file(f))).resolve()
        if path.is_relative_to(root) and path.is_file() and "__pycache__" not in path.parts:
            out.append((path.relative_to(root).as_posix(), path))
    return root, out
