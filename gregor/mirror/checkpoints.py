"""The checkpoint task of one flow A->B (MirrorCheckpointTask), as I/O around `offsets`:

- reads `mm2-offset-syncs.B.internal` (where `offset-syncs.topic.location` puts it) into an
  `OffsetSyncStore`, from the start and then as syncs arrive;
- every `emit.checkpoints.interval.seconds`, for A's consumer groups that `groups` /
  `groups.exclude` accept, translates their committed offsets and writes the checkpoints that
  moved to B's `A.checkpoints.internal`;
- with `sync.group.offsets.enabled`, every `sync.group.offsets.interval.seconds`, commits the
  translated offsets to B's groups of the same name that have no active members, never moving
  a group back (AdminClient's alter_consumer_group_offsets).
"""

from __future__ import annotations

import logging

from confluent_kafka import (
    OFFSET_BEGINNING,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)

from gregor.clock import Clock
from gregor.mirror import clients
from gregor.mirror.config import Flow
from gregor.mirror.filters import should_checkpoint_group
from gregor.mirror.formats import Checkpoint, FormatError, OffsetSync
from gregor.mirror.metrics import MirrorMetrics
from gregor.mirror.offsets import OffsetSyncStore, checkpoints_for_group, offsets_to_sync

log = logging.getLogger("gregor.mirror")

TP = tuple[str, int]
_IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


def _group_id(flow: Flow) -> str:
    return f"connect-mm2-{flow.name}-checkpoints"


class CheckpointTask:
    def __init__(self, flow: Flow, clock: Clock, metrics: MirrorMetrics | None = None):
        self.flow = flow
        self.clock = clock
        self.metrics = metrics
        on_source = flow.get("offset-syncs.topic.location") == "source"
        syncs_side = "source" if on_source else "target"
        self.syncs_cluster = flow.source if on_source else flow.target
        self.source_admin = clients.admin(flow.client_config("source", "admin"))
        self.target_admin = clients.admin(flow.client_config("target", "admin"))
        self.syncs_reader = clients.consumer(
            flow.client_config(syncs_side, "consumer"), **{"group.id": _group_id(flow)}
        )
        self.checkpoints_reader = clients.consumer(
            flow.client_config("target", "consumer"), **{"group.id": _group_id(flow)}
        )
        self.producer = clients.producer(flow.client_config("target", "producer"))
        self.store: OffsetSyncStore | None = None
        self.syncs_end: int | None = None
        self.latest: dict[str, dict[TP, Checkpoint]] = {}  # group -> renamed tp -> checkpoint
        self.next_checkpoint_ms = 0
        self.next_group_sync_ms = 0

    def start(self) -> None:
        flow = self.flow
        clients.reach_both(flow, self.source_admin, self.target_admin)
        syncs_admin = self.source_admin if self.syncs_cluster == flow.source else self.target_admin
        clients.ensure_internal_topic(
            syncs_admin,
            flow.offset_syncs_topic,
            flow.get("offset-syncs.topic.replication.factor"),
            self.syncs_cluster,
        )
        clients.ensure_internal_topic(
            self.target_admin,
            flow.checkpoints_topic,
            flow.get("checkpoints.topic.replication.factor"),
            flow.target,
        )
        for m in clients.read_to_end(self.checkpoints_reader, flow.checkpoints_topic):
            try:
                cp = Checkpoint.from_record(m.key() or b"", m.value() or b"")
            except FormatError:
                continue
            self.latest.setdefault(cp.group, {})[(cp.topic, cp.partition)] = cp
        self.checkpoints_reader.close()
        self.store = OffsetSyncStore(must_read_to_end=not self.latest)
        tp = TopicPartition(flow.offset_syncs_topic, 0)
        _, self.syncs_end = clients.watermarks(self.syncs_reader, tp, clients.ADMIN_TIMEOUT_S)
        self.syncs_reader.assign([TopicPartition(flow.offset_syncs_topic, 0, OFFSET_BEGINNING)])

    def _read_syncs(self) -> None:
        assert self.store is not None
        for m in self.syncs_reader.consume(1000, timeout=0.1):
            if m.error() is not None:
                continue
            try:
                self.store.add(OffsetSync.from_record(m.key() or b"", m.value() or b""))
            except FormatError:
                continue
        if not self.store.is_read_to_end and self.syncs_end is not None:
            (position,) = self.syncs_reader.position(
                [TopicPartition(self.flow.offset_syncs_topic, 0)]
            )
            if position.offset >= self.syncs_end or self.syncs_end == 0:
                self.store.read_to_end()

    def step(self) -> None:
        self._read_syncs()
        assert self.store is not None
        if not self.store.is_read_to_end:
            return
        now = self.clock.now_ms()
        if self.flow.get("emit.checkpoints.enabled") and now >= self.next_checkpoint_ms:
            self.emit_checkpoints()
            self.next_checkpoint_ms = (
                now + self.flow.get("emit.checkpoints.interval.seconds") * 1000
            )
        if self.flow.get("sync.group.offsets.enabled") and now >= self.next_group_sync_ms:
            self.sync_group_offsets()
            self.next_group_sync_ms = (
                now + self.flow.get("sync.group.offsets.interval.seconds") * 1000
            )

    def _source_groups(self) -> list[str]:
        listing = self.source_admin.list_consumer_groups().result(timeout=clients.ADMIN_TIMEOUT_S)
        own = f"connect-mm2-{self.flow.name}"
        return sorted(
            g.group_id
            for g in listing.valid
            if self.flow.group_filter.accepts(g.group_id) and not g.group_id.startswith(own)
        )

    def _committed(self, admin: object, group: str) -> dict[TP, tuple[int, str]]:
        request = [ConsumerGroupTopicPartitions(group)]
        futures = admin.list_consumer_group_offsets(request)  # type: ignore[attr-defined]
        result = futures[group].result(timeout=clients.ADMIN_TIMEOUT_S)
        return {
            (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
            for tp in result.topic_partitions
            if tp.offset >= 0 and tp.error is None
        }

    def emit_checkpoints(self) -> None:
        assert self.store is not None
        flow = self.flow
        made_ms = self.clock.now_ms()  # as MirrorCheckpointTask: before reading the offsets
        written: list[tuple[str, tuple[str, int]]] = []
        for group in self._source_groups():
            committed = self._committed(self.source_admin, group)
            topics = sorted({t for t, _ in committed})
            if not should_checkpoint_group(group, topics, flow.group_filter, flow.topic_filter):
                continue
            previous = self.latest.get(group, {})
            new = checkpoints_for_group(
                group,
                committed,
                self.store,
                flow.topic_filter,
                flow.policy,
                flow.source,
                flow.target,
                previous,
            )
            for renamed, cp in new.items():
                self.producer.produce(
                    flow.checkpoints_topic, cp.record_value(), cp.record_key(), partition=0
                )
                self.latest.setdefault(group, {})[renamed] = cp
                written.append((group, renamed))
        if written:
            left = self.producer.flush(clients.ADMIN_TIMEOUT_S)
            if left:
                raise clients.MirrorError(f"{flow.name}: {left} checkpoints not acknowledged")
            if self.metrics is not None:
                now = self.clock.now_ms()
                for group, tp in written:
                    self.metrics.checkpoint_written(
                        flow.source, flow.target, group, tp, now - made_ms, now
                    )

    def sync_group_offsets(self) -> None:
        """Commit the latest checkpoints to B's idle groups of the same name."""
        target_topics = clients.topic_partitions(self.target_admin)
        for group, checkpoints in sorted(self.latest.items()):
            converted = {
                tp: cp.downstream_offset
                for tp, cp in checkpoints.items()
                if tp[1] < target_topics.get(tp[0], 0)
            }
            if not converted:
                continue
            description = self.target_admin.describe_consumer_groups([group])[group].result(
                timeout=clients.ADMIN_TIMEOUT_S
            )
            if description.state not in _IDLE_STATES:
                continue  # a consumer is active in B: its own commits win
            exists = description.state != ConsumerGroupState.DEAD
            current = self._committed(self.target_admin, group) if exists else None
            target_committed = {tp: o for tp, (o, _) in current.items()} if current else None
            changes = offsets_to_sync(converted, target_committed)
            if not changes:
                continue
            request = ConsumerGroupTopicPartitions(
                group, [TopicPartition(t, p, o) for (t, p), o in sorted(changes.items())]
            )
            try:
                result = self.target_admin.alter_consumer_group_offsets([request])[group].result(
                    timeout=clients.ADMIN_TIMEOUT_S
                )
                refused = [tp.error for tp in result.topic_partitions if tp.error is not None]
                if refused:  # the whole commit is refused partition by partition
                    raise KafkaException(refused[0])
            except KafkaException as e:  # e.g. a consumer joined meanwhile
                log.info(
                    "%s: offsets of group %s not synced: %s",
                    self.flow.name,
                    group,
                    clients.describe(e),
                )

    def close(self, clean: bool) -> None:
        self.producer.flush(5 if clean else 0)
        self.syncs_reader.close()
