"""`gregor groups list|describe|reset-offsets|delete`, on confluent-kafka's AdminClient, as
`kafka-consumer-groups.sh` does.

    gregor groups list
    gregor groups describe GROUP          members, and per partition: committed offset, log end
                                          offset, lag, and the member that has it
    gregor groups reset-offsets GROUP --topic T[:P,P...] --to-earliest|--to-latest|
                  --to-datetime 2024-05-01T12:00:00|--to-offset N [--execute]
    gregor groups delete GROUP...

reset-offsets, as Kafka's tool, only touches an inactive (Empty) group, prints the plan, and
changes nothing without --execute. --to-offset is clamped to what the log holds.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, describe
from gregor.cli.specs import check_topic_specs, parse_datetime, topic_partitions

LIST_JSON = """[{"group": str, "state": str, "type": str, "simple": bool}, ...]"""
DESCRIBE_JSON = """[{"group": str, "state": str, "assignor": str, "coordinator": int,
  "members": [{"member_id": str, "client_id": str, "host": str,
               "partitions": [{"topic": str, "partition": int}]}],
  "offsets": [{"topic": str, "partition": int, "current_offset": int|null,
               "log_end_offset": int|null, "lag": int|null, "member_id": str|null}]
}, ...]"""
RESET_JSON = """{"group": str, "executed": bool,
 "offsets": [{"topic": str, "partition": int, "new_offset": int}]}"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    verbs = p.add_subparsers(dest="verb", required=True)
    add_verb(verbs, "list", "group ids, states and types", list_groups, LIST_JSON)
    v = add_verb(
        verbs,
        "describe",
        "members, assignments, committed offsets and lag",
        describe_groups,
        DESCRIBE_JSON,
    )
    v.add_argument("groups", nargs="+")
    v = add_verb(
        verbs,
        "reset-offsets",
        "move an inactive group's committed offsets",
        reset_offsets,
        RESET_JSON,
    )
    v.add_argument("group")
    v.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]")
    to = v.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]",
        help="local time unless an offset is given",
    )
    to.add_argument("--to-offset", type=int, metavar="N")
    v.add_argument("--execute", action="store_true", help="apply the plan (default: only print it)")
    v = add_verb(verbs, "delete", "delete empty groups and their committed offsets", delete)
    v.add_argument("groups", nargs="+")


def _state(value: Any) -> str:
    name = getattr(value, "name", str(value))
    return {
        "PREPARING_REBALANCING": "PreparingRebalance",
        "COMPLETING_REBALANCING": "CompletingRebalance",
    }.get(name, name.replace("_", " ").title().replace(" ", ""))


def list_groups(args: argparse.Namespace) -> int:
    admin = connect.admin(args)  # kept alive until the future completes
    result = admin.list_consumer_groups(request_timeout=args.timeout).result()
    doc = [
        {
            "group": g.group_id,
            "state": _state(g.state),
            "type": _state(getattr(g, "type", "")),
            "simple": bool(g.is_simple_consumer_group),
        }
        for g in sorted(result.valid, key=lambda g: g.group_id)
    ]
    rows = [[g["group"], g["state"], g["type"], g["simple"]] for g in doc]
    output.emit(args, doc, [output.Table(["group", "state", "type", "simple"], rows)])
    for err in result.errors:
        print(f"error: {describe(err)}", file=sys.stderr)
    return 1 if result.errors else 0


def _committed(admin: Any, group: str, timeout_s: float) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fut = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
    )[group]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in fut.result().topic_partitions
        if tp.offset >= 0
    }


def _offsets(
    admin: Any, tps: list[tuple[str, int]], spec: Any, timeout_s: float
) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    if not tps:
        return {}
    futs = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in tps}, request_timeout=timeout_s
    )
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futs.items()}


def _describe_one(admin: Any, group: str, d: Any, timeout_s: float) -> dict[str, Any]:
    from confluent_kafka.admin import OffsetSpec

    owner: dict[tuple[str, int], Any] = {}
    for m in d.members:
        for tp in m.assignment.topic_partitions:
            owner[(tp.topic, tp.partition)] = m
    committed = _committed(admin, group, timeout_s)
    partitions = sorted(set(committed) | set(owner))
    ends = _offsets(admin, partitions, OffsetSpec.latest(), timeout_s)
    offsets = []
    for tp in partitions:
        cur, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
        offsets.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": cur,
                "log_end_offset": end,
                "lag": end - cur if cur is not None and end is not None else None,
                "member_id": m.member_id if m else None,
            }
        )
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.host,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition}
                for tp in m.assignment.topic_partitions
            ],
        }
        for m in d.members
    ]
    return {
        "group": group,
        "state": _state(d.state),
        "assignor": d.partition_assignor or None,
        "coordinator": d.coordinator.id if d.coordinator else None,
        "members": members,
        "offsets": offsets,
    }


def _describe_blocks(g: dict[str, Any]) -> list[output.Block]:
    members = {m["member_id"]: m for m in g["members"]}
    head = output.Fields(
        [
            ("group", g["group"]),
            ("state", g["state"]),
            ("assignor", g["assignor"]),
            ("members", len(g["members"])),
            ("coordinator", g["coordinator"]),
        ]
    )
    rows = []
    for o in g["offsets"]:
        m = members.get(o["member_id"]) if o["member_id"] else None
        rows.append(
            [
                g["group"],
                o["topic"],
                o["partition"],
                o["current_offset"],
                o["log_end_offset"],
                o["lag"],
                o["member_id"],
                m["client_id"] if m else None,
                m["host"] if m else None,
            ]
        )
    for m in g["members"]:
        if not m["partitions"]:
            rows.append(
                [
                    g["group"],
                    None,
                    None,
                    None,
                    None,
                    None,
                    m["member_id"],
                    m["client_id"],
                    m["host"],
                ]
            )
    columns = ["group", "topic", "partition", "current offset", "log end offset", "lag"]
    columns += ["member", "client", "host"]
    return [head, output.Table(columns, rows)]


def describe_groups(args: argparse.Namespace) -> int:
    admin = connect.admin(args)
    status = 0
    doc, blocks = [], []
    futures = admin.describe_consumer_groups(args.groups, request_timeout=args.timeout)
    for group in args.groups:
        try:
            d = futures[group].result()
        except Exception as exc:
            print(f"error: group {group}: {describe(exc)}", file=sys.stderr)
            status = 1
            continue
        g = _describe_one(admin, group, d, args.timeout)
        if g["state"] == "Dead" and not g["offsets"]:  # what a coordinator says of no group
            print(f"error: consumer group '{group}' does not exist", file=sys.stderr)
            status = 1
            continue
        doc.append(g)
        blocks += _describe_blocks(g)
    output.emit(args, doc, blocks)
    return status


def reset_offsets(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    when = (
        parse_datetime(args.to_datetime, "--to-datetime") if args.to_datetime is not None else None
    )
    check_topic_specs(args.topic, "--topic")
    admin = connect.admin(args)
    timeout = args.timeout
    d = admin.describe_consumer_groups([args.group], request_timeout=timeout)[args.group].result()
    state = _state(d.state)
    if state not in ("Empty", "Dead", "Unknown"):
        raise CliError(
            f"assignments can only be reset if the group '{args.group}' is inactive, but the "
            f"current state is {state}"
        )
    tps = topic_partitions(admin.list_topics(timeout=timeout), args.topic, "--topic")
    earliest = _offsets(admin, tps, OffsetSpec.earliest(), timeout)
    latest = _offsets(admin, tps, OffsetSpec.latest(), timeout)
    if args.to_earliest:
        target = earliest
    elif args.to_latest:
        target = latest
    elif when is not None:
        by_time = _offsets(admin, tps, OffsetSpec.for_timestamp(when), timeout)
        target = {tp: (o if o >= 0 else latest[tp]) for tp, o in by_time.items()}
    else:
        target = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    doc = {
        "group": args.group,
        "executed": bool(args.execute),
        "offsets": [{"topic": t, "partition": p, "new_offset": target[(t, p)]} for t, p in tps],
    }
    title = f"{args.group}: new offsets" + ("" if args.execute else " (dry run: add --execute)")
    rows = [[args.group, t, p, target[(t, p)]] for t, p in tps]
    output.emit(
        args, doc, [output.Table(["group", "topic", "partition", "new offset"], rows, title)]
    )
    if not args.execute:
        print("dry run: nothing was changed; add --execute to apply these offsets", file=sys.stderr)
        return 0
    request = ConsumerGroupTopicPartitions(
        args.group, [TopicPartition(t, p, target[(t, p)]) for t, p in tps]
    )
    result = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[
        args.group
    ].result()
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    for tp in failed:
        print(f"error: {tp.topic}-{tp.partition}: {describe(tp.error)}", file=sys.stderr)
    return 1 if failed else 0


def delete(args: argparse.Namespace) -> int:
    admin = connect.admin(args)
    status = 0
    for group, fut in admin.delete_consumer_groups(
        args.groups, request_timeout=args.timeout
    ).items():
        try:
            fut.result()
            print(f"deleted group {group}")
        except Exception as exc:
            print(f"error: cannot delete group {group}: {describe(exc)}", file=sys.stderr)
            status = 1
    return status
