"""How a command prints data: `--output table|plain|json`.

A command describes its result twice: a JSON document (stable field names, shown in the
command's --help) and human blocks (`Table`, `Fields`). `table` (the default on a terminal) draws
rich tables whose wide cells wrap rather than lose their ends; `plain` (the default when stdout
is not a terminal) prints tab-separated lines, a header line first, nothing cut and no box
drawing, one blank line between blocks; `json` prints the document. Commands that stream
(dump-log, consume) offer `plain|json` only, json as JSON Lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("table", "plain", "json")
LINE_FORMATS = ("plain", "json")


@dataclass
class Table:
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]] = field(default_factory=list)
    title: str | None = None
    # False for a bare list of names (`topics list`): plain prints the values only.
    header: bool = True


@dataclass
class Fields:
    """`name: value` lines (plain: `name<TAB>value`)."""

    items: list[tuple[str, Any]]
    title: str | None = None


Block = Table | Fields


def add_output_arg(p: argparse.ArgumentParser, json_shape: str) -> None:
    """`--output/-o`, and the JSON document's shape in the command's --help."""
    p.add_argument(
        "--output",
        "-o",
        choices=FORMATS,
        help="table (default on a terminal), plain (tab-separated; default otherwise) or json",
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "--output json prints:\n" + "\n".join(
        "  " + line for line in json_shape.strip("\n").splitlines()
    )


def add_lines_output_arg(p: argparse.ArgumentParser, json_shape: str) -> None:
    """`--output/-o plain|json` for a command that streams what it reads (dump-log, consume):
    plain is its own text, also on a terminal; json is JSON Lines, one object a line, written as
    it is read. The object's shape goes into the command's --help."""
    p.add_argument(
        "--output",
        "-o",
        choices=LINE_FORMATS,
        help="plain (default) or json (JSON Lines: one object per line)",
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "--output json prints one object per line:\n" + "\n".join(
        "  " + line for line in json_shape.strip("\n").splitlines()
    )


def chosen(args: argparse.Namespace) -> str:
    fmt = getattr(args, "output", None)
    if fmt:
        return str(fmt)
    return "table" if sys.stdout.isatty() else "plain"


def emit(args: argparse.Namespace, doc: Any, blocks: Sequence[Block]) -> None:
    fmt = chosen(args)
    if fmt == "json":
        print_json(doc)
    elif fmt == "plain":
        sys.stdout.write(render_plain(blocks))
    else:
        _print_tables(blocks)
    sys.stdout.flush()


def print_json(doc: Any) -> None:
    """The `--output json` document: stable field names, indented."""
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()


def print_json_line(doc: Any) -> None:
    """One JSON Lines object: compact, on one line."""
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _plain_cell(value: Any) -> str:
    # a tab or newline inside a value would break the line into fields it is not
    return _cell(value).replace("\t", "\\t").replace("\n", "\\n")


def render_plain(blocks: Sequence[Block]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, Fields):
            lines = [f"{name}\t{_plain_cell(value)}" for name, value in block.items]
        else:
            lines = ["\t".join(block.columns)] if block.header else []
            lines += ["\t".join(_plain_cell(v) for v in row) for row in block.rows]
        parts.append("".join(line + "\n" for line in lines))
    return "\n".join(parts)


def _print_tables(blocks: Sequence[Block]) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(soft_wrap=False)
    for block in blocks:
        if isinstance(block, Fields):
            if block.title:
                console.print(block.title, style="bold", markup=False, highlight=False)
            width = max((len(name) for name, _ in block.items), default=0)
            for name, value in block.items:
                console.print(
                    f"{name + ':':<{width + 1}} {_cell(value)}", markup=False, highlight=False
                )
            continue
        if not block.rows and block.title:
            console.print(block.title, markup=False, highlight=False)
            continue
        table = RichTable(title=block.title, show_header=block.header)
        for i, col in enumerate(block.columns):
            values = [row[i] for row in block.rows if row[i] is not None]
            if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                # numbers are right-aligned and kept whole; text wraps
                width = max(len(str(v)) for v in values)
                table.add_column(col, justify="right", min_width=width, overflow="fold")
            else:
                table.add_column(col, overflow="fold")
        for row in block.rows:
            table.add_row(*(_escape(_cell(v)) for v in row))
        console.print(table)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
