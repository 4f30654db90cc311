"""Parsing of what users type for partitions, times and numbers: `TOPIC[:P,P...]` checked
against the cluster's metadata, ISO-8601 times, `--time` as `kafka-get-offsets.sh` takes it, and
the argparse types of positive numbers. Every parse error is a CliError that names the flag and
shows an example; the argparse types raise ArgumentTypeError instead, which argparse turns into
a usage error naming the flag (exit status 2)."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable
from typing import Any

from gregor.cli.errors import CliError

DATETIME_EXAMPLE = "2024-05-01T12:00:00 (local time) or 2024-05-01T12:00:00+02:00"
# ListOffsets' special timestamps (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP and so on).
NAMED_TIMES = {"earliest": -2, "latest": -1, "max-timestamp": -3}


def parse_datetime(text: str, flag: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 time (local time unless it has an offset)."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"{flag}: not an ISO-8601 time: {text!r} (e.g. {DATETIME_EXAMPLE})"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def parse_time(text: str, flag: str = "--time") -> int:
    """earliest (-2), latest (-1), max-timestamp (-3), milliseconds since the epoch, or an
    ISO-8601 time."""
    if text in NAMED_TIMES:
        return NAMED_TIMES[text]
    try:
        value = int(text)
    except ValueError:
        pass
    else:
        if value < -3:
            raise CliError(
                f"{flag}: {text} is not a time (e.g. {flag} latest or {flag} 1714557600000)"
            )
        return value
    if "-" not in text:  # not a number and not a date: say what is accepted
        raise CliError(
            f"{flag}: {text!r} is not earliest, latest, max-timestamp, milliseconds or an ISO-8601 "
            f"time (e.g. {flag} 2024-05-01T12:00:00)"
        )
    return parse_datetime(text, flag)


def check_topic_specs(specs: list[str], flag: str) -> None:
    """The syntax of `TOPIC[:P,P...]` specs, checked before anything is asked of the cluster."""
    for spec in specs:
        topic, colon, parts = spec.partition(":")
        if not topic:
            raise CliError(
                f"{flag} {spec}: no topic named, e.g. {flag} orders or {flag} orders:0,1"
            )
        if colon and not all(p.strip().isdigit() for p in parts.split(",")):
            raise CliError(f"{flag} {spec}: partitions must be numbers, e.g. {flag} {topic}:0,1")


def topic_partitions(md: Any, specs: list[str], flag: str) -> list[tuple[str, int]]:
    """(topic, partition) pairs named by `TOPIC` (every partition) or `TOPIC:P,P...` specs,
    checked against the cluster's metadata `md` (a confluent-kafka ClusterMetadata)."""
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        t = md.topics.get(topic)
        if not topic or t is None or t.error is not None:
            raise CliError(f"{flag} {spec}: topic {topic!r} does not exist")
        try:
            wanted = [int(p) for p in parts.split(",")] if parts else sorted(t.partitions)
        except ValueError:
            raise CliError(
                f"{flag} {spec}: partitions must be numbers, e.g. {flag} {topic}:0,1"
            ) from None
        missing = [p for p in wanted if p not in t.partitions]
        if missing:
            raise CliError(
                f"{flag} {spec}: topic {topic} has no partition {missing[0]} "
                f"(it has {len(t.partitions)}: 0-{len(t.partitions) - 1})"
            )
        out += [(topic, p) for p in wanted if (topic, p) not in out]
    return out


def _number(text: str, cast: Callable[[str], float], what: str, example: str) -> float:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r} (e.g. {example})") from None
    if value != value:  # NaN
        raise argparse.ArgumentTypeError(f"not {what}: {text!r} (e.g. {example})")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0."""
    value = int(_number(text, int, "a whole number", "1000"))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    value = _number(text, float, "a number of seconds", "10")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def rate(text: str) -> float:
    """An argparse type: a positive rate, or -1 (any negative number) for no limit."""
    value = _number(text, float, "a number", "1000, or -1 for no limit")
    if value == 0:  # 0 would never send
        raise argparse.ArgumentTypeError(f"must be positive, or -1 for no limit; got {text}")
    return value


def bootstrap_servers(text: str) -> str:
    """An argparse type: `-b HOST:PORT[,HOST:PORT...]` with each port a number from 1 to 65535,
    checked before any client is made (librdkafka would only say "connection refused"). A
    missing port (librdkafka's 9092), a `PROTOCOL://` prefix and a bracketed IPv6 host pass."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise argparse.ArgumentTypeError("no broker address (e.g. -b 127.0.0.1:9092)")
    for entry in entries:
        address = entry.partition("://")[2] if "://" in entry else entry
        host, colon, port = address.rpartition(":")
        if not colon or address.endswith("]") or (":" in host and not host.endswith("]")):
            continue  # no port given, or an IPv6 address left to the client library
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise argparse.ArgumentTypeError(
                f"{entry!r}: the port must be a number from 1 to 65535 (e.g. -b 127.0.0.1:9092)"
            )
    return text
