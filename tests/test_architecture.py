"""The shape of the package: the import graph of ``analyze/`` has no cycle (imports at module level
and inside functions both count), each pipeline stage (folder) imports only from earlier stages
(docs/ARCHITECTURE.md), and no module uses pyplot (one figure convention: a
``matplotlib.figure.Figure`` drawn on an Agg canvas, no global pyplot state)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "analyze"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_names(tree: ast.AST, name: str, is_package: bool) -> list[tuple[str, list[str], int]]:
    """(module, names imported from it, line) for every import statement anywhere in the tree;
    relative imports resolved against ``name``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module of analyze it imports: line}. ``from P import x`` is an edge to ``P.x``
    when that is a module, else to ``P``."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        edges: dict[str, int] = {}
        for base, names, line in imported_names(tree, name, path.name == "__init__.py"):
            targets = [f"{base}.{n}" if f"{base}.{n}" in mods else base for n in names] or [base]
            for t in targets:
                if t in mods and t != name:
                    edges.setdefault(t, line)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_module_and_function_level_imports():
    graph = import_graph(modules())
    assert "analyze.read.report" in graph["analyze.run.api"]                 # module level
    assert "analyze.run.chunks" in graph["analyze.run.api"]                  # inside a function
    assert "analyze.render.text" in graph["analyze.cli"]                     # from P import m as x
    assert "analyze.results" in graph["analyze"]                             # the package itself


def test_find_cycles_finds_a_cycle():
    assert find_cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle_in_analyze():
    graph = import_graph(modules())
    cycles = find_cycles(graph)
    detail = ["; ".join(f"{m} -> {t} (line {graph[m][t]})" for m in comp for t in graph[m] if t in comp)
              for comp in cycles]
    assert not cycles, "import cycles: " + " | ".join(detail)


# the pipeline's stages in order: a module imports only from its own stage or a lower one
STAGE = {"errors": 0, "notes": 0, "findings": 0, "memory": 0, "codes": 0, "demo": 0, "processes": 0, "output_policy": 0.5, "atomic": 1, "results": 1, "opstore": 1,
         "read": 2, "project": 3, "attribute": 4, "ranks": 4, "timeline": 5, "run": 6, "views": 7,
         "render": 8, "command_inputs": 8.5, "tools": 9, "cli": 10, "": 10}


def stage_of(module: str) -> str:
    """``analyze.read.report`` -> ``read``; ``analyze.errors`` -> ``errors``; ``analyze`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_has_a_stage():
    assert {stage_of(m) for m in modules()} <= set(STAGE), "a new folder or top-level module: give it a STAGE"


def test_stages_import_only_earlier_stages():
    graph = import_graph(modules())
    upward = [f"{m} -> {t} (line {line})" for m, targets in graph.items() for t, line in targets.items()
              if stage_of(m) != stage_of(t) and STAGE[stage_of(t)] >= STAGE[stage_of(m)]]
    assert not upward, "imports against the pipeline order: " + "; ".join(upward)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pyplot(path):
    tree = ast.parse(path.read_text(), str(path))
    for base, names, line in imported_names(tree, module_name(path), path.name == "__init__.py"):
        assert base != "matplotlib.pyplot" and not (base == "matplotlib" and "pyplot" in names), \
            f"{path.relative_to(ROOT)}:{line}: pyplot imported; draw on matplotlib.figure.Figure (Agg) instead"
