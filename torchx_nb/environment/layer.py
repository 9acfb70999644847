"""The environment layer: the plan's distributions installed for the image's Python and
platform into one site directory, ``/opt/torchx-nb/env``, that a two-line hook in the image's
own site directory puts ahead of the image's site-packages (as a site directory, so ``.pth``
files in it are processed; after the standard library, so nothing shadows it). uv installs
it (``uv pip install --target --python-platform --python-version --only-binary``, with the
kernel's index settings passed explicitly); a distribution no index serves is made into a
wheel from the kernel's copy. The layer is reproducible and cached by the plan's key, so an
unchanged environment is neither rebuilt nor pushed again."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from torchx_nb.environment.index import mask_url
from torchx_nb.environment.plan import EnvPlan, PlanItem, check_python, diff
from torchx_nb.environment.wheels import local_wheel, uv_bin
from torchx_nb.progress import Progress
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_contents import ImageContents
from torchx_nb.workspace.layers import Layer, _entries_for, _norm_mode, _write_layer, cache_dir

ENV_DIR = "/opt/torchx-nb/env"
HOOK_PTH = "torchx-nb-env.pth"
HOOK_MODULE = "_torchx_nb_env"
HOOK_SOURCE = f'''"""torchx_nb's environment layer: {ENV_DIR} as a site directory, ahead of the
image's own site-packages (after the standard library)."""
import site
import sys

_DIR = {ENV_DIR!r}
if _DIR not in sys.path:
    _n = len(sys.path)
    site.addsitedir(_DIR)
    _new = sys.path[_n:]
    del sys.path[_n:]
    _at = next(
        (i for i, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))),
        len(sys.path),
    )
    sys.path[_at:_at] = _new
'''
_SKIP_TOP = {"bin", "__pycache__", ".lock"}
_SKIP_NAMES = {"direct_url.json", "uv_cache.json"}  # local paths, install times
_MAX_ROUNDS = 50
# gzip's fastest level: an environment is tens to thousands of MB of already dense files
# (wheels' contents, shared objects), where level 6 costs three times the time for a few
# percent; the level is part of what makes the digest reproducible
LEVEL = 1


def _unserved(stderr: str, pending: list[PlanItem]) -> PlanItem | None:
    """The distribution uv says no index offers for the image (the first one it names)."""
    text = " ".join(stderr.split())
    best: tuple[int, PlanItem] | None = None
    for item in pending:
        m = re.search(rf"(?<![\w.-]){re.escape(item.name)}(?![\w-])", text, re.I)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), item)
    return best[1] if best else None


def install(plan: EnvPlan, target: Path, wheels: Path) -> None:
    """Install the plan's distributions into ``target`` (nothing else: the plan is already
    closed over its requirements)."""
    contents = plan.contents
    assert contents is not None and contents.python
    local: dict[str, Path] = {}
    for item in plan.add:
        if item.local and item.dist is not None:
            local[item.name] = local_wheel(item.dist, wheels, plan.index)
    for _ in range(_MAX_ROUNDS):
        reqs = [str(local[i.name]) if i.name in local else i.pin for i in plan.add]
        cmd = [
            uv_bin(),
            "pip",
            "install",
            "--no-config",
            "--quiet",
            "--target",
            str(target),
            "--python-platform",
            contents.platform,
            "--python-version",
            contents.python,
            "--only-binary",
            ":all:",
            "--no-deps",
            "--link-mode",
            "hardlink",  # from uv's cache: the files are only read, to be packed
            *plan.index.uv_args(),
            *reqs,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return
        pending = [i for i in plan.add if i.name not in local]
        missing = _unserved(proc.stderr, pending)
        if missing is None:
            why = mask_url(" ".join(proc.stderr.split())[-400:])
            raise TorchxNbError(f"cannot install the environment layer: {why}")
        if missing.dist is None:
            raise TorchxNbError(
                f"no index serves {missing.pin} for Python {contents.python} on"
                f" {contents.platform} ({plan.index.describe()}): check --packages"
                f" {plan.packages}"
            )
        if not missing.dist.pure:
            raise TorchxNbError(
                f"{missing.pin} is compiled and no index serves a wheel of it for Python"
                f" {contents.python} on {contents.platform}: publish one, install it in the"
                " base image, or pass --packages none"
            )
        local[missing.name] = local_wheel(missing.dist, wheels, plan.index)
    raise TorchxNbError("cannot install the environment layer: too many unserved distributions")


def _files(target: Path) -> dict[str, tuple[bytes | Path | None, int, str | None]]:
    out: dict[str, tuple[bytes | Path | None, int, str | None]] = {}
    for path in sorted(target.rglob("*")):
        rel = path.relative_to(target)
        if rel.parts[0] in _SKIP_TOP or "__pycache__" in rel.parts or rel.name in _SKIP_NAMES:
            continue
        if path.is_symlink():
            out[rel.as_posix()] = (None, 0o777, os.readlink(path))
        elif rel.name == "RECORD" and rel.parent.name.endswith(".dist-info"):
            kept = [
                line
                for line in path.read_text().splitlines()
                if line.split(",", 1)[0].rsplit("/", 1)[-1] not in _SKIP_NAMES
            ]
            out[rel.as_posix()] = ("\n".join(kept).encode() + b"\n", 0o644, None)
        elif path.is_file():
            out[rel.as_posix()] = (path, _norm_mode(path.stat().st_mode), None)
    return out


def build_env_layer(plan: EnvPlan, progress: Progress | None = None) -> Layer | None:
    """The plan's layer (None when it adds nothing), from the cache when the key is known."""
    if not plan.add or plan.contents is None or not plan.contents.site_dir:
        return None
    cache = cache_dir()
    key = plan.key()
    cached, meta = cache / f"env-{key}.tar.gz", cache / f"env-{key}.json"
    if cached.exists() and meta.exists():
        m = json.loads(meta.read_text())
        return Layer(cached, m["digest"], m["diff_id"], m["size"])
    planned = max(plan.size(), 1)
    if progress:
        progress(0, planned, "environment: installing")
    with tempfile.TemporaryDirectory(prefix="torchx-nb-env-") as tmp:
        target, wheels = Path(tmp) / "site", Path(tmp) / "wheels"
        target.mkdir()
        wheels.mkdir()
        install(plan, target, wheels)
        if progress:
            progress(planned, planned, "environment: installing")
        files = _files(target)
        total = max(sum(p.stat().st_size for p, _, _ in files.values() if isinstance(p, Path)), 1)
        if progress:
            progress(0, total, "environment: packing")
        entries = _entries_for(files, ENV_DIR)
        site = plan.contents.site_dir.strip("/")
        hooks = _entries_for(
            {
                HOOK_PTH: (f"import {HOOK_MODULE}\n".encode(), 0o644, None),
                f"{HOOK_MODULE}.py": (HOOK_SOURCE.encode(), 0o644, None),
            },
            site,
        )
        merged = {e[0]: e for e in [*entries, *hooks]}
        fd, partial = tempfile.mkstemp(dir=cache, suffix=".partial")
        os.close(fd)
        layer = _write_layer(
            [merged[k] for k in sorted(merged)],
            Path(partial),
            LEVEL,
            (lambda n: progress(min(n, total), total, "environment: packing"))
            if progress
            else None,
        )
    shutil.move(partial, cached)
    meta.write_text(
        json.dumps({"digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size})
    )
    if progress:
        progress(total, total, "environment: packing")
    return Layer(cached, layer.digest, layer.diff_id, layer.size)


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
    ) -> Layer | None:
        plan = self.plan
        if image != plan.contents or on_top:
            plan.contents = image
            diff(plan, frozenset(on_top or ()))
            check_python(plan)
        return build_env_layer(plan, progress)
