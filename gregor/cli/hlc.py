"""`gregor hlc resolve --topic orders --mirrors B.orders`: the last-write-wins resolver of
`gregor.hlc` as a process. It reads the local topic and its mirrored copies, keeps the resolved
value of every key by its `hlc` header, and writes each new winner to a compacted topic
(`orders.resolved` unless --resolved-topic names another; created if missing), and the losing
writes of conflicts (writes with `hlc-vv` version vectors) and the records it refuses to
--dead-letter-topic. It runs until Ctrl-C or SIGTERM, or with --until-caught-up until it has read what the
sources held when it started."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError
from gregor.cli.specs import positive_int
from gregor.hlc.clock import DEFAULT_MAX_CLOCK_SKEW_MS

RESOLVE_JSON = """{"sources": [str], "resolved_topic": str, "dead_letter_topic": str|null,
 "records": int, "keys": int, "resolved_written": int, "conflicts": int, "refused": int,
 "dead_letters": int}"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hlc", help="active-active: the last-write-wins resolver of gregor.hlc")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(
        verbs,
        "resolve",
        "resolve a topic and its mirrors into TOPIC.resolved",
        resolve,
        RESOLVE_JSON,
    )
    v.add_argument("--topic", required=True, help="the local topic, e.g. orders")
    v.add_argument(
        "--mirrors",
        action="append",
        default=[],
        metavar="TOPIC[,TOPIC...]",
        help="its mirrored copies from other regions, e.g. B.orders (repeatable)",
    )
    v.add_argument("--resolved-topic", metavar="TOPIC", help="default: TOPIC.resolved")
    v.add_argument("--dead-letter-topic", metavar="TOPIC", help="losing and refused writes")
    v.add_argument(
        "--max-clock-skew-ms",
        type=positive_int,
        default=DEFAULT_MAX_CLOCK_SKEW_MS,
        metavar="MS",
        help="refuse writes stamped further ahead of this clock (max.clock.skew.ms, default "
        f"{DEFAULT_MAX_CLOCK_SKEW_MS})",
    )
    v.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once the sources are read up to where they were at start",
    )


def resolve(args: argparse.Namespace) -> int:
    from gregor.hlc import ResolverError, ResolverProcess

    mirrors = [m.strip() for spec in args.mirrors for m in spec.split(",") if m.strip()]
    conf = connect.client_config(args)
    where = f"--command-config {args.command_config}" if args.command_config else ""

    def build(kind: str, settings: dict[str, Any]) -> Any:
        return connect.build(kind, settings, args.bootstrap_server, args.timeout, source=where)

    try:
        process = ResolverProcess(
            conf,
            args.topic,
            mirrors,
            resolved_topic=args.resolved_topic,
            dead_letter_topic=args.dead_letter_topic,
            max_clock_skew_ms=args.max_clock_skew_ms,
            build=build,
            timeout_s=max(args.timeout, 30.0),
        )
        return _run(args, process)
    except ResolverError as exc:
        raise CliError(str(exc)) from None


def _run(args: argparse.Namespace, process: Any) -> int:
    """Ctrl-C or SIGTERM stops it cleanly: what was produced is flushed, the summary printed."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        process.start()
        print(
            f"resolving {', '.join(process.sources)} into {process.resolved_topic}",
            file=sys.stderr,
        )
        process.catch_up()
        if not args.until_caught_up:
            process.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        process.close()
    _report(args, process)
    return 0


def _report(args: argparse.Namespace, process: Any) -> None:
    s, r = process.stats, process.resolver
    doc = {
        "sources": process.sources,
        "resolved_topic": process.resolved_topic,
        "dead_letter_topic": process.dead_letter_topic,
        "records": s.records,
        "keys": len(r),
        "resolved_written": s.resolved_written,
        "conflicts": r.conflicts,
        "refused": s.refused,
        "dead_letters": s.dead_letters,
    }
    items = [(k, v) for k, v in doc.items() if not isinstance(v, list)]
    output.emit(args, doc, [output.Fields(items, title=", ".join(process.sources))])
