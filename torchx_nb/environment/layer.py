"""The environment layer: the plan's distributions installed for the image's Python and
platform into one site directory, ``/opt/torchx-nb/env``, that a two-line hook in the image's
own site directory puts ahead of the image's site-packages (as a site directory, so ``.pth``
files in it are processed; after the standard library, so nothing shadows it). uv installs
it (``uv pip install --target --python-platform --python-version --only-binary``, with the
kernel's index settings passed explicitly); a distribution no index serves is made into a
wheel from the kernel's copy. The layer is reproducible and cached by the plan's key, so an
unchanged environment is neither rebuilt nor pushed again."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from torchx_nb.environment.identity import differs_from_kernel
from torchx_nb.environment.index import uv_message
from torchx_nb.environment.index_pages import all_listings, what_the_indexes_said
from torchx_nb.environment.kernel import KernelDist
from torchx_nb.environment.pack import EnvPack
from torchx_nb.environment.plan import EnvPlan, PlanItem, check_python, diff
from torchx_nb.environment.uv_install import uv_install_cmd
from torchx_nb.environment.wheels import local_wheel
from torchx_nb.progress import Progress
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_contents import ImageContents
from torchx_nb.workspace.layers import Layer, cache_dir, keep_cached, read_cached

_MAX_ROUNDS = 50


def _uv(reqs: list[str], folder: Path, plan: EnvPlan) -> subprocess.CompletedProcess[str]:
    """uv's install of ``reqs`` (pins or wheel files) into ``folder``; pins with hashes go
    through a requirements file beside it (uv takes only a file with one of them)."""
    c = plan.contents
    assert c is not None and c.python
    if any(" --hash=" in r for r in reqs):
        listed = folder.with_name(f"{folder.name}-requirements.txt")
        listed.write_text("\n".join(reqs) + "\n")
        reqs = ["-r", str(listed)]
    cmd = uv_install_cmd(folder, reqs, c.python, c.platform, plan.index)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=plan.index.uv_env())


def install(
    plan: EnvPlan,
    tmp: Path,
    report: Callable[[int, int], None] | None = None,
    stream: Callable[[Iterator[bytes]], None] | None = None,
) -> EnvPack:
    """Install the plan's distributions (nothing else: the plan is already closed over its
    requirements) and pack them: those an index serves first (packed ahead by the plan's head
    start when it fetched exactly these), then those made from the kernel's copies.
    ``stream`` is handed the layer's bytes as they are written (to upload them meanwhile)."""
    contents = plan.contents
    assert contents is not None and contents.python
    wheels = tmp / "wheels"
    wheels.mkdir(exist_ok=True)
    local: dict[str, Path] = {}
    for item in plan.add:
        if item.local and item.dist is not None:
            tag = _fitting_tag(item.dist, contents)
            local[item.name] = local_wheel(item.dist, wheels, plan.index, tag)
    served = [i for i in plan.add if i.name not in local]
    head, plan.head_start = plan.head_start, None
    pack = None
    if head is not None:
        pins = [i.pin for i in served]
        pack = head.take(pins, contents.python, contents.platform, plan.index, report, stream)
    if pack is None:
        pack = EnvPack(report)
        if stream is not None:
            stream(pack.follow())
        try:
            served = _install_served(plan, served, local, wheels, tmp / "served")
            other = _other_builds(served, tmp / "served")
            if other:  # the kernel's build ships, as the kernel imports it
                for item in other:
                    assert item.dist is not None
                    tag = _fitting_tag(item.dist, contents)
                    local[item.name] = local_wheel(item.dist, wheels, plan.index, tag)
                shutil.rmtree(tmp / "served")
                served = [i for i in served if i.name not in local]
                served = _install_served(plan, served, local, wheels, tmp / "served")
            if served:
                pack.add_folder(tmp / "served")
        except BaseException:
            pack.abort()
            raise
    try:
        if local:
            proc = _uv(
                [str(local[i.name]) for i in plan.add if i.name in local], tmp / "local", plan
            )
            if proc.returncode != 0:
                why = uv_message(proc.stderr)
                raise TorchxNbError(f"cannot install the environment layer: {why}")
            pack.add_folder(tmp / "local")
    except BaseException:
        pack.abort()
        raise
    return pack


def _other_builds(items: list[PlanItem], folder: Path) -> list[PlanItem]:
    """The items whose copy the indexes served into ``folder`` is another build than the
    kernel's at that version (see ``differs_from_kernel``)."""
    return [i for i in items if i.dist is not None and differs_from_kernel(i.dist, folder)]


def _fitting_tag(dist: KernelDist, contents: ImageContents) -> str | None:
    """For a compiled distribution, the first of its wheel tags the image accepts."""
    if dist.pure:
        return None
    from torchx_nb.environment.tags import fitting

    found = fitting(dist.tags, contents)
    return found[0] if found else None


def _install_served(
    plan: EnvPlan, served: list[PlanItem], local: dict[str, Path], wheels: Path, folder: Path
) -> list[PlanItem]:
    """Install what an index serves into ``folder``. When uv fails, what the indexes say
    (their pages, read again) names why: a pure distribution of the kernel's that no index
    serves for the image is made into a wheel from the kernel's copy (into ``local``); a
    refusal, an unreachable index, a missing version or a wheel for other platforms is one
    line. The items installed."""
    contents = plan.contents
    assert contents is not None and contents.python
    for _ in range(_MAX_ROUNDS):
        if not served:
            return served
        proc = _uv([i.requirement for i in served], folder, plan)
        if proc.returncode == 0:
            return served
        found = all_listings(plan.index, [i.name for i in served])
        said = {
            i.name: why
            for i in served
            if (why := what_the_indexes_said(i.name, i.version, found[i.name], contents))
        }
        if not said:
            raise TorchxNbError(f"cannot install the environment layer: {uv_message(proc.stderr)}")
        blocked = next(
            (w for w in said.values() if " refused the credentials " in w or " unreachable " in w),
            None,
        )
        if blocked is not None:
            raise TorchxNbError(
                f"cannot install the environment layer: {blocked}: fix the index settings"
                " of the kernel's pip (pip config list), or pass --packages none"
            )
        fallback: dict[str, str | None] = {}  # name -> the wheel tag a compiled one takes
        for i in served:
            if i.name in said and i.dist is not None:
                tag = _fitting_tag(i.dist, contents)
                if i.dist.pure or tag is not None:
                    fallback[i.name] = tag
        if len(fallback) < len(said):
            item = next(i for i in served if i.name in said and i.name not in fallback)
            if item.dist is not None:
                tags = ", ".join(item.dist.tags) or "no wheel tags recorded"
                fix = (
                    f", nor does this kernel's copy fit the image ({tags}): publish a wheel"
                    " for it, install it in the base image, or pass --packages none"
                )
            else:
                fix = f": check --packages {plan.packages}"
            raise TorchxNbError(
                f"cannot install {item.pin} for Python {contents.python} on"
                f" {contents.platform}: {said[item.name]} ({plan.index.describe()}){fix}"
            )
        for item in served:
            if item.name in fallback and item.dist is not None:
                local[item.name] = local_wheel(item.dist, wheels, plan.index, fallback[item.name])
        served = [i for i in served if i.name not in said]
    raise TorchxNbError("cannot install the environment layer: too many unserved distributions")


def build_env_layer(
    plan: EnvPlan,
    progress: Progress | None = None,
    stream: Callable[[Iterator[bytes]], None] | None = None,
) -> Layer | None:
    """The plan's layer (None when it adds nothing), from the cache when the key is known;
    when it is made, ``stream`` is handed its bytes as they are written."""
    if not plan.add or plan.contents is None or not plan.contents.site_dir:
        return None
    cache = cache_dir()
    key = plan.key()
    cached, meta = cache / f"env-{key}.tar.gz", cache / f"env-{key}.json"
    found = read_cached(cached, meta)
    if found is not None:
        plan.drop_head_start()
        return found
    planned = max(plan.size(), 1)
    if progress:
        progress(0, planned, "environment: installing")
    packed: list[int] = []

    def report(done: int, total: int) -> None:
        if progress and not packed:
            packed.append(1)
            progress(planned, planned, "environment: installing")
        if progress:
            progress(done, total, "environment: packing")

    with tempfile.TemporaryDirectory(prefix="torchx-nb-env-") as tmp:
        pack = install(plan, Path(tmp), report, stream)
    try:
        layer = pack.finish(plan.contents.site_dir)
    except BaseException:
        pack.abort()
        raise
    kept = keep_cached(layer, cached, meta)
    if progress:
        progress(pack.total, max(pack.total, 1), "environment: packing")
    return kept


class EnvironmentBuild:
    """What a builder is handed to make the environment layer for the image it builds on: the
    plan, diffed again when the image is not the one it was made against (a Dockerfile.torchx
    built first: what it installed stays)."""

    def __init__(self, plan: EnvPlan) -> None:
        self.plan = plan

    def key(self) -> str:
        return self.plan.key()

    def layer_for(
        self,
        image: ImageContents,
        on_top: Mapping[str, str] | None = None,
        progress: Progress | None = None,
        stream: Callable[[Iterator[bytes]], None] | None = None,
    ) -> Layer | None:
        plan = self.plan
        if image != plan.contents or on_top:
            plan.contents = image
            diff(plan, frozenset(on_top or ()))
            check_python(plan)
        return build_env_layer(plan, progress, stream)
