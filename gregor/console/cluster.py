"""What the console reads of a cluster, and the writes it may make, through confluent-kafka's
AdminClient and Producer (DescribeQuorum and DescribeLogDirs through `wire`). Every method
blocks: the app runs them on its thread pool.

Shapes are plain dataclasses the templates read; a failure is a ConsoleError (errors.py) that
names what went wrong, so a page answers it with a message and a status.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
)

from gregor.console import wire
from gregor.console.errors import BadInput, NotFound, Unavailable, kafka_error_name, kafka_text
from gregor.console.settings import ConsoleSettings

log = logging.getLogger("gregor.console")


@dataclass(frozen=True)
class BrokerRow:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass
class Health:
    """As `rpk cluster health`: healthy when no broker a replica names is down and every
    partition has a leader and its full ISR."""

    brokers_down: list[int] = field(default_factory=list)
    leaderless: list[str] = field(default_factory=list)
    under_replicated: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not (self.brokers_down or self.leaderless or self.under_replicated)


@dataclass
class Overview:
    cluster_id: str | None
    controller_id: int | None
    brokers: list[BrokerRow]
    health: Health
    topic_count: int
    partition_count: int
    quorum: wire.Quorum | None
    quorum_note: str | None  # why the quorum is not shown


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    log_start: int | None = None
    high_watermark: int | None = None
    size: int | None = None

    @property
    def messages(self) -> int | None:
        if self.log_start is None or self.high_watermark is None:
            return None
        return self.high_watermark - self.log_start


@dataclass
class TopicRow:
    name: str
    internal: bool
    partitions: list[PartitionRow]
    size: int | None = None

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if len(p.isr) < len(p.replicas))


@dataclass(frozen=True)
class ConfigRow:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    is_default: bool


def health_of(metadata: Any) -> Health:
    """The health of a cluster from one Metadata answer (pure)."""
    live = set(metadata.brokers)
    down: set[int] = set()
    out = Health()
    for t in sorted(metadata.topics.values(), key=lambda t: t.topic):
        for p in sorted(t.partitions.values(), key=lambda p: p.id):
            down.update(r for r in p.replicas if r not in live)
            if p.leader < 0:
                out.leaderless.append(f"{t.topic}-{p.id}")
            elif len(p.isrs) < len(p.replicas):
                out.under_replicated.append(f"{t.topic}-{p.id}")
    out.brokers_down = sorted(down)
    return out


class Cluster:
    """The console's clients of one cluster: one AdminClient, and a Producer made on the first
    produce."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.timeout_s = settings.request_timeout_s
        self.auth_error: str | None = None  # what an authentication failure said
        self.admin = AdminClient(settings.kafka_config(error_cb=self._on_error))
        self._producer: Producer | None = None

    def _on_error(self, error: Any) -> None:
        if error.name() in ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED") or error.fatal():
            self.auth_error = f"{error.str()} ({error.name()})"

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout_s)

    # -- reads ---------------------------------------------------------------------------------

    def metadata(self) -> Any:
        """Metadata of every topic: asking for one by name would create it on a cluster with
        auto.create.topics.enable."""
        try:
            return self.admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise Unavailable(f"the cluster did not answer: {kafka_text(exc)}") from None

    def overview(self) -> Overview:
        md = self.metadata()
        try:
            d = self.admin.describe_cluster(request_timeout=self.timeout_s).result()
            cluster_id, controller = d.cluster_id, (d.controller.id if d.controller else None)
            nodes = [BrokerRow(n.id, n.host, n.port, n.rack or None) for n in d.nodes]
        except KafkaException:  # DescribeCluster is Kafka 2.8+: Metadata says enough
            cluster_id, controller = md.cluster_id, md.controller_id
            nodes = [BrokerRow(b.id, b.host, b.port, None) for b in md.brokers.values()]
        quorum, note = self._quorum()
        if quorum is not None:  # the active controller is the quorum's leader (KRaft)
            controller = quorum.leader_id
        partitions = sum(len(t.partitions) for t in md.topics.values())
        return Overview(
            cluster_id, controller, sorted(nodes, key=lambda n: n.id), health_of(md),
            len(md.topics), partitions, quorum, note,
        )  # fmt: skip

    def _quorum(self) -> tuple[wire.Quorum | None, str | None]:
        reasons = []
        props = self.settings.client_config
        for address in self.settings.bootstrap.split(","):
            try:
                return wire.describe_quorum(address.strip(), self.timeout_s, props), None
            except wire.WireError as exc:
                reasons.append(str(exc))
        return None, "; ".join(reasons) or "no bootstrap address"

    def offsets(self, partitions: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
        """ListOffsets for `partitions` (OffsetSpec.latest() is the high watermark)."""
        if not partitions:
            return {}
        wanted = {TopicPartition(t, p): spec for t, p in partitions}
        out: dict[tuple[str, int], int] = {}
        try:
            futures = self.admin.list_offsets(wanted, request_timeout=self.timeout_s)
            for tp, future in futures.items():
                out[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException as exc:
            raise Unavailable(f"ListOffsets failed: {kafka_text(exc)}") from None
        return out

    def sizes(self, md: Any) -> dict[tuple[str, int], int] | None:
        """Each partition's size on its leader (DescribeLogDirs of every broker); None when
        no broker could be asked."""
        by_broker: dict[int, dict[tuple[str, int], int]] = {}
        props = self.settings.client_config
        for b in md.brokers.values():
            try:
                where = f"{b.host}:{b.port}"
                by_broker[b.id] = wire.partition_sizes(where, self.timeout_s, props)
            except wire.WireError as exc:
                log.info("DescribeLogDirs of broker %d: %s", b.id, exc)
        if not by_broker:
            return None
        out = {}
        for t in md.topics.values():
            for p in t.partitions.values():
                size = by_broker.get(p.leader, {}).get((t.topic, p.id))
                if size is not None:
                    out[(t.topic, p.id)] = size
        return out

    def topics(self, internal: bool) -> list[TopicRow]:
        md = self.metadata()
        sizes = self.sizes(md) or {}
        rows = []
        for t in sorted(md.topics.values(), key=lambda t: t.topic):
            if t.topic.startswith("__") and not internal:
                continue
            parts = [_partition_row(p) for p in sorted(t.partitions.values(), key=lambda p: p.id)]
            known = [
                sizes[(t.topic, p.partition)] for p in parts if (t.topic, p.partition) in sizes
            ]
            rows.append(
                TopicRow(t.topic, t.topic.startswith("__"), parts, sum(known) if known else None)
            )
        return rows

    def topic(self, name: str) -> TopicRow:
        md = self.metadata()
        t = md.topics.get(name)
        if t is None or (t.error is not None and t.error.name() == "UNKNOWN_TOPIC_OR_PART"):
            raise NotFound(f"there is no topic {name!r}")
        if t.error is not None and not t.partitions:
            raise Unavailable(f"topic {name!r}: {t.error.str()}")
        parts = [_partition_row(p) for p in sorted(t.partitions.values(), key=lambda p: p.id)]
        keys = [(name, p.partition) for p in parts]
        starts = self.offsets(keys, OffsetSpec.earliest())
        ends = self.offsets(keys, OffsetSpec.latest())
        sizes = self.sizes(md) or {}
        for p in parts:
            p.log_start, p.high_watermark = (
                starts.get((name, p.partition)),
                ends.get((name, p.partition)),
            )
            p.size = sizes.get((name, p.partition))
        known = [p.size for p in parts if p.size is not None]
        return TopicRow(name, name.startswith("__"), parts, sum(known) if known else None)

    def topic_configs(self, name: str) -> list[ConfigRow]:
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        try:
            entries = self.admin.describe_configs([resource], request_timeout=self.timeout_s)[
                resource
            ].result()
        except KafkaException as exc:
            if kafka_error_name(exc) == "UNKNOWN_TOPIC_OR_PART":
                raise NotFound(f"there is no topic {name!r}") from None
            raise Unavailable(f"DescribeConfigs failed: {kafka_text(exc)}") from None
        return [
            ConfigRow(
                e.name,
                e.value,
                _source_name(e.source),
                bool(e.is_read_only),
                bool(e.is_sensitive),
                bool(e.is_default),
            )  # fmt: skip
            for e in sorted(entries.values(), key=lambda e: e.name)
        ]

    # -- writes --------------------------------------------------------------------------------

    def set_topic_config(self, topic: str, key: str, value: str | None) -> None:
        """IncrementalAlterConfigs: SET `key` to `value`, or DELETE it (back to its default)
        when `value` is None."""
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry(key, value, incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        try:
            self.admin.incremental_alter_configs([resource], request_timeout=self.timeout_s)[
                resource
            ].result()
        except KafkaException as exc:
            name = kafka_error_name(exc)
            if name == "UNKNOWN_TOPIC_OR_PART":
                raise NotFound(f"there is no topic {topic!r}") from None
            raise BadInput(f"{key}: {kafka_text(exc)}") from None

    def produce(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
    ) -> tuple[int, int]:
        """One record, acknowledged by the cluster: its (partition, offset)."""
        if self._producer is None:
            self._producer = Producer(self.settings.kafka_config(**{"linger.ms": 0}))
        done: list[Any] = []
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers or None}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, on_delivery=lambda e, m: done.append((e, m)), **kwargs)
        except (KafkaException, BufferError) as exc:
            raise BadInput(f"the record was not sent: {kafka_text(exc)}") from None
        self._producer.flush(self.timeout_s)
        if not done:
            raise Unavailable(f"no acknowledgement in {self.timeout_s:g} s")
        error, message = done[0]
        if error is not None:
            raise BadInput(f"the record was refused: {error.str()} ({error.name()})")
        return message.partition(), message.offset()


def _partition_row(p: Any) -> PartitionRow:
    return PartitionRow(p.id, p.leader, list(p.replicas), list(p.isrs))


def _source_name(source: Any) -> str:
    """DescribeConfigs' source as words: 5 or ConfigSource.DEFAULT_CONFIG -> "default"."""
    try:
        name = ConfigSource(source).name
    except ValueError:
        name = str(source)
    return str(name).replace("_CONFIG", "").replace("_", " ").lower()
