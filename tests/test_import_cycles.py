"""No import cycles anywhere in gregor/, between layers or inside one (the import-linter layers
contract cannot see the latter), counting imports under TYPE_CHECKING and inside functions; and
the broker object stays in its composition root: only `gregor.broker.broker` and the CLI that
starts it name `BrokerServer`."""

from __future__ import annotations

import ast
from pathlib import Path

import gregor

ROOT = Path(gregor.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if target in modules:
                        graph[name].add(target)
                    elif node.module in modules:
                        graph[name].add(node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles_in_gregor() -> None:
    assert _cycles(_graph(_modules())) == []


def test_only_the_composition_root_and_the_cli_name_the_broker_object() -> None:
    allowed = {"gregor.broker.broker", "gregor.cli.serve"}
    naming = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and any(
                a.name == "BrokerServer" for a in node.names
            ):
                naming.append(name)
    assert sorted(set(naming) - allowed) == []
