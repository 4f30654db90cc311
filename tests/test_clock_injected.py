"""Time is injected: below runtime/ and the CLI, no module of gregor reads a clock of its own.

Every read goes through a `gregor.clock.Clock` (or the `now_ms` one gives) handed down by the
owner, so tests and the simulation move time by hand. This test parses every module with `ast`
and fails, naming file:line, on a read of the `time` or `datetime` module's clocks: a call or a
reference (`clock=time.monotonic` is a read waiting to happen), `from time import time`, and the
calls that read the clock implicitly (`time.localtime()`, `time.strftime(fmt)`).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator

import gregor

# Where the clocks may be read: the clock itself, the I/O runtime and the command lines (the
# simulation's times how long its seeds take, never the simulated runs themselves).
ALLOWED = ("gregor/clock.py", "gregor/runtime/", "gregor/cli/", "gregor/sim/__main__.py")

# Not injected yet; to be emptied (a path here that has become clean may go at once).
NOT_YET_INJECTED: set[str] = set()

# Qualified names whose every use reads a clock.
CLOCK_READS = {
    "time.time",
    "time.time_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.perf_counter",
    "time.perf_counter_ns",
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
}
# Calls that read the clock when given no time: name -> how many arguments the time makes.
IMPLICIT_READS = {
    "time.localtime": 1,
    "time.gmtime": 1,
    "time.ctime": 1,
    "time.asctime": 1,
    "time.strftime": 2,
}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gregor.__file__)))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_imports(scope: ast.AST) -> dict[str, str]:
    """Local name -> the qualified name it was imported as, for the imports of this scope
    (a module's or a function's, wherever in it they are), not of the scopes inside it."""
    names: dict[str, str] = {}
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
        elif not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))
    return names


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scopes: list[dict[str, str]] = []
        self.found: set[tuple[int, str]] = set()

    def _qualified(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
            return None
        if isinstance(node, ast.Attribute):
            base = self._qualified(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _in_scope(self, node: ast.AST, body: list[ast.AST]) -> None:
        self.scopes.append(_own_imports(node))
        for child in body:
            self.visit(child)
        self.scopes.pop()

    def visit_Module(self, node: ast.Module) -> None:
        self._in_scope(node, list(node.body))

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Decorators, defaults and annotations belong to the enclosing scope.
        outer: list[ast.AST] = [*getattr(node, "decorator_list", []), node.args]
        for child in outer:
            self.visit(child)
        body = node.body if isinstance(node.body, list) else [node.body]
        self._in_scope(node, list(body))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for child in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(child)
        self._in_scope(node, list(node.body))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            for a in node.names:
                if f"{node.module}.{a.name}" in CLOCK_READS:
                    self.found.add((node.lineno, f"from {node.module} import {a.name}"))

    def _visit_reference(self, node: ast.Name | ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load) and (name := self._qualified(node)) in CLOCK_READS:
            self.found.add((node.lineno, name))
        self.generic_visit(node)

    visit_Name = visit_Attribute = _visit_reference

    def visit_Call(self, node: ast.Call) -> None:
        name = self._qualified(node.func)
        if name in IMPLICIT_READS and len(node.args) < IMPLICIT_READS[name]:
            self.found.add((node.lineno, f"{name}() without a time"))
        self.generic_visit(node)


def clock_reads(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) of every clock read in `source`, in line order."""
    scanner = _Scanner()
    scanner.visit(ast.parse(source, filename))
    return sorted(scanner.found)


def _modules() -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "gregor")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/")


def _exempt(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in ALLOWED) or any(
        path == p or (p.endswith("/") and path.startswith(p)) for p in NOT_YET_INJECTED
    )


def test_no_module_reads_the_clock_itself():
    scanned = 0
    violations = []
    for path in _modules():
        if _exempt(path):
            continue
        scanned += 1
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            source = f.read()
        violations += [f"{path}:{line}: {what}" for line, what in clock_reads(source, path)]
    assert scanned > 100, f"only {scanned} modules scanned under {ROOT}/gregor"
    assert not violations, (
        "read the time through an injected gregor.clock.Clock (or its now_ms):\n"
        + "\n".join(violations)
    )


def test_the_scanner_catches_every_form_of_clock_read():
    planted = """\
import time
import time as t
import datetime
from datetime import datetime as dt, date
from time import monotonic as mono


def f(clock=time.monotonic):
    a = time.time()
    b = t.perf_counter_ns()
    c = mono()
    d = dt.now()
    e = datetime.datetime.utcnow()
    g = date.today()
    h = time.strftime("%Y")
    i = time.localtime()


def ok(clock, when):
    time.sleep(0.1)
    clock.now_ms()
    time.strftime("%Y", time.localtime(when))
    datetime.datetime.fromtimestamp(when)


def late():
    from time import time
    return time()
"""
    assert clock_reads(planted) == [
        (5, "from time import monotonic"),
        (8, "time.monotonic"),
        (9, "time.time"),
        (10, "time.perf_counter_ns"),
        (11, "time.monotonic"),
        (12, "datetime.datetime.now"),
        (13, "datetime.datetime.utcnow"),
        (14, "datetime.date.today"),
        (15, "time.strftime() without a time"),
        (16, "time.localtime() without a time"),
        (27, "from time import time"),
        (28, "time.time"),
    ]


def test_the_exempt_paths_exist():
    for path in sorted((*ALLOWED, *NOT_YET_INJECTED)):
        assert os.path.exists(os.path.join(ROOT, path)), f"{path} is gone: drop it from the list"
