"""What the job's Python really ran (part of the job-side runner, standard library only): the distributions it imported and those the environment plan named, each with its
version and where it came from (the environment layer, the workspace, the image), written
into the job's outputs as ``environment.json``; a planned distribution the job has at
another version, or not at all, is one warning line in the log, before the program runs."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from .common import shipped

PLAN = "plan.json"  # shipped beside the runner: the plan's distributions, written at build time
LAYER_DIR = "/opt/torchx-nb/env"
RECORD = "environment.json"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def planned() -> dict[str, dict[str, str]]:
    """The plan's distributions (normalized name -> name, version, from), if it shipped."""
    path = shipped(PLAN)
    try:
        with open(path, encoding="utf-8") as f:
            dists = json.load(f)["distributions"]
        return {_norm(d["name"]): d for d in dists if isinstance(d, dict) and "name" in d}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


# the job's folder, as the runner starts in it (imported before the program runs: a cell
# that changes directory must not turn the workspace's distributions into the image's)
WORKSPACE = os.getcwd()


def _origin(location: str) -> str:
    where = os.path.abspath(os.path.join(WORKSPACE, location))
    if where == LAYER_DIR or where.startswith(LAYER_DIR + os.sep):
        return "layer"
    here = WORKSPACE
    if where == here or where.startswith(here + os.sep):
        return "workspace"
    return "image"


def distributions(names: list[str]) -> dict[str, dict[str, str]]:
    """Each of ``names`` as this Python finds it first (the copy an import gets)."""
    from importlib import metadata as md

    out: dict[str, dict[str, str]] = {}
    for name in names:
        try:
            dist = md.distribution(name)
        except (md.PackageNotFoundError, ValueError):
            continue
        real = str(dist.metadata["Name"] or name)
        origin = _origin(str(dist.locate_file("")))
        out[_norm(real)] = {"name": real, "version": str(dist.version), "from": origin}
    return out


def check_plan(plan: dict[str, dict[str, str]]) -> None:
    """One warning line per planned distribution this job has at another version, or lacks."""
    found = distributions([d["name"] for d in plan.values()])
    for key, want in sorted(plan.items()):
        got = found.get(key)
        if got is None:
            sys.stderr.write(
                f"torchx_nb: warning: {want['name']} is not in this job's Python"
                f" ({sys.executable}); the plan had {want['version']} from the {want['from']}\n"
            )
        elif got["version"] != want["version"]:
            sys.stderr.write(
                f"torchx_nb: warning: {got['name']} {got['version']} from the {got['from']}"
                f" in this job; the plan had {want['version']} from the {want['from']}\n"
            )


def record(out: str, plan: dict[str, dict[str, str]]) -> None:
    """``environment.json`` in ``out``: the distributions this process imported (by its
    modules' names) and those the plan named."""
    names = {d["name"] for d in plan.values()}
    # an imported module's distribution of its own name (numpy, requests): found without
    # reading every installed distribution's file list (seconds in a large image); those
    # named otherwise (yaml from PyYAML) the plan names, as the kernel found them
    stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    for module in list(sys.modules):
        top = module.partition(".")[0]
        if top and not top.startswith("_") and top not in stdlib:
            names.add(top)
    dists = distributions(sorted(names))
    rows: list[dict[str, Any]] = []
    for key, dist in sorted(dists.items()):
        want = plan.get(key)
        rows.append({**dist, **({"planned": want["version"]} if want else {})})
    doc = {
        "python": ".".join(str(v) for v in sys.version_info[:3]),
        "executable": sys.executable,
        "distributions": rows,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, RECORD), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
