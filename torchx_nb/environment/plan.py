"""The environment plan: what the job needs from the kernel (or from a requirements file),
diffed against what the base image already has. Each distribution to add is listed with its
version, why (missing, another version in the image, built locally) and its size; what the
image already has stays. Made before anything is built, so the dry run shows it."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torchx_nb.environment.identity import (
    differs_from_kernel,
    folder_identity,
    installed_identity,
    installed_record_identity,
    served_identity,
)
from torchx_nb.environment.imports import Imports, program_imports
from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.index_pages import (
    Listing,
    all_listings,
    fitting,
    served,
    what_the_indexes_said,
)
from torchx_nb.environment.kernel import KernelDist, kernel_environment, kernel_python
from torchx_nb.environment.pip_config import kernel_index
from torchx_nb.environment.requirements import pins_from_file
from torchx_nb.environment.tags import fitting as fitting_tags
from torchx_nb.environment.uv_install import HeadStart, head_start, likely_platform
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.specs.program import Program
from torchx_nb.workspace.image_contents import ImageContents, normalize

AUTO, NONE = "auto", "none"
LAYOUT = 2  # bump when the layer's layout changes (invalidates cached layers)


@dataclass(frozen=True)
class PlanItem:
    """One distribution the environment layer adds."""

    name: str
    version: str
    reason: str  # missing | image has X | built locally (editable)…
    size: int = 0
    dist: KernelDist | None = None  # the kernel's copy (None: from a requirements file)
    unserved: bool = False  # installed from an index, but none serves a wheel for the image
    note: str = ""  # said after the reason (a FILE's: "built from ./pkg", "resolved at submit")
    hashes: tuple[str, ...] = ()  # "sha256:…" a FILE allows for it (its --hash, a lock's)
    ident: str = ""  # a FILE's URL or git reference, by its contents (commit, file sha256)

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def requirement(self) -> str:
        """The pin as a requirements file line, with the hashes the FILE allows (uv then
        takes only a file that has one of them)."""
        return " ".join([self.pin, *(f"--hash={h}" for h in self.hashes)])

    @property
    def local(self) -> bool:
        """Made from the kernel's copy rather than fetched from an index."""
        return self.dist is not None and (self.dist.source != "index" or self.unserved)


@dataclass
class EnvPlan:
    """What the environment layer of ``image`` holds, and what stays from the image."""

    packages: str
    image: str
    contents: ImageContents | None
    index: IndexSettings
    add: list[PlanItem] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # module -> where it is imported
    unpackaged: dict[str, tuple[str, str]] = field(default_factory=dict)  # module -> where, file
    relabelled: list[tuple[str, str, str]] = field(default_factory=list)  # name, image's, kernel's
    note: str | None = None  # why it was not diffed against the image (a dry run goes on)
    wanted: list[PlanItem] = field(default_factory=list)  # before the diff
    head_start: HeadStart | None = None  # the install begun while the image was read
    # what the indexes list for each distribution fetched from them (normalized name ->)
    listings: dict[str, list[Listing]] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """One line each: a module neither the kernel nor the image has, a module from a file
        no distribution lists, a distribution kept at the image's local label."""
        have = self.contents.distributions if self.contents else {}
        lines = [
            f"module {module!r} ({where}) is neither in this kernel nor in {self.image}:"
            " the job will fail to import it"
            for module, where in self.missing.items()
            if normalize(module) not in have
        ]
        lines += [
            f"module {module!r} ({where}) comes from {origin}, which no installed"
            " distribution lists: it does not travel; ship it in the workspace"
            for module, (where, origin) in self.unpackaged.items()
            if normalize(module) not in have
        ]
        lines += [
            f"keeping {name} {theirs} from the image (the kernel has {ours}, the same release"
            " with another local label)"
            for name, theirs, ours in self.relabelled
        ]
        lines += self._blocked_indexes()
        return lines

    def _blocked_indexes(self) -> list[str]:
        """One line per index whose pages refused the credentials or could not be reached
        for a distribution the layer fetches from the indexes: the submit's install would
        fail on it (said before it, in the dry run too)."""
        fetched = {normalize(i.name) for i in self.add if not i.local}
        keyring = self.index.uses_keyring()  # uv may get credentials the pages did not
        said: dict[str, str] = {}
        for name in sorted(fetched):
            for x in self.listings.get(name, []):
                if x.state == "refused" and x.source not in said and not keyring:
                    said[x.source] = f"index {x.source} refused the credentials ({x.detail})"
                elif x.state == "unreachable" and x.source not in said:
                    said[x.source] = f"index {x.source} is unreachable ({x.detail})"
        return [
            f"{why}: the layer's install needs it; fix the index settings of the kernel's pip"
            " (pip config list), or pass --packages none"
            for why in said.values()
        ]

    def drop_head_start(self) -> None:
        """Stop the head start nobody will take (the image wants nothing, the layer is
        cached, the build failed before it) and remove what it made."""
        head, self.head_start = self.head_start, None
        if head is not None:
            head.cancel()

    def identity(self, item: PlanItem) -> str:
        """What ``item`` is by its contents: the sha256 of the wheels the indexes serve for
        the image, or the kernel's installed files (see identity.py)."""
        if item.ident:
            return item.ident
        if item.dist is not None and item.dist.source == "project" and item.dist.source_path:
            return "folder:" + folder_identity(Path(item.dist.source_path))
        if item.local and item.dist is not None:
            return "installed:" + installed_identity(item.dist)
        c = self.contents
        found = self.listings.get(normalize(item.name), [])
        files = fitting(found, item.version, c) if c and c.python else []
        if files:
            # the kernel's build too: one the indexes no longer serve ships instead
            ours = installed_record_identity(item.dist) if item.dist else ""
            return f"served:{served_identity(files)};kernel:{ours}"
        return "installed:" + installed_identity(item.dist) if item.dist else ""

    def key(self) -> str:
        """The layer's cache key: the distributions by their contents (identity), where each
        comes from, the image's Python and platform and where the layer hooks in."""
        c = self.contents
        doc = {
            "layout": LAYOUT,
            "pins": sorted(
                (i.pin, i.dist.source if i.dist else "index", self.identity(i)) for i in self.add
            ),
            "python": c.python if c else None,
            "platform": c.platform if c else None,
            "site": c.site_dir if c else None,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def size(self) -> int:
        return sum(i.size for i in self.add)

    def summary(self) -> str:
        """One line for the dry run's summary."""
        if self.packages == NONE:
            return "none (--packages none): the image's own packages only"
        src = "" if self.packages == AUTO else f" from {self.packages}"
        if not self.add:
            kept = f"; {len(self.kept)} from the image" if self.kept else ""
            return f"nothing to add{src}{kept}" + (f" ({self.note})" if self.note else "")
        names = ", ".join(f"{i.name} {i.version}" for i in self.add[:4])
        more = f" and {len(self.add) - 4} more" if len(self.add) > 4 else ""
        kept = f"; {len(self.kept)} kept from the image" if self.kept else ""
        note = f" ({self.note})" if self.note else ""
        return f"{len(self.add)} to add{src} ({_mb(self.size())}): {names}{more}{kept}{note}"

    def table(self) -> str:
        """The whole plan, for the dry run's environment section."""
        c = self.contents
        head = f"environment plan for {self.image}"
        if c is not None and c.python:
            head += f" (Python {c.python}, {c.platform}, layer hooked in at {c.site_dir})"
        lines = [head]
        if c is not None:
            lines.append(f"python: {c.describe_python()}")
        lines.append(f"index: {self.index.describe()}")
        if self.note:
            lines.append(f"note: {self.note}")
        if self.add:
            lines.append(f"to add ({len(self.add)}, {_mb(self.size())}):")
            width = max(len(i.name) for i in self.add)
            lines += [
                f"  {i.name:<{width}}  {i.version:<14} {_mb(i.size):>9}  {i.reason}"
                for i in self.add
            ]
        if self.kept:
            lines.append(f"kept from the image ({len(self.kept)}):")
            lines += [f"  {name} {version}" for name, version in self.kept]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} KB"


def _reason(dist: KernelDist, image_version: str | None, unserved: bool) -> str:
    base = "missing" if image_version is None else f"image has {image_version}"
    if unserved:
        return f"{base}; made from the kernel's installed files (no index serves a wheel of it)"
    if dist.source in ("index", "project"):  # a FILE's folder: its note says which
        return base
    if dist.source == "editable":
        return f"{base}; built from the kernel's editable install"
    return f"{base}; made from the kernel's {dist.source} install (its installed files)"


def _same_public(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a).public == Version(b).public
    except InvalidVersion:
        return False


def diff(plan: EnvPlan, on_top: frozenset[str] = frozenset()) -> None:
    """Fill ``plan.add``/``kept``/``relabelled`` from ``plan.wanted`` against its image; a
    distribution named in ``on_top`` (installed by a Dockerfile.torchx) stays as it is."""
    have = plan.contents.distributions if plan.contents else {}
    plan.add, plan.kept = [], []
    plan.relabelled = []
    for item in plan.wanted:
        key = normalize(item.name)
        theirs = have.get(key)
        other = theirs == item.version and _other_contents(plan, item)
        if (theirs == item.version and not other) or key in on_top:
            plan.kept.append((item.name, theirs or item.version))
        elif theirs is not None and not other and _same_public(theirs, item.version):
            plan.kept.append((item.name, theirs))
            plan.relabelled.append((item.name, theirs, item.version))
        else:
            unserved = _unserved(plan, item)
            shown = f"{theirs} with other contents" if other else theirs
            reason = (
                _reason(item.dist, shown, unserved)
                if item.dist
                else ("missing" if theirs is None else f"image has {theirs}")
            )
            if item.note:
                reason += f"; {item.note}"
            plan.add.append(
                PlanItem(
                    item.name,
                    item.version,
                    reason,
                    item.size,
                    item.dist,
                    unserved,
                    item.note,
                    item.hashes,
                    item.ident,
                )
            )


def _other_contents(plan: EnvPlan, item: PlanItem) -> bool:
    """Whether the image's copy of ``item``, at the kernel's version, holds other files than
    the kernel's (by their RECORD digests): a local build, a wheel file, a VCS checkout or an
    editable install is not "the same" because its version is, nor is a pure-Python one from
    an index (a wheel uploaded again at that version, another index's build). (A compiled
    one from an index is: the image may hold another platform's build of the same release.)"""
    c, dist = plan.contents, item.dist
    if c is None or dist is None or dist.source == "conda":
        return False
    if dist.source == "index" and not dist.pure:
        return False
    theirs = c.records.get(normalize(item.name))
    if not theirs:
        return False
    return installed_record_identity(dist) != theirs


def _unserved(plan: EnvPlan, item: PlanItem) -> bool:
    """Whether ``item``, which the kernel installed from an index, is known to be served by
    no index for the image, and is made from the kernel's copy instead (pure, or compiled
    with wheel tags the image accepts)."""
    c = plan.contents
    if not _never_served(plan, item) or c is None or item.dist is None:
        return False
    return item.dist.pure or bool(fitting_tags(item.dist.tags, c))


def _never_served(plan: EnvPlan, item: PlanItem) -> bool:
    """Whether the kernel got ``item`` from an index and, by the indexes' pages, none serves
    a wheel of it for the image."""
    c = plan.contents
    if item.dist is None or item.dist.source != "index" or c is None or not c.python:
        return False
    found = plan.listings.get(normalize(item.name))
    return found is not None and served(found, item.version, c) is False


def check_python(plan: EnvPlan) -> None:
    """Refuse, in one line, a plan the image's Python cannot take."""
    c = plan.contents
    if not plan.add or c is None:
        return
    if c.python is None and c.python_why:
        raise TorchxNbError(
            f"image {plan.image}: cannot tell which Python the job runs ({c.python_why}):"
            " put python on the image's PATH, or pass --packages none"
        )
    if c.python is None:
        raise TorchxNbError(
            f"image {plan.image} has no Python 3 to add {plan.add[0].name} to: use an image"
            " with Python, or pass --packages none"
        )
    ours = kernel_python()
    compiled = [i for i in plan.add if i.dist is not None and not i.dist.pure]
    said = {
        i.dist.key: what_the_indexes_said(i.name, i.version, plan.listings[normalize(i.name)], c)
        or ""
        for i in compiled
        if i.dist and _never_served(plan, i)
    }
    check_tags(
        plan,
        [i.dist for i in compiled if i.dist and (i.dist.source != "index" or i.dist.key in said)],
        said,
    )
    if c.python != ours and compiled:
        raise TorchxNbError(
            f"image {plan.image} has Python {c.python} and this kernel {ours}: the binary"
            f" wheels of {', '.join(i.name for i in compiled[:3])} need the same minor"
            f" version; use an image with Python {ours}, or pass --packages none"
        )


def check_tags(plan: EnvPlan, dists: list[KernelDist], said: dict[str, str] | None = None) -> None:
    """Refuse, in one line, a compiled distribution made from the kernel's copy whose wheel
    tags the image's Python and libc do not accept (a host-built ``linux_x86_64`` wheel, a
    manylinux tag above the image's glibc); ``said``: what the indexes said of one the kernel
    got from an index that serves no wheel of it for the image."""
    from torchx_nb.environment.tags import fitting

    c = plan.contents
    assert c is not None and c.python is not None
    for dist in dists:
        if not fitting(dist.tags, c):
            tags = ", ".join(dist.tags) or "no wheel tags recorded"
            raise TorchxNbError(
                f"{dist.name} {dist.version} is compiled, and this kernel's copy ({tags}) does"
                f" not fit image {plan.image} (Python {c.python}, {c.platform} or older)"
                + (f"; {said[dist.key]}" if said and said.get(dist.key) else "")
                + ": install a wheel built for it, install it in the base image, or pass"
                " --packages none"
            )


def check_hashes(plan: EnvPlan) -> None:
    """Refuse, in one line, a distribution a FILE gives hashes for (pip's ``--hash``, a
    uv.lock's) when no wheel the indexes serve of it for the image has one of them (the
    indexes serve other files than those the FILE was made from: pip would refuse them)."""
    from torchx_nb.environment.identity import served_digest

    c = plan.contents
    if c is None or not c.python:
        return
    for item in plan.wanted:
        if not item.hashes or item.dist is not None:
            continue
        files = fitting(plan.listings.get(normalize(item.name), []), item.version, c)
        allowed = {h.removeprefix("sha256:") for h in item.hashes if h.startswith("sha256:")}
        digests = {f.filename: served_digest(f).lower() for f in files}
        if files and not allowed & set(digests.values()):
            shown = ", ".join(f"{n} (sha256:{d[:16]}…)" for n, d in sorted(digests.items())[:3])
            raise TorchxNbError(
                f"--packages {plan.packages}: {item.pin} has hashes that no wheel the indexes"
                f" serve for the image has ({shown}; {plan.index.describe()}): the indexes"
                " serve other files than the ones it was made from; fix the hashes, or the"
                " index settings of the kernel's pip"
            )


_NAME = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")


def check_pin(name: str, version: str, origin: str) -> None:
    """Refuse, in one line, a distribution name or version no index could hold (an
    installed ``METADATA`` or a requirements file may say anything)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
        valid = bool(_NAME.match(name))
    except InvalidVersion:
        valid = False
    if not valid:
        raise TorchxNbError(
            f"{origin} names the distribution {name!r} version {version!r}, which is not a"
            " valid name and version: fix or remove it, or pass --packages none"
        )


def _wanted_from_kernel(imports: Imports, plan: EnvPlan) -> None:
    env = kernel_environment(imports.modules)
    for d in env.dists.values():
        check_pin(d.name, d.version, f"this kernel's installed {d.location!r}")
    plan.wanted = [PlanItem(d.name, d.version, "", d.size, d) for d in env.dists.values()]
    plan.missing = dict(env.missing)
    plan.unpackaged = {m: (imports.modules[m], origin) for m, origin in env.unpackaged.items()}


def _wanted_from_file(plan: EnvPlan, packages: str, build: bool) -> None:
    """``plan.wanted`` from ``--packages FILE``: resolved when building; in a dry run, which
    downloads and builds nothing, a requirements file's lines as it says them."""
    from torchx_nb.environment.requirements import UNRESOLVED

    pins = pins_from_file(packages, plan.contents, plan.index, resolve=build)
    plan.wanted = []
    for pin in pins:
        check_pin(pin.name, "0" if pin.version == UNRESOLVED else pin.version, packages)
        dist = None
        if pin.folder is not None:
            dist = KernelDist(pin.name, pin.version, "project", pin.folder, True, 0, packages)
        plan.wanted.append(
            PlanItem(
                pin.name,
                pin.version,
                "",
                0,
                dist,
                note=pin.note,
                hashes=pin.hashes,
                ident=pin.identity,
            )
        )
    if any(p.version == UNRESOLVED or p.folder or p.direct for p in pins) and not build:
        plan.note = (
            "a dry run downloads and builds nothing: versions, requirements, local"
            " folders' wheels, URLs and git checkouts are resolved at submit"
        )


def plan_environment(
    program: Program,
    workspace: str | None,
    image: str,
    read_image: Callable[[], ImageContents],
    packages: str | None = None,
    build: bool = False,
    upload_to: str | None = None,
) -> EnvPlan | None:
    """The environment plan of ``program`` on ``image`` (None when it imports nothing the
    standard library and the workspace do not give). ``packages``: ``auto`` (the kernel's,
    the default), ``none``, or a requirements.txt / pyproject.toml / uv.lock. The image is
    read (``read_image``) only when the program imports something beyond the standard library
    and the workspace, or a file is given; in a dry run an image that cannot be read leaves
    the plan undiffed, with a note. The image and pip's settings are read on threads while
    the kernel's distributions are looked up: the first two mostly wait (on a registry or
    the daemon, on ``pip config``). When building, the index's pins get a head start while
    the image is read (their packed bytes going to ``upload_to``, the repository the build
    pushes to, as they are written)."""
    from concurrent.futures import ThreadPoolExecutor

    packages = (packages or AUTO).strip()
    if packages.lower() == NONE:
        return EnvPlan(NONE, image, None, IndexSettings())
    file_mode = packages.lower() != AUTO
    imports = None if file_mode else program_imports(program, workspace)
    if imports is not None and not imports.modules:
        return None
    plan = EnvPlan(packages if file_mode else AUTO, image, None, IndexSettings())
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="torchx-nb-plan")
    try:
        contents = pool.submit(read_image)
        index = pool.submit(kernel_index)
        if imports is not None:
            _wanted_from_kernel(imports, plan)
        plan.index = index.result()
        if not file_mode and not plan.wanted and not plan.missing and not plan.unpackaged:
            return None
        names = [i.name for i in plan.wanted if i.dist is not None and i.dist.source == "index"]
        listed = pool.submit(all_listings, plan.index, names)
        if build and not contents.done():
            fetched = [i for i in plan.wanted if i.dist and not i.local]
            plan.head_start = head_start(
                [(i.pin, i.size) for i in fetched],
                kernel_python(),
                likely_platform(),
                plan.index,
                upload_to,
                # another build than the kernel's at a version is not packed: the kernel's ships
                lambda folder: (
                    not any(differs_from_kernel(i.dist, folder) for i in fetched if i.dist)
                ),
            )
        try:
            plan.contents = contents.result()
        except TorchxNbError as e:
            if build:
                raise
            plan.note = f"not compared with the image, which could not be read: {e}"
        plan.listings = {normalize(n): found for n, found in listed.result().items()}
    except BaseException:
        plan.drop_head_start()
        raise
    finally:
        pool.shutdown(wait=False)
    try:
        if file_mode:
            _wanted_from_file(plan, packages, build)
            served = [i.name for i in plan.wanted if i.dist is None]
            found = all_listings(plan.index, served)
            plan.listings = {normalize(n): f for n, f in found.items()}
            check_hashes(plan)
        diff(plan)
        check_python(plan)
    except BaseException:
        plan.drop_head_start()
        raise
    if not plan.add:
        plan.drop_head_start()
    return plan
