"""`gregor log-dirs describe [--broker N]`: each broker's log directories, their free space, and
the size of every partition in them (DescribeLogDirs), as `kafka-log-dirs.sh --describe`.

confluent-kafka has no DescribeLogDirs, so each broker is asked directly with our own codec.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, error_text

DESCRIBE_JSON = """[{"broker": int, "log_dir": str, "error": str|null,
  "total_bytes": int|null, "usable_bytes": int|null,
  "partitions": [{"topic": str, "partition": int, "size": int, "offset_lag": int,
                  "is_future": bool}]}, ...]"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("log-dirs", help="brokers' log directories and partition sizes")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(
        verbs,
        "describe",
        "each log dir's space and partitions (DescribeLogDirs)",
        describe,
        DESCRIBE_JSON,
    )
    v.add_argument(
        "--broker", type=int, action="append", metavar="N", help="only this broker (repeatable)"
    )


def _ask(
    node: int, address: str, timeout_s: float, settings: dict[str, str]
) -> list[dict[str, Any]]:
    from gregor.protocol import api_keys, errors
    from gregor.protocol.messages import DescribeLogDirsRequest

    conn = connect.raw(address, timeout_s, settings=settings)
    try:
        response = connect.call(
            conn, api_keys.DESCRIBE_LOG_DIRS, DescribeLogDirsRequest(topics=None), address
        )
    finally:
        conn.close()
    if getattr(response, "error_code", errors.NONE) != errors.NONE:
        raise CliError(f"broker {node}: DescribeLogDirs: {error_text(response.error_code)}")
    out = []
    for d in response.results:
        total, usable = getattr(d, "total_bytes", -1), getattr(d, "usable_bytes", -1)
        out.append(
            {
                "broker": node,
                "log_dir": d.log_dir,
                "error": error_text(d.error_code) if d.error_code != errors.NONE else None,
                "total_bytes": total if total >= 0 else None,
                "usable_bytes": usable if usable >= 0 else None,
                "partitions": [
                    {
                        "topic": t.name,
                        "partition": p.partition_index,
                        "size": p.partition_size,
                        "offset_lag": p.offset_lag,
                        "is_future": bool(p.is_future_key),
                    }
                    for t in d.topics
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)
                ],
            }
        )
    return out


def describe(args: argparse.Namespace) -> int:
    brokers = connect.brokers(connect.admin(args), args.timeout)
    wanted = args.broker or sorted(brokers)
    unknown = [n for n in wanted if n not in brokers]
    if unknown:
        known = ", ".join(map(str, sorted(brokers)))
        raise CliError(f"--broker {unknown[0]}: no such broker (brokers: {known})")
    doc = [d for n in wanted for d in _ask(n, brokers[n], args.timeout, connect.raw_settings(args))]
    dirs = [
        [
            d["broker"],
            d["log_dir"],
            d["error"],
            d["total_bytes"],
            d["usable_bytes"],
            len(d["partitions"]),
        ]
        for d in doc
    ]
    parts = [
        [d["broker"], d["log_dir"], p["topic"], p["partition"], p["size"], p["offset_lag"]]
        for d in doc
        for p in d["partitions"]
    ]
    output.emit(
        args,
        doc,
        [
            output.Table(
                ["broker", "log dir", "error", "total bytes", "usable bytes", "partitions"],
                dirs,
                title="log dirs",
            ),
            output.Table(
                ["broker", "log dir", "topic", "partition", "size", "offset lag"],
                parts,
                title="partitions",
            ),
        ],
    )
    failed = [d for d in doc if d["error"]]
    for d in failed:
        print(f"error: broker {d['broker']}: log dir {d['log_dir']}: {d['error']}", file=sys.stderr)
    return 1 if failed else 0
