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
import datetime as dt
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from gregor.cli.topics import add_bootstrap

TIMEOUT_S = 15


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser("list", help="group ids, states and types")
    add_bootstrap(v)
    v.set_defaults(func=list_groups)
    v = verbs.add_parser("describe", help="members, assignments, committed offsets and lag")
    add_bootstrap(v)
    v.add_argument("groups", nargs="+")
    v.set_defaults(func=describe)
    v = verbs.add_parser("reset-offsets", help="move an inactive group's committed offsets")
    add_bootstrap(v)
    v.add_argument("group")
    v.add_argument(
        "--topic",
        action="append",
        required=True,
        type=topic_partitions_arg,
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    to = v.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument(
        "--to-datetime",
        type=datetime_arg,
        metavar="YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]",
        help="local time unless an offset is given",
    )
    to.add_argument("--to-offset", type=int, metavar="N")
    v.add_argument("--execute", action="store_true", help="apply the plan (default: only print it)")
    v.set_defaults(func=reset_offsets)
    v = verbs.add_parser("delete", help="delete empty groups and their committed offsets")
    add_bootstrap(v)
    v.add_argument("groups", nargs="+")
    v.set_defaults(func=delete)


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": args.bootstrap_server})


def _state(value: Any) -> str:
    name = getattr(value, "name", str(value))
    return {
        "PREPARING_REBALANCING": "PreparingRebalance",
        "COMPLETING_REBALANCING": "CompletingRebalance",
    }.get(name, name.replace("_", " ").title().replace(" ", ""))


def list_groups(args: argparse.Namespace) -> int:
    admin = _admin(args)  # kept alive until the future completes
    result = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
    table = Table()
    for col in ("group", "state", "type", "simple"):
        table.add_column(col)
    for g in sorted(result.valid, key=lambda g: g.group_id):
        table.add_row(
            g.group_id,
            _state(g.state),
            _state(getattr(g, "type", "")),
            "yes" if g.is_simple_consumer_group else "",
        )
    Console().print(table)
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    return 1 if result.errors else 0


def _committed(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fut = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    )[group]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in fut.result().topic_partitions
        if tp.offset >= 0
    }


def _offsets(admin: Any, tps: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    if not tps:
        return {}
    futs = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in tps}, request_timeout=TIMEOUT_S
    )
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futs.items()}


def describe(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec

    admin = _admin(args)
    console = Console()
    status = 0
    futures = admin.describe_consumer_groups(args.groups, request_timeout=TIMEOUT_S)
    for group in args.groups:
        try:
            d = futures[group].result()
        except Exception as exc:
            print(f"error: group {group}: {exc}", file=sys.stderr)
            status = 1
            continue
        owner: dict[tuple[str, int], Any] = {}
        for m in d.members:
            for tp in m.assignment.topic_partitions:
                owner[(tp.topic, tp.partition)] = m
        committed = _committed(admin, group)
        partitions = sorted(set(committed) | set(owner))
        ends = _offsets(admin, partitions, OffsetSpec.latest())
        console.print(
            f"[bold]{group}[/bold]  state {_state(d.state)}, assignor {d.partition_assignor or '-'}, "
            f"{len(d.members)} members, coordinator {d.coordinator.id if d.coordinator else '-'}"
        )
        table = Table()
        for col in (
            "topic",
            "partition",
            "current offset",
            "log end offset",
            "lag",
            "member",
            "client",
            "host",
        ):
            table.add_column(
                col,
                justify="right"
                if col in ("partition", "current offset", "log end offset", "lag")
                else "left",
            )
        for tp in partitions:
            cur, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
            lag = str(end - cur) if cur is not None and end is not None else "-"
            table.add_row(
                tp[0],
                str(tp[1]),
                "-" if cur is None else str(cur),
                "-" if end is None else str(end),
                lag,
                m.member_id if m else "-",
                m.client_id if m else "-",
                m.host if m else "-",
            )
        console.print(table)
        idle = [m for m in d.members if not m.assignment.topic_partitions]
        for m in idle:
            console.print(f"member {m.member_id} ({m.client_id}, {m.host}) has no partitions")
    return status


def datetime_arg(text: str) -> int:
    """--to-datetime: ISO 8601, local time unless an offset is given; ms since the epoch."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date and time: use ISO 8601, e.g. --to-datetime "
            "2024-05-01T12:00:00 (local time) or 2024-05-01T12:00:00+00:00"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def topic_partitions_arg(text: str) -> tuple[str, list[int] | None]:
    """--topic TOPIC[:P,P...]: (topic, the partitions named, or None for all of them)."""
    topic, colon, parts = text.partition(":")
    items = parts.split(",")
    if not topic or (colon and not all(p.strip().isdigit() for p in items)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not TOPIC[:PARTITION,...] (partitions are numbers), e.g. --topic "
            "orders or --topic orders:0,1"
        )
    return topic, ([int(p) for p in items] if colon else None)


def _topic_partitions(
    admin: Any, specs: list[tuple[str, list[int] | None]]
) -> list[tuple[str, int]]:
    md = admin.list_topics(timeout=TIMEOUT_S)
    out = []
    for topic, wanted in specs:
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise SystemExit(f"gregor: --topic {topic}: topic {topic} does not exist")
        missing = sorted(set(wanted or ()) - set(t.partitions))
        if missing:
            shown = ",".join(map(str, wanted or ()))
            raise SystemExit(
                f"gregor: --topic {topic}:{shown}: {topic} has no partition "
                f"{','.join(map(str, missing))} (it has 0-{len(t.partitions) - 1}), e.g. "
                f"--topic {topic}:0"
            )
        out += [(topic, p) for p in (wanted or sorted(t.partitions))]
    return out


def reset_offsets(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = _admin(args)
    d = admin.describe_consumer_groups([args.group], request_timeout=TIMEOUT_S)[args.group].result()
    state = _state(d.state)
    if state not in ("Empty", "Dead", "Unknown"):
        print(
            f"error: Assignments can only be reset if the group '{args.group}' is inactive, but the "
            f"current state is {state}.",
            file=sys.stderr,
        )
        return 1
    tps = _topic_partitions(admin, args.topic)
    earliest = _offsets(admin, tps, OffsetSpec.earliest())
    latest = _offsets(admin, tps, OffsetSpec.latest())
    if args.to_earliest:
        target = earliest
    elif args.to_latest:
        target = latest
    elif args.to_datetime is not None:
        by_time = _offsets(admin, tps, OffsetSpec.for_timestamp(args.to_datetime))
        target = {tp: (o if o >= 0 else latest[tp]) for tp, o in by_time.items()}
    else:
        target = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    table = Table(
        title=f"{args.group}: new offsets" + ("" if args.execute else " (dry run: add --execute)")
    )
    for col in ("topic", "partition", "new offset"):
        table.add_column(col)
    for tp in tps:
        table.add_row(tp[0], str(tp[1]), str(target[tp]))
    Console().print(table)
    if not args.execute:
        return 0
    request = ConsumerGroupTopicPartitions(
        args.group, [TopicPartition(t, p, target[(t, p)]) for t, p in tps]
    )
    result = admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[
        args.group
    ].result()
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    for tp in failed:
        print(f"error: {tp.topic}-{tp.partition}: {tp.error}", file=sys.stderr)
    return 1 if failed else 0


def delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    status = 0
    for group, fut in admin.delete_consumer_groups(args.groups, request_timeout=TIMEOUT_S).items():
        try:
            fut.result()
            print(f"deleted group {group}")
        except Exception as exc:
            print(f"error: group {group}: {exc}", file=sys.stderr)
            status = 1
    return status
