"""The package's import graph has no cycle, between modules or between packages, and every import
between packages points down the floors docs/layout.md draws: every `import` counts, at module
level, inside a function or under TYPE_CHECKING, because a cycle hidden in a function is still a
cycle."""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"omnidraft": "omnidraft", "omnidraft.device": "device", "omnidraft.export": "export",
            "omnidraft.adapters": "adapters"}  # pyproject.toml's package-dir
# The floors, from the ground up (docs/layout.md): a package (or a module directly under omnidraft/)
# imports only what stands on a lower floor. A new package must be given its floor here.
FLOORS = [["omnidraft.errors", "omnidraft.home", "omnidraft.fsio", "omnidraft.quiet", "omnidraft.mapped_files",
           "omnidraft.heap"],
          ["omnidraft.sampling", "omnidraft.turns", "omnidraft.generating", "omnidraft.prompts", "omnidraft.models", "omnidraft.translate", "omnidraft.adapters",
           "omnidraft.memory"],
          ["omnidraft.copy_prompts", "omnidraft.conversations", "omnidraft.recurring",
           "omnidraft.propose"],
          ["omnidraft.decode"],
          ["omnidraft.export", "omnidraft.remote"],
          ["omnidraft.device"],
          ["omnidraft.pairs", "omnidraft.measure"],
          ["omnidraft.train", "omnidraft.vllm"],
          ["omnidraft.session"],
          ["omnidraft.jobs", "omnidraft.serve"],
          ["omnidraft.bench"],
          ["omnidraft.tools"],
          ["omnidraft.cli_args"],
          ["omnidraft.cli", "omnidraft"]]


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (a name imported from a package resolves to the
    submodule of that name if there is one, else to the package)."""

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("omnidraft"):
                out |= {owner(f"{node.module}.{a.name}") for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {owner(a.name) for a in node.names if a.name.startswith("omnidraft")}
        graph[name] = out - {None, name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others():
    mods = modules()
    assert "omnidraft.propose.registry" in mods and "omnidraft.device.runtime" in mods
    graph = import_graph(mods)
    assert "omnidraft.propose.drafter" in graph["omnidraft.propose.registry"]
    assert not cycles(graph)


def package(module: str) -> str:
    """The package a module belongs to: omnidraft.X for everything in omnidraft/X/ (or the
    module omnidraft/X.py itself); the package's own __init__ is ``omnidraft``."""
    return ".".join(module.split(".")[:2])


def upward(graph: dict[str, set[str]], floors: list[list[str]]) -> list[str]:
    """Every import from a package to one on its own floor or higher, as 'a -> b (module -> module)';
    a package with no floor is reported too."""
    floor = {p: i for i, ps in enumerate(floors) for p in ps}
    out = []
    for a, bs in graph.items():
        for b in bs:
            pa, pb = package(a), package(b)
            if pa == pb:
                continue
            if pa not in floor or pb not in floor:
                out.append(f"{pa if pa not in floor else pb} has no floor in FLOORS")
            elif floor[pb] >= floor[pa]:
                out.append(f"{pa} -> {pb} ({a} -> {b})")
    return sorted(set(out))


def test_the_checker_finds_an_import_up_the_floors():
    graph = {"omnidraft.decode.loop": {"omnidraft.train.records"}, "omnidraft.train.x": {"omnidraft.decode.y"}}
    floors = [["omnidraft.decode"], ["omnidraft.train"]]
    assert upward(graph, floors) == ["omnidraft.decode -> omnidraft.train (omnidraft.decode.loop -> omnidraft.train.records)"]
    assert upward({"omnidraft.new.a": {"omnidraft.decode.b"}}, floors) == ["omnidraft.new has no floor in FLOORS"]


def test_packages_import_only_down_the_floors():
    graph = import_graph(modules())
    assert not upward(graph, FLOORS)
    packages = {}
    for a, bs in graph.items():
        packages.setdefault(package(a), set()).update(package(b) for b in bs if package(b) != package(a))
    assert not cycles(packages)
