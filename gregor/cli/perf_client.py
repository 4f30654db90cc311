"""The clients of `gregor perf`: their config (the tool's defaults, --command-config, the
role's config file and props, -b), their construction in one place (`make_client`), and the
wait for the topic's metadata, with librdkafka's errors turned into one line (`PerfError`).
librdkafka's log lines go to Python logging, shown only with --verbose."""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
import time
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# librdkafka reports a refused connection at every retry; the first few name the cause.
MAX_ERRORS = 20


class PerfError(Exception):
    """A failure the user can act on: printed as one line, exit status 1."""


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
    for path in (args.command_config, getattr(args, f"{role}_config")):
        if path:
            conf |= _read_properties(path)
    for item in getattr(args, f"{role}_props"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PerfError(f"--{role}-props expects KEY=VALUE, got {item!r} (e.g. acks=1)")
        conf[key.strip()] = value.strip()
    if args.bootstrap_server:
        conf["bootstrap.servers"] = args.bootstrap_server
    conf.setdefault("bootstrap.servers", DEFAULT_BOOTSTRAP)
    if role == "consumer" and args.group:
        conf["group.id"] = args.group
    return conf


def make_client(args: argparse.Namespace, role: str, errors: list[str]) -> Any:
    """The one place a perf client is built. librdkafka's first MAX_ERRORS errors are appended
    to `errors` (a connection failure among them names the cause); its log lines go to Python
    logging."""
    from confluent_kafka import Consumer, KafkaException, Producer

    conf = client_config(args, role)

    def on_error(err: Any) -> None:
        if len(errors) < MAX_ERRORS:
            errors.append(err.str())

    conf["error_cb"] = on_error
    conf["logger"] = _librdkafka_logger(args.verbose)
    try:
        return Producer(conf) if role == "producer" else Consumer(conf)
    except KafkaException as exc:
        raise PerfError(f"bad {role} config: {exc.args[0].str()}") from None


def bootstrap_of(args: argparse.Namespace, role: str) -> str:
    return str(client_config(args, role)["bootstrap.servers"])


def _read_properties(path: str) -> dict[str, str]:
    from gregor.broker.config import read_properties

    try:
        return read_properties(path)
    except OSError as exc:
        raise PerfError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PerfError(f"cannot read {path}: not a text file") from None


def _librdkafka_logger(verbose: bool) -> logging.Logger:
    log = logging.getLogger("gregor.perf.librdkafka")
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.StreamHandler(sys.stderr) if verbose else logging.NullHandler())
    log.setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    return log


def check_topic(
    client: Any, bootstrap: str, topic: str, timeout_ms: int, errors: list[str]
) -> None:
    """Wait until the topic's metadata answers without error (a topic just created may first
    answer LEADER_NOT_AVAILABLE), or fail in one line: the bootstrap cannot be reached, the
    topic does not exist, or it still answers an error at the deadline."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() * 1000 + timeout_ms
    while True:
        left_s = max(0.0, (deadline - time.monotonic() * 1000) / 1000)
        try:
            md = client.list_topics(topic, timeout=left_s)
        except KafkaException:
            client.poll(0)  # serves error_cb
            reason = _reach_reason(errors, timeout_ms)
            raise PerfError(f"cannot reach {bootstrap} ({reason})") from None
        err = md.topics[topic].error if topic in md.topics else None
        if err is None and topic in md.topics:
            return
        if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise PerfError(
                f"topic {topic} does not exist (create it: gregor topics create {topic})"
            )
        if (err is not None and not err.retriable()) or time.monotonic() * 1000 >= deadline:
            raise PerfError(f"topic {topic}: {err.str() if err else 'no metadata'}")
        time.sleep(0.1)


def _reach_reason(errors: list[str], timeout_ms: int) -> str:
    """'connection refused' from librdkafka's 'Connect to ipv4#... failed: Connection refused
    (after 0ms in state CONNECT)', and the like for name resolution."""
    for text in errors:
        m = re.search(r"(?:failed|Failed to resolve '[^']*'): (.+?)(?: \(after \d+ms .*)?$", text)
        if m:
            reason = m.group(1)
            return reason[0].lower() + reason[1:]
    return f"no answer within {timeout_ms} ms"
