"""Thin confluent-kafka plumbing for the mirror: clients built from a flow's settings, the admin
calls the tasks share (topics and their partition counts, broker counts, topic configs,
internal topics), and one-line error text.

librdkafka's own log lines are turned off (`log_level` 0) unless the user sets `log_level`:
the mirror reports what matters in its own lines, once, instead of one per reconnect.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from gregor.mirror.config import Flow
from gregor.mirror.source import ConfigEntry

log = logging.getLogger("gregor.mirror")

ADMIN_TIMEOUT_S = 30.0
REACH_TIMEOUT_S = 10.0


class MirrorError(RuntimeError):
    """A failure a task cannot carry on from; it is restarted after a backoff."""


def describe(error: BaseException) -> str:
    """One line for an exception, KafkaException's wrapped KafkaError made readable."""
    args = getattr(error, "args", ())
    inner = args[0] if args else None
    if isinstance(error, KafkaException) and inner is not None and hasattr(inner, "str"):
        return f"{inner.str()} ({inner.name()})"
    text = str(error) or type(error).__name__
    return text.splitlines()[0] if text else text


def _quiet(config: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(config)
    out.setdefault("log_level", 0)
    return out


def admin(config: Mapping[str, str]) -> AdminClient:
    return AdminClient(_quiet(config))


def producer(config: Mapping[str, str], **overrides: Any) -> Producer:
    out = _quiet(config)
    out.update(overrides)
    return Producer(out)


def consumer(config: Mapping[str, str], **overrides: Any) -> Consumer:
    out = _quiet(config)
    out.update(overrides)
    return Consumer(out)


def topic_partitions(client: Any, timeout_s: float = ADMIN_TIMEOUT_S) -> dict[str, int]:
    """Every topic of the cluster and its partition count (raises when it cannot be reached)."""
    metadata = client.list_topics(timeout=timeout_s)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def reach(client: Any, alias: str, bootstrap: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise a MirrorError naming the cluster when it does not answer within `timeout_s`."""
    try:
        client.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise MirrorError(f"cluster {alias} unreachable at {bootstrap}: {describe(e)}") from None


def reach_timeout_s(flow: Flow) -> float:
    """How long one attempt to reach a cluster waits: MirrorMaker's `admin.timeout.ms` when
    set (a whole number of ms), else REACH_TIMEOUT_S."""
    value = flow.props.get("admin.timeout.ms", ("", ""))[0].strip()
    return int(value) / 1000 if value.isdigit() and int(value) > 0 else REACH_TIMEOUT_S


def reach_both(flow: Flow, source_admin: Any, target_admin: Any) -> None:
    timeout_s = reach_timeout_s(flow)
    for side, client in (("source", source_admin), ("target", target_admin)):
        alias = flow.source if side == "source" else flow.target
        bootstrap = flow.client_config(side, "admin").get("bootstrap.servers", "")
        reach(client, alias, bootstrap, timeout_s)


def broker_count(client: Any, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    return max(1, len(client.list_topics(timeout=timeout_s).brokers))


def topic_configs(client: AdminClient, topic: str) -> list[ConfigEntry]:
    """A topic's configs as DescribeConfigs reports them."""
    futures = client.describe_configs([ConfigResource("topic", topic)])
    entries: list[ConfigEntry] = []
    for future in futures.values():
        for e in future.result(timeout=ADMIN_TIMEOUT_S).values():
            try:
                source = ConfigSource(e.source).name
            except ValueError:
                source = "UNKNOWN_CONFIG"
            entries.append(
                ConfigEntry(e.name, e.value, e.is_default, e.is_read_only, e.is_sensitive, source)
            )
    return entries


def capped_replication_factor(wanted: int, brokers: int, what: str, cluster: str) -> int:
    """`wanted`, or the cluster's broker count when it has fewer brokers (said in a log line);
    -1 leaves the choice to the broker."""
    if wanted == -1 or wanted <= brokers:
        return wanted
    log.warning(
        "%s: replication factor %d capped to %d, the number of brokers of %s",
        what,
        wanted,
        brokers,
        cluster,
    )
    return brokers


def ensure_internal_topic(
    client: AdminClient, topic: str, replication_factor: int, cluster: str
) -> None:
    """Create one of MirrorMaker's single-partition compacted topics unless it exists."""
    if topic in topic_partitions(client):
        return
    factor = capped_replication_factor(replication_factor, broker_count(client), topic, cluster)
    new = NewTopic(topic, 1, factor, config={"cleanup.policy": "compact"})
    for future in client.create_topics([new]).values():
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
            log.info("created %s on %s", topic, cluster)
        except KafkaException as e:
            if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise


# A topic this process has just created may be unknown to the broker asked for a while (its
# metadata is on its way there): such answers are waited out, not failed on.
_NOT_YET = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
)


def watermarks(consumer_: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """A partition's low and high watermarks, asked again every 100 ms while its broker does
    not know the partition yet, up to `timeout_s`. A task that fails and restarts here instead
    would start after the first offset syncs were written, and then (as MirrorMaker 2's store
    after a restart) keep only the latest of each partition."""
    pause = threading.Event()
    for _ in range(max(1, int(timeout_s * 10))):
        try:
            low, high = consumer_.get_watermark_offsets(tp, timeout=timeout_s)
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET:
                raise
            last = exc
        pause.wait(0.1)
    raise last


def read_to_end(consumer_: Consumer, topic: str, timeout_s: float = ADMIN_TIMEOUT_S) -> list[Any]:
    """Every record of `topic` (all partitions) from the start to the end seen now, with a
    consumer that has no group."""
    from confluent_kafka import OFFSET_BEGINNING

    metadata = consumer_.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return []
    ends: dict[int, int] = {}
    for p in metadata.partitions:
        low, high = watermarks(consumer_, TopicPartition(topic, p), timeout_s)
        if high > low:
            ends[p] = high
    if not ends:
        return []
    consumer_.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    out: list[Any] = []
    idle = 0
    while ends and idle < int(timeout_s * 10):
        batch = consumer_.consume(500, timeout=0.1)
        idle = 0 if batch else idle + 1
        out += [m for m in batch if m.error() is None]
        positions = consumer_.position([TopicPartition(topic, p) for p in ends])
        for tp in positions:
            if tp.offset >= ends[tp.partition]:
                ends.pop(tp.partition)
    if ends:
        raise MirrorError(f"{topic}: not read to its end in {timeout_s:.0f} s")
    return out
