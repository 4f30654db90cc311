"""The clients of `gregor perf`: their config (the tool's defaults, --command-config, the
role's config file and props, -b), and the wait for the topic's metadata. Building the client,
reaching the bootstrap and librdkafka's log lines are the shared client layer's
(`gregor.cli.connect`); every failure is a one-line `CliError`."""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from gregor.cli import connect
from gregor.cli.errors import CliError, describe


def client_config(args: argparse.Namespace, role: str) -> dict[str, Any]:
    """What the client is built with, later entries winning: the tool's defaults,
    --command-config, --<role>.config, --<role>-props, then -b and --group when given."""
    conf: dict[str, Any] = {}
    if role == "consumer":
        conf |= {
            "group.id": f"perf-consumer-{random.randrange(100_000)}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
    for flag, path in _files(args, role):
        conf |= connect.read_properties(path, flag)
    for item in getattr(args, f"{role}_props"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--{role}-props expects KEY=VALUE, got {item!r} (e.g. acks=1)")
        conf[key.strip()] = value.strip()
    if args.bootstrap_server:
        conf["bootstrap.servers"] = args.bootstrap_server
    conf.setdefault("bootstrap.servers", connect.DEFAULT_BOOTSTRAP)
    if role == "consumer" and args.group:
        conf["group.id"] = args.group
    return conf


def make_client(args: argparse.Namespace, role: str) -> Any:
    """The one place a perf client is built: through the shared layer, handed out once the
    bootstrap has answered within --timeout (milliseconds, as Kafka's perf tools take it)."""
    conf = client_config(args, role)
    conf["logger"] = connect.rdkafka_logger(args.verbose)
    sources = [f"{flag} {path}" for flag, path in _files(args, role)]
    if getattr(args, f"{role}_props"):
        sources.append(f"--{role}-props")
    return connect.build(
        role, conf, str(conf["bootstrap.servers"]), args.timeout / 1000, ", ".join(sources)
    )


def _files(args: argparse.Namespace, role: str) -> list[tuple[str, str]]:
    """The properties files given, as (flag, path), in the order they are read."""
    given = [
        ("--command-config", args.command_config),
        (f"--{role}.config", getattr(args, f"{role}_config")),
    ]
    return [(flag, path) for flag, path in given if path]


def check_topic(client: Any, topic: str, timeout_ms: int) -> None:
    """Wait until the topic's metadata answers without error (a topic just created may first
    answer LEADER_NOT_AVAILABLE), or fail in one line: the topic does not exist, or it still
    answers an error at the deadline."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() * 1000 + timeout_ms
    while True:
        left_s = max(0.0, (deadline - time.monotonic() * 1000) / 1000)
        try:
            md = client.list_topics(topic, timeout=left_s)
        except KafkaException as exc:
            raise CliError(f"topic {topic}: {describe(exc)}") from None
        err = md.topics[topic].error if topic in md.topics else None
        if err is None and topic in md.topics:
            return
        if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise CliError(
                f"topic {topic} does not exist (create it: gregor topics create {topic})"
            )
        if (err is not None and not err.retriable()) or time.monotonic() * 1000 >= deadline:
            raise CliError(f"topic {topic}: {describe(err) if err else 'no metadata'}")
        time.sleep(0.1)
