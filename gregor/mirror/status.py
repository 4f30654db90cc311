"""Where each enabled flow of an `mm2.properties` stands, read from the clusters alone (no
mirror process needs to run): `gregor mirror status`.

Per mirrored source partition: the source's end offset, the mirror's committed position (the
group `connect-mm2-A->B`'s committed offset at least once; with exactly-once support the
position stored on the target in `mm2-offsets.B.internal`), the lag in records between them
and the remote partition's end offset on the target. Per flow: the age of the newest
heartbeat replicated to the target (heartbeats are emitted into the source and mirrored like
data, so their age says how far behind replication is, and whether it runs at all). Per
consumer group with checkpoints: the age of its newest checkpoint.

`assemble` and the `*_age` functions are the sans-I/O core; `read_flow` does the reading with
clients the caller built (and checked reachable); `with_rates` adds what running mirrors
measured (replication latency, records/s, bytes/s) to the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gregor.mirror.config import Flow
from gregor.mirror.formats import Checkpoint, FormatError, Heartbeat
from gregor.mirror.status_metrics import Key, PartitionRates

TP = tuple[str, int]
HEARTBEATS_READ = 50  # the newest records of each heartbeats partition that are read


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    remote_topic: str
    source_end: int
    position: int | None  # the next source offset to copy; None: never committed
    lag: int
    target_end: int | None  # None: the remote topic does not exist yet
    # from running mirrors' metrics (`status_metrics`), None when not asked or not reported
    replication_latency_ms: float | None = None
    records_per_s: float | None = None
    bytes_per_s: float | None = None


@dataclass(frozen=True)
class GroupStatus:
    group: str
    partitions: int
    checkpoint_age_ms: int


@dataclass
class FlowStatus:
    flow: str
    exactly_once: bool
    heartbeat_age_ms: int | None
    partitions: list[PartitionStatus] = field(default_factory=list)
    groups: list[GroupStatus] = field(default_factory=list)


def lag(source_end: int, source_start: int, position: int | None) -> int:
    """Records not copied yet: from the position, or from the partition's start when the
    mirror never committed one (it starts there)."""
    start = source_start if position is None else max(position, source_start)
    return max(0, source_end - start)


def heartbeat_age(
    records: Iterable[tuple[bytes | None, bytes | None]], source_alias: str, now_ms: int
) -> int | None:
    """The age of the newest heartbeat emitted into `source_alias` among (key, value)
    records of the target's copy of its heartbeats topic; None when there is none."""
    newest: int | None = None
    for key, value in records:
        try:
            beat = Heartbeat.from_record(key or b"", value or b"")
        except FormatError:
            continue
        if beat.target_cluster_alias == source_alias:
            newest = beat.timestamp if newest is None else max(newest, beat.timestamp)
    return None if newest is None else max(0, now_ms - newest)


def checkpoint_ages(
    records: Iterable[tuple[bytes | None, bytes | None, int]], now_ms: int
) -> list[GroupStatus]:
    """Per group, from the (key, value, timestamp) records of a checkpoints topic: the
    partitions it has checkpoints for and the age of its newest checkpoint."""
    partitions: dict[str, set[TP]] = {}
    newest: dict[str, int] = {}
    for key, value, timestamp in records:
        try:
            cp = Checkpoint.from_record(key or b"", value or b"")
        except FormatError:
            continue
        partitions.setdefault(cp.group, set()).add((cp.topic, cp.partition))
        newest[cp.group] = max(newest.get(cp.group, timestamp), timestamp)
    return [
        GroupStatus(group, len(tps), max(0, now_ms - newest[group]))
        for group, tps in sorted(partitions.items())
    ]


def assemble(
    flow: Flow,
    source: Mapping[TP, tuple[int, int]],
    positions: Mapping[TP, int],
    target_ends: Mapping[TP, int],
) -> list[PartitionStatus]:
    """Rows per source partition from its (start, end) offsets, the committed positions and
    the remote partitions' end offsets (keyed by remote topic-partition)."""
    rows = []
    for (topic, partition), (start, end) in sorted(source.items()):
        remote = flow.remote_topic(topic)
        position = positions.get((topic, partition))
        rows.append(
            PartitionStatus(
                topic,
                partition,
                remote,
                end,
                position,
                lag(end, start, position),
                target_ends.get((remote, partition)),
            )
        )
    return rows


def with_rates(
    status: FlowStatus, source: str, target: str, rates: Mapping[Key, PartitionRates]
) -> None:
    """Each row of `status` (flow source->target) with what running mirrors measured of its
    remote partition; a partition no process reported gets rates of 0 and no latency."""
    none = PartitionRates(None, 0.0, 0.0)
    status.partitions = [
        replace(
            p,
            replication_latency_ms=r.replication_latency_ms,
            records_per_s=r.records_per_s,
            bytes_per_s=r.bytes_per_s,
        )
        for p in status.partitions
        for r in [rates.get((source, target, p.remote_topic, p.partition), none)]
    ]


# The reading.


def _watermarks(consumer: Any, tps: Iterable[TP], timeout_s: float) -> dict[TP, tuple[int, int]]:
    from confluent_kafka import TopicPartition

    return {
        tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout_s) for tp in tps
    }


def _partitions(admin: Any, timeout_s: float) -> dict[str, int]:
    from gregor.mirror.clients import topic_partitions

    return topic_partitions(admin, timeout_s)


def _group_positions(admin: Any, group: str, timeout_s: float) -> dict[TP, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
    )
    result = futures[group].result(timeout=timeout_s)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.offset >= 0 and tp.error is None
    }


def _tail(consumer: Any, topic: str, partitions: int, count: int, timeout_s: float) -> list[Any]:
    """The last `count` records of each partition of `topic`."""
    from confluent_kafka import TopicPartition

    from gregor.mirror.clients import MirrorError

    ends: dict[int, int] = {}
    starts = []
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
        if high > low:
            ends[p] = high
            starts.append(TopicPartition(topic, p, max(low, high - count)))
    if not ends:
        return []
    consumer.assign(starts)
    out: list[Any] = []
    idle = 0
    while ends and idle < int(timeout_s * 10):
        batch = consumer.consume(500, timeout=0.1)
        idle = 0 if batch else idle + 1
        out += [m for m in batch if m.error() is None]
        # by position, not by the last record: a transaction's marker may end the partition
        for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
            if tp.offset >= ends[tp.partition]:
                ends.pop(tp.partition)
    consumer.unassign()
    if ends:
        raise MirrorError(f"{topic}: not read to its end in {timeout_s:g} s")
    return out


def read_flow(
    flow: Flow,
    source_admin: Any,
    source_consumer: Any,
    target_admin: Any,
    target_consumer: Any,
    now_ms: int,
    timeout_s: float,
) -> FlowStatus:
    """Everything `gregor mirror status` shows of one flow; the consumers are assign-only
    (read_committed on the target)."""
    from gregor.mirror.clients import read_to_end
    from gregor.mirror.exactly_once import stored_positions
    from gregor.mirror.replicator import source_group

    topics = {t: n for t, n in _partitions(source_admin, timeout_s).items()}
    mirrored = {t: n for t, n in topics.items() if flow.should_replicate_topic(t)}
    source_tps = [(t, p) for t, n in sorted(mirrored.items()) for p in range(n)]
    source = _watermarks(source_consumer, source_tps, timeout_s)
    if flow.exactly_once:
        last = stored_positions(target_consumer, flow, timeout_s)
        positions = {tp: offset + 1 for tp, offset in last.items()}
    else:
        positions = _group_positions(source_admin, source_group(flow), timeout_s)
    target_topics = _partitions(target_admin, timeout_s)
    remote_tps = [
        (flow.remote_topic(t), p)
        for t, p in source_tps
        if p < target_topics.get(flow.remote_topic(t), 0)
    ]
    target_ends = {
        tp: high for tp, (_, high) in _watermarks(target_consumer, remote_tps, timeout_s).items()
    }
    status = FlowStatus(flow.name, flow.exactly_once, None)
    status.partitions = assemble(flow, source, positions, target_ends)
    beats = flow.remote_topic(flow.policy.heartbeats_topic())
    if beats in target_topics:
        tail = _tail(target_consumer, beats, target_topics[beats], HEARTBEATS_READ, timeout_s)
        status.heartbeat_age_ms = heartbeat_age(
            ((m.key(), m.value()) for m in tail), flow.source, now_ms
        )
    if flow.checkpoints_topic in target_topics:
        records = read_to_end(target_consumer, flow.checkpoints_topic, timeout_s)
        status.groups = checkpoint_ages(
            ((m.key(), m.value(), m.timestamp()[1]) for m in records), now_ms
        )
    return status
