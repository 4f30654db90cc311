"""`gregor leader-election --election-type preferred|unclean [--topic T --partition P |
--all-topic-partitions]` (ElectLeaders), as `kafka-leader-election.sh` does.

A partition that already has the leader asked for is reported as not needed, which is not a
failure; any other error is, and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, describe

ELECT_JSON = """[{"topic": str, "partition": int,
  "result": "elected"|"not_needed"|"error", "error": str|null}, ...]"""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "leader-election",
        "elect preferred (or unclean) leaders (ElectLeaders)",
        elect,
        ELECT_JSON,
    )
    p.add_argument("--election-type", required=True, choices=["preferred", "unclean"])
    p.add_argument("--topic", help="with --partition: one partition")
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of every topic"
    )


def _partitions(args: argparse.Namespace) -> list[Any] | None:
    from confluent_kafka import TopicPartition

    if args.all_topic_partitions:
        if args.topic is not None or args.partition is not None:
            raise CliError(
                "give either --all-topic-partitions or --topic T --partition P, not both"
            )
        return None
    if args.topic is None or args.partition is None:
        raise CliError(
            "name the partitions: --topic T --partition P, or --all-topic-partitions "
            "(e.g. gregor leader-election --election-type preferred --topic orders --partition 0)"
        )
    return [TopicPartition(args.topic, args.partition)]


def elect(args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType

    wanted = _partitions(args)
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    admin = connect.admin(args)
    # no timeouts passed: confluent-kafka 2.16's elect_leaders rejects them (a SystemError)
    result = admin.elect_leaders(kind, wanted).result(timeout=args.timeout + 5)
    doc = []
    for tp, err in sorted(result.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        if err is None:
            outcome, why = "elected", None
        elif err.name() == "ELECTION_NOT_NEEDED":
            outcome, why = "not_needed", None
        else:
            outcome, why = "error", describe(err)
        doc.append({"topic": tp.topic, "partition": tp.partition, "result": outcome, "error": why})
    rows = [[d["topic"], d["partition"], d["result"].replace("_", " "), d["error"]] for d in doc]
    output.emit(args, doc, [output.Table(["topic", "partition", "result", "error"], rows)])
    failed = [d for d in doc if d["result"] == "error"]
    for d in failed:
        print(
            f"error: cannot elect a leader ({args.election_type}) for {d['topic']}:{d['partition']}: "
            f"{d['error']}",
            file=sys.stderr,
        )
    return 1 if failed else 0
