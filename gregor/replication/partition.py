"""Partitions this broker hosts, and the replica manager that finds them.

A `Partition` is the leader's view of one partition: its log, leader epoch, replicas and ISR,
and the high watermark rule (HW = min LEO over the ISR). On a single node the ISR is the leader
alone, so the high watermark follows the log end offset after every append and `acks=all`
completes at once; followers (the replication issue) will add their fetch positions here.

Transactions: a transaction marker (COMMIT or ABORT control batch) comes from the transaction
coordinator through `write_txn_marker`; the last stable offset (LSO) is the high watermark or
the first offset of the oldest open transaction, whichever is lower, and read_committed reads
stop there.

Fetches that wait for data register a callback with `watch`; an append calls them. No I/O and
no event loop: the caller decides how to wait.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import (
    CODEC_BY_NAME,
    build_control_batch,
    recompress,
    require_keys,
)
from gregor.storage.config import LONG_MAX, LogConfig
from gregor.storage.log import AppendInfo, Log
from gregor.storage.log_manager import LogManager
from gregor.storage.producer_state import AppendOrigin
from gregor.storage.segment import FileSlice

Watcher = Callable[[], None]


@dataclass
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    min_insync_replicas: int = 1
    watchers: list[Watcher] = field(default_factory=list)

    def append_as_leader(self, records: memoryview | bytearray, acks: int, now_ms: int) -> AppendInfo:
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                errors.NOT_ENOUGH_REPLICAS,
                f"{self.topic}-{self.index}: ISR {self.isr} is smaller than "
                f"min.insync.replicas {self.min_insync_replicas}",
            )
        check_timestamps(records, self.log.config, now_ms, f"{self.topic}-{self.index}")
        if "compact" in self.log.config.cleanup_policy:
            # Every record of a compacted topic needs a key: the only other produce path that
            # decodes records.
            require_keys(records, f"{self.topic}-{self.index}")
        codec = self.log.config.compression_type
        if codec != "producer":
            # The topic fixes the codec: batches in another one are rewritten (the only path
            # where the broker decodes records on produce).
            records = recompress(records, CODEC_BY_NAME[codec])
        info = self.log.append(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        self.maybe_increment_high_watermark()
        self.notify()
        return info

    def write_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        now_ms: int,
    ) -> AppendInfo:
        """Append the COMMIT or ABORT marker that ends `producer_id`'s transaction here (its
        epoch and the coordinator epoch are checked by the producer state)."""
        batch = build_control_batch(producer_id, producer_epoch, coordinator_epoch, committed, now_ms)
        info = self.log.append(batch, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)
        self.maybe_increment_high_watermark()
        self.notify()
        return info

    def maybe_increment_high_watermark(self) -> None:
        # The ISR is this broker alone until followers exist: HW = our LEO.
        self.log.update_high_watermark(self.log.log_end_offset)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        committed_only: bool = True,
        min_one_batch: bool = True,
        read_committed: bool = False,
    ) -> FileSlice | None:
        """Whole batches from `offset`: up to the LSO for read_committed, the high watermark
        for other consumers (`committed_only`), the log end for followers."""
        if read_committed:
            upper = self.log.last_stable_offset
        else:
            upper = self.log.high_watermark if committed_only else self.log.log_end_offset
        return self.log.read(offset, max_bytes, upper, min_one_batch)

    def watch(self, watcher: Watcher) -> None:
        self.watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        try:
            self.watchers.remove(watcher)
        except ValueError:
            pass

    def notify(self) -> None:
        if self.watchers:
            waiting, self.watchers = self.watchers, []
            for w in waiting:
                w()


def check_timestamps(records: memoryview | bytearray, config: LogConfig, now_ms: int, where: str) -> None:
    """INVALID_TIMESTAMP for a CreateTime batch outside [now - message.timestamp.before.max.ms,
    now + message.timestamp.after.max.ms] (KIP-937), judged by the header: its base timestamp
    (the first record's) for the lower bound, its max timestamp for the upper one. Records are
    not decoded; a batch whose records are out of order in time may pass on its first one."""
    if config.log_append_time:
        return
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    if before >= now_ms and after >= LONG_MAX - now_ms:
        return  # the defaults (before: unbounded) with after at its max: nothing to check
    view = memoryview(records)
    pos = 0
    while pos + rb.HEADER_SIZE <= len(view):
        header = rb.read_header(view, pos)
        low = header.base_timestamp
        if header.attributes & rb.DELETE_HORIZON_FLAG or header.is_control:
            low = header.max_timestamp
        for ts in (low, header.max_timestamp):
            if ts != rb.NO_TIMESTAMP and not now_ms - before <= ts <= now_ms + after:
                raise KafkaError(
                    errors.INVALID_TIMESTAMP,
                    f"Timestamp {ts} of message with offset {header.base_offset} is out of range. "
                    f"The timestamp should be within [{now_ms - before}, {now_ms + after}] "
                    f"(topic partition {where}).",
                )
        pos += max(header.size, rb.HEADER_SIZE)


class ReplicaManager:
    """Every partition this broker leads, created and removed to match the metadata."""

    def __init__(self, node_id: int, logs: LogManager) -> None:
        self.node_id = node_id
        self.logs = logs
        self.partitions: dict[tuple[str, int], Partition] = {}

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def leader(self, topic: str, index: int) -> Partition:
        p = self.partitions.get((topic, index))
        if p is None:
            raise KafkaError(
                errors.UNKNOWN_TOPIC_OR_PARTITION,
                f"This server does not host this topic-partition: {topic}-{index}",
            )
        return p

    def ensure(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        replicas: list[int],
        config: LogConfig,
        min_insync_replicas: int,
    ) -> Partition:
        p = self.partitions.get((topic, index))
        if p is None:
            log = self.logs.get_or_create(topic, index, config)
            log.update_config(config)
            p = Partition(
                topic,
                index,
                topic_id,
                log,
                leader_id=self.node_id,
                replicas=list(replicas),
                isr=[r for r in replicas if r == self.node_id] or [self.node_id],
                min_insync_replicas=min_insync_replicas,
            )
            # Becoming leader starts our epoch at the log end, as Kafka's makeLeader does, so
            # OffsetForLeaderEpoch answers even before the first append of this epoch.
            log.leader_epochs.assign(p.leader_epoch, log.log_end_offset)
            p.maybe_increment_high_watermark()
            self.partitions[(topic, index)] = p
        else:
            p.log.update_config(config)
            p.min_insync_replicas = min_insync_replicas
            p.topic_id = topic_id
        return p

    def remove(self, topic: str, index: int) -> None:
        p = self.partitions.pop((topic, index), None)
        if p is not None:
            p.notify()
        self.logs.delete(topic, index)
