"""Imports point down the layers of DESIGN.md, lazy imports included: no cycle between the
package's modules and folders, and no lower layer reaching up to the notebook, server or CLI."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchx_nb"
TOP = {"notebook", "server", "cli"}


def unit(module: str) -> str:
    """The folder or top-level module under torchx_nb that ``module`` belongs to."""
    parts = [p for p in module.split(".") if p != "__init__"]
    return parts[1] if len(parts) > 1 else "torchx_nb"


def module_name(path: Path) -> str:
    """``torchx_nb/schedulers/slurm/logs.py`` -> ``torchx_nb.schedulers.slurm.logs``."""
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
        ".__init__"
    )


def is_module(name: str) -> bool:
    """Whether ``name`` (dotted, under torchx_nb) is a module or package of the tree."""
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """The torchx_nb modules ``path`` imports, lazy and relative imports included; ``from
    pkg import sub`` counts as importing ``pkg.sub`` when ``sub`` is a module."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            if base != "torchx_nb" and not base.startswith("torchx_nb."):
                continue
            subs = {f"{base}.{a.name}" for a in node.names if is_module(f"{base}.{a.name}")}
            found.update(subs)
            if base != "torchx_nb" and len(subs) < len(node.names):
                found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("torchx_nb."))
    return found


def layer_graph() -> dict[str, set[str]]:
    """unit -> the units it imports; the package's own ``__init__`` (IMAGE and the extension
    hooks, as in TorchX) is the entry point above everything and left out."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        source = unit(".".join(parts))
        if source == "torchx_nb":
            continue
        for module in imports_of(path):
            target = unit(module)
            if target not in (source, "torchx_nb"):
                graph[source].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_between_layers() -> None:
    graph = layer_graph()
    assert {"schedulers", "workspace", "runner", "notebook"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_lower_layers_do_not_import_the_notebook_server_or_cli() -> None:
    graph = layer_graph()
    for source, targets in graph.items():
        if source not in TOP:
            assert not targets & TOP, f"{source} imports {sorted(targets & TOP)}"
    assert graph["specs"] == set(), "specs/ is pure data and imports no other layer"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# Each unit's layer: an import may point to its own layer or below, never up (DESIGN.md).
RANKS = {
    "specs": 0,
    "version": 0,
    "paths": 1,
    "lazy": 1,
    "progress": 1,
    "redact": 1,
    "user_regex": 1,
    "local_time": 1,
    "errors": 1,
    "search": 1,
    "http_retry": 1,
    "metrics": 2,
    "grid": 2,
    "workspace": 2,
    "environment": 2,
    "components": 2,
    "apps": 2,
    "job_checkpoint": 2,
    "schedulers": 3,
    "attempt_store": 4,
    "jobstore": 4,
    "config": 4,
    "results": 4,
    "notices": 4,
    "phases": 4,
    "runner": 5,
    "logtail": 6,
    "refresher": 6,
    "joblist": 6,
    "dryrun_summary": 6,
    "watching": 6,
    "notice_sender": 6,
    "run_args": 6,
    "sweeps": 6,
    "testing": 6,
    "notebook": 7,
    "server": 7,
    "cli": 7,
}


def test_every_unit_has_a_layer_and_no_import_runs_back_up() -> None:
    graph = layer_graph()
    units = set(graph) | {t for targets in graph.values() for t in targets}
    assert units <= set(RANKS), f"units without a layer: {sorted(units - set(RANKS))}"
    upward = [
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if RANKS[target] > RANKS[source]
    ]
    assert upward == []


def test_schedulers_do_not_import_components_nor_lower_layers_the_registry() -> None:
    """Backends know nothing of components (the runner turns a cell into a script), and only
    the runner layer and above find backends (through the registry, the plugin seam)."""
    graph = layer_graph()
    assert "components" not in graph["schedulers"]
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        source = unit(".".join(parts))
        if source == "torchx_nb" or path == PACKAGE / "schedulers" / "__init__.py":
            continue
        if "torchx_nb.schedulers" in imports_of(path):
            assert RANKS[source] >= RANKS["config"], f"{path.name} imports the registry"


def packages() -> list[str]:
    """Every package of the tree, nested ones included (``schedulers.slurm``), by dotted name
    under torchx_nb (the root itself is the layer graph's business)."""
    return sorted(
        module_name(init).removeprefix("torchx_nb.")
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE
    )


def module_graph(package: str) -> dict[str, set[str]]:
    """The members of one package (its modules and subpackages, each with everything below
    it) -> the members it imports (lazy imports included)."""
    prefix = f"torchx_nb.{package}"
    depth = len(prefix.split("."))

    def member(module: str) -> str | None:
        if module.startswith(prefix + "."):
            return ".".join(module.split(".")[: depth + 1])
        return None

    graph: dict[str, set[str]] = defaultdict(set)
    for path in (PACKAGE / package.replace(".", "/")).rglob("*.py"):
        source = member(module_name(path))
        if source is None:
            continue
        for module in imports_of(path):
            target = member(module)
            if target is not None and target != source:
                graph[source].add(target)
    return graph


def test_no_import_cycle_between_the_files_of_a_folder() -> None:
    """Every package, nested ones included: its files and subpackages import each other
    without a cycle."""
    found = packages()
    assert {"schedulers", "workspace", "server", "notebook", "specs", "runner"} <= set(found)
    assert {"schedulers.gcp_batch", "schedulers.kubernetes", "schedulers.slurm"} <= set(found)
    for package in found:
        cycle = find_cycle(module_graph(package))
        assert cycle is None, f"{package}: " + " -> ".join(cycle or [])


def test_the_folder_graph_sees_inside_nested_packages() -> None:
    """The old one-level glob never read schedulers/slurm/*.py: the graph now has its modules
    and the edges between them, and the outer folder sees the package as one member."""
    slurm = module_graph("schedulers.slurm")
    assert slurm["torchx_nb.schedulers.slurm.scheduler"]
    outer = module_graph("schedulers")
    assert "torchx_nb.schedulers.api" in outer["torchx_nb.schedulers.slurm"]


# the modules every backend shares: they never reach into a backend
SHARED = {"api", "abilities", "logs", "outputs", "ids", "devices", "cancellers"}


def test_the_shared_scheduler_modules_import_no_backend() -> None:
    graph = module_graph("schedulers")
    for source in SHARED:
        targets = {t.rsplit(".", 1)[1] for t in graph.get(f"torchx_nb.schedulers.{source}", ())}
        assert targets <= SHARED, f"schedulers.{source} imports {sorted(targets - SHARED)}"


def test_nothing_below_the_runner_imports_it() -> None:
    """Schedulers, components, workspace, specs (and everything ranked below the runner)
    never import it, lazily or not: the runner calls down, never the reverse."""
    graph = layer_graph()
    below = [unit for unit, rank in RANKS.items() if rank < RANKS["runner"]]
    assert [u for u in below if "runner" in graph.get(u, set())] == []


# What the front ends (notebook, server, CLI) may import from below the runner: data types and
# small pure helpers over them, never a backend, the builders, the store or the config.
DATA_MODULES = {
    "torchx_nb.specs": "data types and the error tree, under TorchX's names",
    "torchx_nb.version": "the package's version",
    "torchx_nb.errors": "an exception turned into the one line a front end prints",
    "torchx_nb.redact": "secrets masked in what is shown",
    "torchx_nb.user_regex": "a user's regex checked and compiled",
    "torchx_nb.search": "how a job search folds text",
    "torchx_nb.phases": "a job's phases and durations as text",
    "torchx_nb.metrics": "metric lines parsed and kept",
    "torchx_nb.local_time": "the local time zone that times are shown in",
    "torchx_nb.progress": "the terminal progress bar",
    "torchx_nb.components.notebook_parameters": "a parameters cell and -p text read with ast",
}
# Imports from below the runner that are not data, each with why it stays for now.
LISTED = {
    ("torchx_nb.cli", "torchx_nb.config"): "`configure` writes .torchxconfig from the runopts",
}


def front_end_violations(imports: dict[str, set[str]]) -> list[str]:
    """``module -> what it imports`` reduced to the imports a front end may not make."""
    below = {unit for unit, rank in RANKS.items() if rank < RANKS["runner"]}
    bad = []
    for source, targets in sorted(imports.items()):
        if unit(source) not in TOP:
            continue
        for target in sorted(targets):
            if unit(target) not in below or (source, target) in LISTED:
                continue
            if not any(target == d or target.startswith(d + ".") for d in DATA_MODULES):
                bad.append(f"{source} imports {target}")
    return bad


def test_the_front_ends_reach_below_the_runner_only_for_data_types() -> None:
    """The notebook, the server and the CLI go through the runner (and the modules above it);
    of the layers below they import only the data modules listed above."""
    imports = {module_name(path): imports_of(path) for path in PACKAGE.rglob("*.py")}
    assert front_end_violations(imports) == []
    still_there = {pair for pair in LISTED if pair[1] in imports.get(pair[0], set())}
    assert still_there == set(LISTED), "a listed import is gone: drop it from LISTED"


def test_the_front_end_check_is_an_allow_list() -> None:
    """A module below the runner that is not a data module is refused, whatever its layer,
    nested front-end modules included."""
    assert front_end_violations(
        {
            "torchx_nb.server.handlers": {"torchx_nb.jobstore", "torchx_nb.specs.api"},
            "torchx_nb.notebook.magics": {"torchx_nb.results", "torchx_nb.runner"},
            "torchx_nb.cli": {"torchx_nb.environment.plan", "torchx_nb.config"},
            "torchx_nb.runner.core": {"torchx_nb.schedulers.api"},
        }
    ) == [
        "torchx_nb.cli imports torchx_nb.environment.plan",
        "torchx_nb.notebook.magics imports torchx_nb.results",
        "torchx_nb.server.handlers imports torchx_nb.jobstore",
    ]
