"""The event loop stays in the drivers: only runtime/ (the I/O), broker/ (the composition root and
its listeners), the CLI and the console import asyncio. Handlers, cores, storage, the metadata
store and the simulation take time as `now_ms` and hand their I/O to what the server gives them,
so they run the same under the simulation's scheduler as under the event loop."""

from __future__ import annotations

import ast
from pathlib import Path

import gregor

ROOT = Path(gregor.__file__).parent
MAY_IMPORT_ASYNCIO = ("runtime", "broker", "cli", "console")


def asyncio_imports(source: str) -> list[int]:
    """The lines of `source` that import asyncio (or a module of it), at any depth."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == "asyncio" for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "asyncio":
                lines.append(node.lineno)
    return sorted(lines)


def test_only_the_drivers_import_asyncio() -> None:
    found = []
    scanned = 0
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if len(parts) > 1 and parts[0] in MAY_IMPORT_ASYNCIO:
            continue
        scanned += 1
        rel = path.relative_to(ROOT.parent)
        found += [f"{rel}:{line}" for line in asyncio_imports(path.read_text())]
    assert scanned > 200, f"only {scanned} modules scanned under {ROOT}"
    assert found == [], "the event loop belongs to a driver in runtime/:\n" + "\n".join(found)


def test_the_scan_sees_every_form_of_import() -> None:
    planted = """\
import asyncio
import asyncio.subprocess as sp
from asyncio import Future


def later():
    from asyncio import get_running_loop
    import os, asyncio
    return get_running_loop, os, asyncio


from .asyncio import nothing  # a relative import of a module named so: not asyncio
import asyncio_mqtt  # another package
"""
    assert asyncio_imports(planted) == [1, 2, 3, 7, 8]


def test_the_allowed_packages_exist() -> None:
    for name in MAY_IMPORT_ASYNCIO:
        assert (ROOT / name / "__init__.py").exists(), f"gregor/{name} is gone: drop it"
