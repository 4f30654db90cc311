"""`gregor records delete TOPIC:P[,P...] --before OFFSET`: move partitions' log start offset up,
deleting the records before it (DeleteRecords), as `kafka-delete-records.sh` does. --before -1
means the high watermark (everything written so far)."""

from __future__ import annotations

import argparse
import sys

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, describe
from gregor.cli.specs import topic_partitions

DELETE_JSON = """[{"topic": str, "partition": int, "low_watermark": int}, ...]
  (low_watermark: the partition's log start offset after the deletion)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("records", help="delete a partition's records up to an offset")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(
        verbs, "delete", "delete the records before --before (DeleteRecords)", delete, DELETE_JSON
    )
    v.add_argument("partitions", nargs="+", metavar="TOPIC:P[,P...]")
    v.add_argument(
        "--before", type=int, required=True, metavar="OFFSET", help="-1: the high watermark"
    )


def delete(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    if args.before < -1:
        raise CliError(f"--before must be an offset (0 or more) or -1, got {args.before}")
    for spec in args.partitions:
        if ":" not in spec:
            raise CliError(f"records delete {spec}: name the partitions, e.g. {spec}:0")
    admin = connect.admin(args)
    tps = topic_partitions(
        admin.list_topics(timeout=args.timeout), args.partitions, "records delete"
    )
    futures = admin.delete_records(
        [TopicPartition(t, p, args.before) for t, p in tps],
        request_timeout=args.timeout,
        operation_timeout=args.timeout,
    )
    doc, status = [], 0
    for tp, fut in futures.items():
        try:
            low = fut.result().low_watermark
        except Exception as exc:
            print(
                f"error: cannot delete records of {tp.topic}:{tp.partition}: {describe(exc)}",
                file=sys.stderr,
            )
            status = 1
            continue
        doc.append({"topic": tp.topic, "partition": tp.partition, "low_watermark": low})
    doc.sort(key=lambda d: (d["topic"], d["partition"]))
    rows = [[d["topic"], d["partition"], d["low_watermark"]] for d in doc]
    table = output.Table(["topic", "partition", "low watermark"], rows)
    output.emit(args, doc, [table] if rows or not status else [])  # no bare header after errors
    return status
