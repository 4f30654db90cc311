"""`gregor topics list|describe|create|delete|alter-config`, on confluent-kafka's AdminClient, as
`kafka-topics.sh` and `kafka-configs.sh` do."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        "-b",
        default=DEFAULT_BOOTSTRAP,
        help=f"host:port (default {DEFAULT_BOOTSTRAP})",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "topics", help="list, describe, create, delete topics and change their configs"
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser("list", help="topic names")
    add_bootstrap(v)
    v.set_defaults(func=list_topics)
    v = verbs.add_parser("describe", help="partitions, leaders and configs")
    add_bootstrap(v)
    v.add_argument("topics", nargs="*")
    v.set_defaults(func=describe)
    v = verbs.add_parser("create", help="create a topic")
    add_bootstrap(v)
    v.add_argument("topic")
    v.add_argument("--partitions", type=int, default=-1)
    v.add_argument("--replication-factor", type=int, default=-1)
    v.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    v.set_defaults(func=create)
    v = verbs.add_parser("delete", help="delete topics")
    add_bootstrap(v)
    v.add_argument("topics", nargs="+")
    v.set_defaults(func=delete)
    v = verbs.add_parser("alter-config", help="set or delete topic configs")
    add_bootstrap(v)
    v.add_argument("topic")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    v.add_argument("--delete", action="append", default=[], metavar="KEY")
    v.set_defaults(func=alter_config)


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": args.bootstrap_server})


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _wait(futures: dict[str, Any], what: str) -> int:
    status = 0
    for name, fut in futures.items():
        try:
            fut.result()
            print(f"{what} {name}")
        except Exception as exc:  # confluent_kafka.KafkaException carries the broker's error
            print(f"error: {what} {name}: {exc}", file=sys.stderr)
            status = 1
    return status


def list_topics(args: argparse.Namespace) -> int:
    md = _admin(args).list_topics(timeout=10)
    for name in sorted(md.topics):
        print(name)
    return 0


def describe(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ConfigResource

    admin = _admin(args)
    md = admin.list_topics(timeout=10)
    names = args.topics or sorted(md.topics)
    console = Console()
    status = 0
    for name in names:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            print(f"error: topic {name}: {t.error if t else 'does not exist'}", file=sys.stderr)
            status = 1
            continue
        table = Table(title=f"{name}  ({len(t.partitions)} partitions)")
        for col in ("partition", "leader", "replicas", "isr"):
            table.add_column(col)
        for pid in sorted(t.partitions):
            p = t.partitions[pid]
            table.add_row(
                str(pid), str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs))
            )
        console.print(table)
        res = ConfigResource("topic", name)
        configs = admin.describe_configs([res])[res].result()
        overrides = {k: v.value for k, v in configs.items() if not v.is_default}
        console.print(
            "configs: "
            + (", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(defaults)")
        )
    return status


def create(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic

    topic = NewTopic(
        args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        config=_pairs(args.config),
    )
    admin = _admin(args)  # kept alive until the futures complete
    return _wait(admin.create_topics([topic]), "created topic")


def delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    return _wait(admin.delete_topics(args.topics), "deleted topic")


def alter_config(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in _pairs(args.set).items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    if not entries:
        raise SystemExit("nothing to change: give --set KEY=VALUE or --delete KEY")
    res = ConfigResource("topic", args.topic, incremental_configs=entries)
    admin = _admin(args)
    futures = admin.incremental_alter_configs([res])
    return _wait(dict.fromkeys([args.topic], next(iter(futures.values()))), "altered configs of")
