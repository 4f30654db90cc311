"""The source task of one flow A->B: consume A's mirrored topics in the consumer group
`connect-mm2-A->B` on A, produce each record to the same partition of its remote topic on B
(key, value, headers, timestamp; idempotent producer, acks=all, so order is kept), and emit
offset syncs from the delivery reports.

At least once: A's positions are the group's committed offsets, committed (every
`offset.flush.interval.ms`, on a rebalance and at a clean stop) only after every record
consumed so far was acknowledged by B. A failed delivery stops the task without committing; it
restarts from the last commit, so a record may be copied twice but never lost, SIGKILL or not.
Several `gregor mirror` processes with the same config share a flow's partitions through the
group, which rebalances them when one joins or dies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from gregor.clock import Clock
from gregor.mirror import clients
from gregor.mirror.clients import MirrorError
from gregor.mirror.config import Flow
from gregor.mirror.metrics import MirrorMetrics
from gregor.mirror.offsets import OffsetSyncEmitter
from gregor.mirror.policy import DefaultReplicationPolicy
from gregor.mirror.source import SourceRecord, convert_record
from gregor.mirror.task_metrics import MeasuredSource
from gregor.mirror.topics import TopicSync

log = logging.getLogger("gregor.mirror")

FLUSH_TIMEOUT_S = 30.0
UNKNOWN_PARTITION_WAIT_S = 30.0
MAX_SYNCS_IN_FLIGHT = 1000


def source_group(flow: Flow) -> str:
    """The consumer group on the source that holds flow A->B's positions: `connect-mm2-A->B`
    (Connect names its consumers' groups `connect-<name>`, and MirrorMaker's default
    `groups.exclude` leaves them out of checkpoints)."""
    return f"connect-mm2-{flow.name}"


def _source_record(m: Any) -> SourceRecord:
    kind, timestamp = m.timestamp()
    headers = tuple(m.headers() or ())
    return SourceRecord(
        m.topic(), m.partition(), m.offset(), timestamp, m.key(), m.value(), headers
    )


def _usable(m: Any) -> bool:
    """False for the consumer's error events (skipped), a fatal one raised."""
    error = m.error()
    if error is None:
        return True
    if error.fatal():
        raise KafkaException(error)
    return False


def _chunks(batch: list[Any]) -> list[tuple[str, int, int, int]]:
    """The batch as runs of consecutive records of one partition: (topic, partition, start,
    end) with `batch[start:end]` the run; error events are left out."""
    out: list[tuple[str, int, int, int]] = []
    topic, partition, start = "", -1, 0
    for i, m in enumerate(batch):
        if m.error() is not None:
            _usable(m)
            if i > start:
                out.append((topic, partition, start, i))
            topic, partition, start = "", -1, i + 1
            continue
        t, p = m.topic(), m.partition()
        if p != partition or t != topic:
            if i > start:
                out.append((topic, partition, start, i))
            topic, partition, start = t, p, i
    if len(batch) > start:
        out.append((topic, partition, start, len(batch)))
    return out


class SourceTask(MeasuredSource):
    """Flow A->B's records, A to B. `step()` does one round; `close()` stops cleanly."""

    def __init__(
        self,
        flow: Flow,
        clock: Clock,
        flush_interval_ms: int = 1000,
        metrics: MirrorMetrics | None = None,
    ):
        self.flow = flow
        self.clock = clock
        self.flush_interval_ms = flush_interval_ms
        refresh_ms = max(1000, min(300_000, flow.get("refresh.topics.interval.seconds") * 1000))
        self.source_admin = clients.admin(flow.client_config("source", "admin"))
        self.target_admin = clients.admin(flow.client_config("target", "admin"))
        self.topics = TopicSync(flow, self.source_admin, self.target_admin)
        self.producer = clients.producer(
            flow.client_config("target", "producer"),
            **{"enable.idempotence": True, "acks": "all"},
            **{"topic.metadata.refresh.interval.ms": refresh_ms},
        )
        self.consumer = clients.consumer(
            flow.client_config("source", "consumer"),
            **{"group.id": source_group(flow), "topic.metadata.refresh.interval.ms": refresh_ms},
        )
        on_source = flow.get("offset-syncs.topic.location") == "source"
        side = "source" if on_source else "target"
        self.syncs_cluster = flow.source if on_source else flow.target
        self.syncs_admin = self.source_admin if on_source else self.target_admin
        self.syncs_producer = clients.producer(flow.client_config(side, "producer"))
        self.emit_syncs = bool(flow.get("emit.offset-syncs.enabled"))
        # syncs in flight: more than MirrorMaker's 10, as deliveries arrive here in bursts and
        # a sync overwritten while waiting for a slot would coarsen translation
        self.emitter = OffsetSyncEmitter(flow.get("offset.lag.max"), MAX_SYNCS_IN_FLIGHT)
        self.consumed: dict[tuple[str, int], int] = {}  # next offset to commit, per partition
        self.failure: str | None = None
        self.subscribed: list[str] = []
        self.next_refresh_ms = 0
        self.next_config_sync_ms = 0
        self.next_acl_sync_ms = 0
        self.next_flush_ms = 0
        self.records = 0
        # under DefaultReplicationPolicy a copy differs from its source only by its topic name
        self.renames_only = type(flow.policy) is DefaultReplicationPolicy
        self.remote_names: dict[str, str] = {}
        self._init_metrics(metrics)

    def start(self) -> None:
        """Reach both clusters and create the offset-syncs topic (raises when unreachable)."""
        flow = self.flow
        clients.reach_both(flow, self.source_admin, self.target_admin)
        if self.emit_syncs:
            clients.ensure_internal_topic(
                self.syncs_admin,
                self.flow.offset_syncs_topic,
                self.flow.get("offset-syncs.topic.replication.factor"),
                self.syncs_cluster,
            )
        self._refresh(self.clock.now_ms())

    def _refresh(self, now_ms: int) -> None:
        topics = sorted(self.topics.refresh())
        if now_ms >= self.next_config_sync_ms:
            self.topics.sync_configs(topics)
            self.next_config_sync_ms = (
                now_ms + self.flow.get("sync.topic.configs.interval.seconds") * 1000
            )
        if now_ms >= self.next_acl_sync_ms:
            self.topics.sync_acls()
            self.next_acl_sync_ms = (
                now_ms + self.flow.get("sync.topic.acls.interval.seconds") * 1000
            )
        if topics != self.subscribed:
            added = sorted(set(topics) - set(self.subscribed))
            if added:
                log.info("%s: mirroring %s", self.flow.name, ", ".join(added))
            self.subscribed = topics
            if topics:
                self.consumer.subscribe(
                    topics, on_assign=self._on_assign, on_revoke=self._on_revoke
                )
            else:
                self.consumer.unsubscribe()
        interval = self.flow.get("refresh.topics.interval.seconds") * 1000
        enabled = self.flow.get("refresh.topics.enabled")
        self.next_refresh_ms = now_ms + interval if enabled else 2**62

    def step(self) -> None:
        now = self.clock.now_ms()
        if now >= self.next_refresh_ms:
            self._refresh(now)
        batch = self._consume() if self.subscribed else []
        if not self.subscribed:
            self.clock.sleep(0.1)
        clean = True
        if self.renames_only:
            copied = 0
            for topic, partition, start, end in _chunks(batch):
                self._copy_chunk(batch, topic, partition, start, end)
                copied += end - start
            clean = copied == len(batch)
        else:
            for m in batch:
                if _usable(m):
                    self._copy(m)
                else:
                    clean = False
        self.producer.poll(0)
        self._send_syncs()
        if self.failure is not None:
            raise MirrorError(self.failure)
        if self.clock.now_ms() >= self.next_flush_ms:
            self.flush()
        if self.tracker is not None:
            self._measure(batch if clean else [m for m in batch if m.error() is None])

    def _copy_chunk(
        self, batch: list[Any], topic: str, partition: int, start: int, end: int
    ) -> None:
        """Copy `batch[start:end]`, consecutive records of one partition, to its remote topic.
        Only the first and the last record carry a delivery callback: B appends a producer's
        records of a partition in order, so when the last lands `count - 1` offsets after the
        first, every record between landed too (any other gap fails the task, which then copies
        again from the last commit)."""
        tp = (topic, partition)
        count = end - start
        self.consumed[tp] = batch[end - 1].offset() + 1
        remote = self.remote_names.get(topic)
        if remote is None:
            remote = self.remote_names[topic] = self.flow.remote_topic(topic)
        producer = self._producer_for(tp)
        first_cb, last_cb = self._chunk_callbacks(batch, tp, start, end)
        self._copy_one(producer, remote, partition, batch[start], first_cb)
        produce = producer.produce
        for i in range(start + 1, end - 1):
            m = batch[i]
            ts = m.timestamp()[1]
            try:  # positional: (topic, value, key, partition, callback, on_delivery,
                # timestamp, headers), parsed in half the time keywords take
                produce(
                    remote,
                    m.value(),
                    m.key(),
                    partition,
                    None,
                    None,
                    ts if ts > 0 else 0,
                    m.headers(),
                )
            except (BufferError, KafkaException):  # full, or a partition not known yet
                self._produce(
                    producer, remote, partition, m.key(), m.value(), m.headers(), ts, None
                )
        if count > 1:
            self._copy_one(producer, remote, partition, batch[end - 1], last_cb)
        self.records += count

    def _copy_one(
        self,
        producer: Any,
        remote: str,
        partition: int,
        m: Any,
        callback: Callable[[Any, Any], None],
    ) -> None:
        ts = m.timestamp()[1]
        self._produce(producer, remote, partition, m.key(), m.value(), m.headers(), ts, callback)

    def _chunk_callbacks(
        self, batch: list[Any], tp: tuple[str, int], start: int, end: int
    ) -> tuple[Callable[[Any, Any], None], Callable[[Any, Any], None]]:
        """The delivery callbacks of a chunk's first and last records (one record: the same)."""
        count = end - start
        first_upstream = batch[start].offset()
        upstreams: list[int] | None = None
        if batch[end - 1].offset() - first_upstream != count - 1:  # compacted, or markers
            upstreams = [m.offset() for m in batch[start:end]]
        first_downstream: list[int] = []

        def first(err: Any, msg: Any) -> None:
            if err is not None:
                self._failed(tp, err)
            else:
                first_downstream.append(msg.offset())

        def last(err: Any, msg: Any) -> None:
            if err is not None:
                self._failed(tp, err)
                return
            if count > 1 and not first_downstream:
                return  # the first failed: reported already
            downstream = first_downstream[0] if count > 1 else msg.offset()
            if msg.offset() - downstream != count - 1:
                if self.failure is None:
                    self.failure = (
                        f"{self.flow.name}: {count} records of {tp[0]}-{tp[1]} landed at "
                        f"offsets {downstream} to {msg.offset()} of {msg.topic()}"
                    )
                return
            self._written_run(tp, first_upstream, upstreams, downstream, count)

        return (last if count == 1 else first), last

    def _failed(self, tp: tuple[str, int], err: Any) -> None:
        if self.failure is None:
            self.failure = f"{self.flow.name}: a record of {tp[0]} not written: {err.str()}"

    def _consume(self) -> list[Any]:
        """Up to 500 records: waits up to 100 ms for the first, not for the rest (a batch
        call would wait for all 500, delaying a trickle of records by the whole timeout)."""
        first = self.consumer.poll(0.1)
        if first is None:
            return []
        return [first, *self.consumer.consume(499, timeout=0)]

    def _copy(self, m: Any) -> None:
        topic, partition, offset = m.topic(), m.partition(), m.offset()
        tp = (topic, partition)
        self.consumed[tp] = offset + 1
        callback = self._on_delivery(tp, offset)
        producer = self._producer_for(tp)
        if self.renames_only:  # the common case, without building records
            remote = self.remote_names.get(topic)
            if remote is None:
                remote = self.remote_names[topic] = self.flow.remote_topic(topic)
            timestamp = m.timestamp()[1]
            self._produce(
                producer, remote, partition, m.key(), m.value(), m.headers(), timestamp, callback
            )
        else:
            r = convert_record(
                _source_record(m), self.flow.policy, self.flow.source, self.flow.target
            )
            if r is None:  # it came from the target (provenance): never copied back
                if self.tracker is not None:
                    self._measure_skipped(tp, m)
                return
            headers = list(r.headers) or None
            self._produce(
                producer, r.topic, r.partition, r.key, r.value, headers, r.timestamp, callback
            )
        self.records += 1

    def _producer_for(self, tp: tuple[str, int]) -> Any:
        return self.producer

    def _produce(
        self,
        producer: Any,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[Any] | None,
        timestamp: int,
        callback: Callable[[Any, Any], None] | None,
    ) -> None:
        waited_s = 0.0
        while True:
            try:
                ts = timestamp if timestamp > 0 else 0
                producer.produce(topic, value, key, partition, callback, None, ts, headers)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as e:
                if e.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                    raise
                if waited_s >= UNKNOWN_PARTITION_WAIT_S:
                    raise MirrorError(
                        f"{topic} has no partition {partition} on {self.flow.target}"
                    ) from None
                # A grew before our refresh saw it: grow B now, then wait for the metadata
                self.topics.refresh()
                producer.list_topics(topic, timeout=5)
                self.clock.sleep(0.2)
                waited_s += 0.2

    def _on_delivery(self, tp: tuple[str, int], upstream: int) -> Callable[[Any, Any], None]:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self._failed(tp, err)
                return
            self._written_run(tp, upstream, None, msg.offset(), 1)

        return delivered

    def _written_run(
        self,
        tp: tuple[str, int],
        upstream: int,
        upstreams: list[int] | None,
        downstream: int,
        count: int,
    ) -> None:
        """B acknowledged `count` copies of `tp`, written at `downstream` onwards: upstream
        offsets `upstream` onwards, or the list `upstreams` where A's offsets have gaps."""
        if not self.emit_syncs:  # the metrics' acknowledged position (offset syncs keep it)
            self.acked[tp] = upstreams[-1] if upstreams is not None else upstream + count - 1
            return
        if upstreams is None:
            while count:  # a piece at a time: each sync that falls due is sent
                if self.emitter.pending:
                    self._send_syncs()
                taken = self.emitter.run_written(tp, upstream, downstream, count)
                if self.emitter.pending:
                    self._send_syncs()
                upstream, downstream, count = upstream + taken, downstream + taken, count - taken
        else:
            for i, offset in enumerate(upstreams):
                if self.emitter.record_written(tp, offset, downstream + i):
                    self._send_syncs()

    def _send_syncs(self) -> None:
        if not self.emit_syncs or not (self.emitter.in_flight or self.emitter.pending):
            return
        self.syncs_producer.poll(0)
        for sync in self.emitter.take_sendable():
            self.syncs_producer.produce(
                self.flow.offset_syncs_topic,
                sync.record_value(),
                sync.record_key(),
                partition=0,
                on_delivery=lambda err, msg: self.emitter.sync_completed(),
            )

    def flush(self) -> None:
        """Wait for B's acknowledgements, then commit A's positions of what was consumed."""
        self.next_flush_ms = self.clock.now_ms() + self.flush_interval_ms
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        if self.failure is not None:
            raise MirrorError(self.failure)
        if left:
            raise MirrorError(
                f"{self.flow.name}: {left} records not acknowledged by {self.flow.target} "
                f"in {FLUSH_TIMEOUT_S:.0f} s"
            )
        self._commit_positions()

    def _commit_positions(self) -> None:
        """Once every consumed record is written: the source positions, then the offset syncs."""
        if self.consumed:
            offsets = [TopicPartition(t, p, o) for (t, p), o in self.consumed.items()]
            self.consumer.commit(offsets=offsets, asynchronous=False)
            if self.tracker is not None:
                self.committed.update(self.consumed)
            self.consumed.clear()
        self.emitter.commit()
        self._send_syncs()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("%s: copying %d partitions", self.flow.name, len(partitions))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """A rebalance takes partitions away: commit what B has acknowledged first, so the
        next owner starts after it."""
        if self.failure is None:
            try:
                self.flush()
            except Exception as e:  # noqa: BLE001 - reported by the next step
                self.failure = (
                    f"{self.flow.name}: commit at rebalance failed: {clients.describe(e)}"
                )
        for tp in partitions:
            self.consumed.pop((tp.topic, tp.partition), None)
        if self.tracker is not None:
            self._measure_revoked([(tp.topic, tp.partition) for tp in partitions])

    def close(self, clean: bool) -> None:
        """Clean: flush, commit, leave the group. Otherwise drop what is in flight (it is
        consumed again from the last commit)."""
        try:
            if clean and self.failure is None:
                self.flush()
                self.syncs_producer.flush(5)
        finally:
            if not clean:
                self.producer.purge()
            self.consumer.close()
