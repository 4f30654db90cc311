"""No import cycles anywhere in gregor/: between layers (import-linter's contract checks the
direction) and inside a layer too, which the contract cannot see. Imports under TYPE_CHECKING
count: a module that needs another's type to be written is coupled to it all the same."""

from __future__ import annotations

import grimp


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of more than one module (or a module that
    imports itself), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return found


def gregor_imports() -> dict[str, set[str]]:
    graph = grimp.build_graph("gregor", cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def test_the_cycle_finder_finds_a_cycle_inside_a_larger_graph() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert strongly_connected(graph) == [["a", "b", "c"], ["e"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_gregor() -> None:
    cycles = strongly_connected(gregor_imports())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)
