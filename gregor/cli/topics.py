"""`gregor topics list|describe|create|delete|add-partitions|alter-config`, on confluent-kafka's
AdminClient, as `kafka-topics.sh` and `kafka-configs.sh` do."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, describe

LIST_JSON = '["topic name", ...]'
DESCRIBE_JSON = """[{"topic": str, "partitions": [{"partition": int, "leader": int,
                  "replicas": [int], "isr": [int]}],
  "configs": {"name": "value", ...}   (overrides only)
}, ...]"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "topics", help="list, describe, create, delete topics and change their configs"
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    add_verb(verbs, "list", "topic names", list_topics, LIST_JSON)
    v = add_verb(
        verbs, "describe", "partitions, leaders and configs", describe_topics, DESCRIBE_JSON
    )
    v.add_argument("topics", nargs="*")
    v = add_verb(verbs, "create", "create a topic", create)
    v.add_argument("topic")
    v.add_argument("--partitions", type=int, default=-1)
    v.add_argument("--replication-factor", type=int, default=-1)
    v.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    v = add_verb(verbs, "delete", "delete topics", delete)
    v.add_argument("topics", nargs="+")
    v = add_verb(
        verbs,
        "add-partitions",
        "raise a topic's partition count (CreatePartitions)",
        add_partitions,
    )
    v.add_argument("topic")
    v.add_argument("--partitions", type=int, required=True, metavar="N", help="the new total")
    v = add_verb(verbs, "alter-config", "set or delete topic configs", alter_config)
    v.add_argument("topic")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    v.add_argument("--delete", action="append", default=[], metavar="KEY")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(
                f"{flag} expects KEY=VALUE, e.g. {flag} retention.ms=86400000; got {item!r}"
            )
        out[key] = value
    return out


def _wait(futures: dict[str, Any], done: str, failed: str, timeout_s: float) -> int:
    """Print `<done> <name>` for each future that succeeds and `error: <failed> <name>: why` for
    each that fails; 1 if any failed."""
    status = 0
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s + 5)
            print(f"{done} {name}")
        except Exception as exc:  # confluent_kafka.KafkaException carries the broker's error
            print(f"error: {failed} {name}: {describe(exc)}", file=sys.stderr)
            status = 1
    return status


def list_topics(args: argparse.Namespace) -> int:
    md = connect.admin(args).list_topics(timeout=args.timeout)
    names = sorted(md.topics)
    output.emit(args, names, [output.Table(["topic"], [[n] for n in names], header=False)])
    return 0


def describe_topics(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ConfigResource, ConfigSource

    admin = connect.admin(args)
    md = admin.list_topics(timeout=args.timeout)
    names = args.topics or sorted(md.topics)
    status = 0
    doc, blocks = [], []
    for name in names:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            why = describe(t.error) if t is not None else "does not exist"
            print(f"error: topic {name}: {why}", file=sys.stderr)
            status = 1
            continue
        res = ConfigResource("topic", name)
        configs = admin.describe_configs([res], request_timeout=args.timeout)[res].result()
        topic_source = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        overrides = {  # the topic's own settings, as kafka-topics.sh --describe lists them
            k: v.value for k, v in sorted(configs.items()) if v.source == topic_source
        }
        parts = [
            {
                "partition": pid,
                "leader": t.partitions[pid].leader,
                "replicas": list(t.partitions[pid].replicas),
                "isr": list(t.partitions[pid].isrs),
            }
            for pid in sorted(t.partitions)
        ]
        doc.append({"topic": name, "partitions": parts, "configs": overrides})
        rows: list[list[Any]] = [
            [name, p["partition"], p["leader"], _ids(p["replicas"]), _ids(p["isr"])] for p in parts
        ]
        blocks.append(
            output.Table(
                ["topic", "partition", "leader", "replicas", "isr"],
                rows,
                title=f"{name}  ({len(parts)} partitions)",
            )
        )
        blocks.append(
            output.Table(
                ["topic", "config", "value"],
                [[name, k, v] for k, v in overrides.items()],
                title=f"{name}  configs (overrides)" if overrides else f"{name}  configs: defaults",
            )
        )
    output.emit(args, doc, blocks)
    return status


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def create(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic

    topic = NewTopic(
        args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        config=_pairs(args.config, "--config"),
    )
    admin = connect.admin(args)  # kept alive until the futures complete
    futures = admin.create_topics(
        [topic], request_timeout=args.timeout, operation_timeout=args.timeout
    )
    return _wait(futures, "created topic", "cannot create topic", args.timeout)


def delete(args: argparse.Namespace) -> int:
    admin = connect.admin(args)
    futures = admin.delete_topics(
        args.topics, request_timeout=args.timeout, operation_timeout=args.timeout
    )
    return _wait(futures, "deleted topic", "cannot delete topic", args.timeout)


def add_partitions(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewPartitions

    if args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, got {args.partitions}")
    admin = connect.admin(args)
    futures = admin.create_partitions(
        [NewPartitions(args.topic, args.partitions)],
        request_timeout=args.timeout,
        operation_timeout=args.timeout,
    )
    return _wait(
        futures,
        f"{args.partitions} partitions now in topic",
        "cannot add partitions to topic",
        args.timeout,
    )


def alter_config(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in _pairs(args.set, "--set").items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    if not entries:
        raise CliError("nothing to change: give --set KEY=VALUE or --delete KEY")
    res = ConfigResource("topic", args.topic, incremental_configs=entries)
    admin = connect.admin(args)
    futures = admin.incremental_alter_configs([res], request_timeout=args.timeout)
    return _wait(
        {args.topic: futures[res]},
        "altered configs of",
        "cannot alter configs of",
        args.timeout,
    )
