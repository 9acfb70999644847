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


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "torchx_nb":
                found.update(f"torchx_nb.{a.name}" for a in node.names)
            elif node.module.startswith("torchx_nb."):
                found.add(node.module)
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
    "errors": 1,
    "metrics": 2,
    "grid": 2,
    "workspace": 2,
    "environment": 2,
    "components": 2,
    "apps": 2,
    "schedulers": 3,
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


def module_graph(folder: str) -> dict[str, set[str]]:
    """Module -> the modules of the same folder it imports (lazy imports included)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in (PACKAGE / folder).glob("*.py"):
        source = f"torchx_nb.{folder}.{path.stem}".removesuffix(".__init__")
        for module in imports_of(path):
            parts = module.split(".")
            if len(parts) >= 3 and parts[1] == folder:
                target = ".".join(parts[:3])
                if target != source:
                    graph[source].add(target)
    return graph


def test_no_import_cycle_between_the_files_of_a_folder() -> None:
    folders = [p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert {"schedulers", "workspace", "server", "notebook", "specs"} <= set(folders)
    for folder in folders:
        cycle = find_cycle(module_graph(folder))
        assert cycle is None, f"{folder}: " + " -> ".join(cycle or [])


# the modules every backend shares: they never reach into a backend
SHARED = {"api", "abilities", "logs", "outputs", "ids", "devices"}


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


def test_the_front_ends_reach_below_the_runner_only_for_data_types() -> None:
    """The notebook, the server and the CLI go through the runner (and the modules above it);
    of the layers below they import only data types (specs) and small shared utilities."""
    graph = layer_graph()
    behind_the_runner = {"schedulers", "components", "workspace", "apps"}
    for front in TOP:
        assert not graph.get(front, set()) & behind_the_runner, (
            f"{front} imports {sorted(graph[front] & behind_the_runner)}"
        )
