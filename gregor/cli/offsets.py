"""`gregor offsets get TOPIC[:P,P...] [--time earliest|latest|max-timestamp|MS|ISO-8601]`: the
offsets a partition's log has at a time (ListOffsets), as `kafka-get-offsets.sh` prints them.

latest is the log end offset (the next offset to be written), earliest the log start offset,
max-timestamp the offset of the record with the largest timestamp; a time gives the first offset
whose timestamp is at or after it, or none (null) when every record is older.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import describe
from gregor.cli.specs import parse_time, topic_partitions

GET_JSON = """[{"topic": str, "partition": int, "offset": int|null, "timestamp": int|null}, ...]
  (timestamp: of the record found, for max-timestamp and times; ms since the epoch)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("offsets", help="partition offsets at a time (ListOffsets)")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(verbs, "get", "each partition's offset at --time (default latest)", get, GET_JSON)
    v.add_argument("topics", nargs="+", metavar="TOPIC[:P,P...]")
    v.add_argument(
        "--time",
        default="latest",
        metavar="earliest|latest|max-timestamp|MS|ISO-8601",
        help="default latest; MS is milliseconds since the epoch; -1, -2, -3 as Kafka's tool",
    )


def _spec(when: int) -> Any:
    from confluent_kafka.admin import OffsetSpec

    if when == -1:
        return OffsetSpec.latest()
    if when == -2:
        return OffsetSpec.earliest()
    if when == -3:
        return OffsetSpec.max_timestamp()
    return OffsetSpec.for_timestamp(when)


def get(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    when = parse_time(args.time)
    admin = connect.admin(args)
    tps = topic_partitions(admin.list_topics(timeout=args.timeout), args.topics, "offsets get")
    spec = _spec(when)
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in tps}, request_timeout=args.timeout
    )
    found: dict[tuple[str, int], Any] = {}
    status = 0
    for tp, fut in futures.items():
        try:
            found[(tp.topic, tp.partition)] = fut.result()
        except Exception as exc:
            print(f"error: {tp.topic}:{tp.partition}: {describe(exc)}", file=sys.stderr)
            status = 1
    doc = []
    for t, p in tps:
        info = found.get((t, p))
        if info is None:
            continue
        offset = info.offset if info.offset >= 0 else None
        stamp = info.timestamp if offset is not None and info.timestamp >= 0 else None
        doc.append({"topic": t, "partition": p, "offset": offset, "timestamp": stamp})
    rows = [[d["topic"], d["partition"], d["offset"], d["timestamp"]] for d in doc]
    output.emit(args, doc, [output.Table(["topic", "partition", "offset", "timestamp"], rows)])
    return status
