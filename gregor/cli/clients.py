"""`gregor produce TOPIC` (lines from stdin) and `gregor consume TOPIC`, on confluent-kafka, as
`kafka-console-producer.sh` and `kafka-console-consumer.sh` do."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.delivery import Deliveries
from gregor.cli.errors import CliError, describe

LIBRDKAFKA_MAX_BYTES = 1_000_000  # librdkafka's default batch.size and message.max.bytes


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "produce", "send lines from stdin as records", produce)
    p.add_argument("topic")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    p.add_argument("--headers", metavar="K=V,K=V", help="headers for every record")
    p.add_argument("--partition", type=int, default=-1)
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    p.add_argument(
        "--progress", action="store_true", help="show a progress bar (stdin counted in lines)"
    )

    c = add_verb(sub, "consume", "print records", consume)
    c.add_argument("topic")
    c.add_argument("--from-beginning", action="store_true")
    c.add_argument("--group", help="consumer group (default: none; read without committing)")
    c.add_argument("--partition", type=int, action="append", help="only these partitions")
    c.add_argument("--max-messages", type=int, default=-1)
    c.add_argument(
        "--timeout-ms", type=int, default=-1, help="exit after this long without a record"
    )
    c.add_argument(
        "--format",
        default="value",
        choices=["value", "kv", "json"],
        help="value, key<TAB>value, or JSON lines (as --output json); --output wins",
    )
    output.add_lines_output_arg(c, CONSUME_SHAPE)


CONSUME_SHAPE = """
{"topic", "partition", "offset", "timestamp", "key", "value", "headers": {"NAME": "VALUE"}}
key, value and header values: text when UTF-8, "base64:..." otherwise, null when absent.
--output plain prints each value (key<TAB>value with --format kv).
"""


def _consume_format(args: argparse.Namespace) -> str:
    """json, kv or value: --output json or plain when given, else --format."""
    if args.output == "json":
        return "json"
    if args.output == "plain":
        return "kv" if args.format == "kv" else "value"
    return str(args.format)


def _headers(spec: str | None) -> list[tuple[str, bytes]]:
    if not spec:
        return []
    out = []
    for item in spec.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise CliError(f"--headers: {item!r} is not KEY=VALUE, e.g. --headers source=cli,n=1")
        out.append((key, value.encode()))
    return out


def produce(args: argparse.Namespace) -> int:
    """Every line a record; a line too large for the topic is reported by number and the others
    delivered (exit 1); Ctrl-C stops reading and delivers what was read (exit 130)."""
    headers = _headers(args.headers)  # a malformed --headers fails before connecting
    deliveries = Deliveries(args.topic, _size_limit(args))
    producer = connect.producer(
        args,
        {
            "bootstrap.servers": args.bootstrap_server,
            "acks": "-1" if args.acks == "all" else args.acks,
            "compression.type": args.compression,
            "linger.ms": 5,
            **_batch_limits(deliveries.limit),
        },
    )
    if args.partition >= 0:
        md = producer.list_topics(args.topic, timeout=args.timeout).topics.get(args.topic)
        if md is not None and md.error is None:  # else: made on the first send, or refused then
            _check_partitions(args.topic, md.partitions, [args.partition])
    progress = None
    if args.progress:
        from rich.progress import Progress

        progress = Progress(transient=True)
        progress.start()
    interrupted = False
    try:
        _send_lines(args, producer, deliveries, headers, progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if progress is not None:
            progress.stop()
    try:
        producer.flush(30)
    except KeyboardInterrupt:
        interrupted = True
    for line in deliveries.report_lines():
        print(f"gregor: {line}", file=sys.stderr)
    read, delivered = deliveries.read, deliveries.delivered
    if interrupted:
        print(
            f"gregor: interrupted: {delivered} of the {read} records read were delivered to "
            f"{args.topic}",
            file=sys.stderr,
        )
        return 130
    if delivered < read:
        print(
            f"gregor: {read - delivered} of {read} records were not delivered to {args.topic}",
            file=sys.stderr,
        )
        return 1
    print(f"produced {read} records to {args.topic}", file=sys.stderr)
    return 0


def _send_lines(
    args: argparse.Namespace,
    producer: Any,
    deliveries: Deliveries,
    headers: list[tuple[str, bytes]],
    progress: Any,
) -> None:
    from confluent_kafka import KafkaException

    task = progress.add_task("producing", total=None) if progress is not None else None
    separator = os.fsencode(args.key_separator) if args.key_separator else None
    for number, line in enumerate(sys.stdin.buffer, 1):
        vb = _chomp(line)
        kb: bytes | None = None
        if separator and separator in vb:
            kb, vb = vb.split(separator, 1)
        deliveries.read += 1
        if not deliveries.fits(number, kb, vb, headers):
            continue
        kwargs: dict[str, Any] = {
            "value": vb,
            "headers": headers,
            "on_delivery": deliveries.on_delivery(number, len(vb)),
        }
        if kb is not None:
            kwargs["key"] = kb
        if args.partition >= 0:
            kwargs["partition"] = args.partition
        while True:
            try:
                producer.produce(args.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
            except KafkaException as exc:  # refused by the client itself (its own size limit)
                deliveries.failed(number, len(vb), exc.args[0].str())
                break
        producer.poll(0)
        if progress is not None:
            progress.update(task, advance=1)


def _chomp(line: bytes) -> bytes:
    """A line as read, its bytes kept as they are (not all text is UTF-8), without its end:
    "\n" or "\r\n", as Kafka's console producer reads lines."""
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _size_limit(args: argparse.Namespace) -> int | None:
    """The topic's max.message.bytes, for uncompressed batches; None when compressed (only the
    broker can judge) or unknown (a topic yet to be created)."""
    from confluent_kafka.admin import ConfigResource

    if args.compression != "none":
        return None
    admin = connect.admin(args)  # one line and exit 1 if the bootstrap cannot be reached
    resource = ConfigResource(ConfigResource.Type.TOPIC, args.topic)
    try:
        configs = admin.describe_configs([resource], request_timeout=args.timeout)[
            resource
        ].result()
        return int(configs["max.message.bytes"].value)
    except Exception:  # no such topic yet, or no answer: delivery reports tell
        return None


def _batch_limits(limit: int | None) -> dict[str, int]:
    """librdkafka settings that keep every batch within the topic's max.message.bytes (a batch
    above it fails whole, good lines with the bad) and let through a record up to it (librdkafka
    refuses one above its own message.max.bytes, 1,000,000 by default)."""
    if limit is None:
        return {}
    return {
        "batch.size": max(1, min(limit, LIBRDKAFKA_MAX_BYTES)),
        "message.max.bytes": max(limit, LIBRDKAFKA_MAX_BYTES),
    }


def _pairs(headers: Any) -> list[tuple[str, bytes | None]]:
    return list(headers or [])


def _text(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(b).decode()


def _partitions(consumer: Any, args: argparse.Namespace) -> list[int]:
    """The partitions to read without a group: --partition's, each checked to exist, or all."""
    md = consumer.list_topics(args.topic, timeout=args.timeout).topics.get(args.topic)
    if md is None or md.error is not None:
        raise CliError(f"topic {args.topic}: {describe(md.error) if md else 'not found'}")
    _check_partitions(args.topic, md.partitions, args.partition or [])
    return list(args.partition or sorted(md.partitions))


def _check_partitions(topic: str, held: Any, wanted: list[int]) -> None:
    """A --partition the topic lacks is one line, before anything is read or sent."""
    missing = [p for p in wanted if p not in held]
    if missing:
        raise CliError(
            f"--partition {missing[0]}: topic {topic} has no partition {missing[0]} "
            f"(it has {len(held)}: 0-{len(held) - 1})"
        )


def consume(args: argparse.Namespace) -> int:
    import time

    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    conf = {
        "bootstrap.servers": args.bootstrap_server,
        "group.id": args.group or "gregor-console-consumer",
        "enable.auto.commit": bool(args.group),
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.partition.eof": False,
    }
    consumer = connect.consumer(args, conf)
    if args.group:
        consumer.subscribe([args.topic])
    else:
        parts = _partitions(consumer, args)
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        consumer.assign([TopicPartition(args.topic, p, start) for p in parts])
    fmt = _consume_format(args)
    seen = 0
    last = time.monotonic()
    try:
        while args.max_messages < 0 or seen < args.max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                if args.timeout_ms >= 0 and (time.monotonic() - last) * 1000 > args.timeout_ms:
                    break
                continue
            if msg.error():
                print(f"error: {describe(msg.error())}", file=sys.stderr)
                continue
            last = time.monotonic()
            seen += 1
            if fmt == "json":
                print(
                    json.dumps(
                        {
                            "topic": msg.topic(),
                            "partition": msg.partition(),
                            "offset": msg.offset(),
                            "timestamp": msg.timestamp()[1],
                            "key": _text(msg.key()),
                            "value": _text(msg.value()),
                            "headers": {k: _text(v) for k, v in _pairs(msg.headers())},
                        }
                    ),
                    flush=True,
                )
            elif fmt == "kv":
                print(f"{_text(msg.key())}\t{_text(msg.value())}", flush=True)
            else:
                print(_text(msg.value()), flush=True)
    except KeyboardInterrupt:
        return 130  # as Kafka's console consumer ends on Ctrl-C, after leaving its group
    finally:
        consumer.close()
    return 0
