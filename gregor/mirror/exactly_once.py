"""The source task with `B.exactly.once.source.support = enabled` (KIP-656's model): copies and
A's positions are written to B in one transaction, so a SIGKILLed mirror restarts with no record
lost and none doubled, for readers of B with `isolation.level=read_committed`.

- Each source partition A/orders-p has its own transactional producer on B,
  `transactional.id = connect-mm2-A->B-orders-p`. Taking the partition (at a rebalance or a
  restart) initialises that id, which fences a previous owner still alive and aborts its open
  transaction.
- A's positions live on B in `mm2-offsets.B.internal` (single partition, compacted), in
  Connect's source-offset format: key `["MirrorSourceConnector",{"cluster":"A","partition":p,
  "topic":"orders"}]`, value `{"offset":N}`, N the last copied offset. Each flush commits, per
  partition, the records copied since the last one and the new position in one transaction.
- A partition with no position there resumes from the group `connect-mm2-A->B`'s committed
  offset (a flow that ran at least once before), else from the start; the group's offsets are
  still committed after each transaction, for tools that show lag.
- Offset syncs are emitted only for committed copies.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from confluent_kafka import OFFSET_STORED, TopicPartition

from gregor.clock import Clock
from gregor.mirror import clients
from gregor.mirror.clients import MirrorError
from gregor.mirror.config import Flow
from gregor.mirror.metrics import MirrorMetrics
from gregor.mirror.replicator import FLUSH_TIMEOUT_S, SourceTask, source_group

log = logging.getLogger("gregor.mirror")

TP = tuple[str, int]


def offsets_topic(flow: Flow) -> str:
    return f"mm2-offsets{flow.policy.internal_separator}{flow.target}{flow.policy.internal_separator}internal"


def offset_key(source_alias: str, tp: TP) -> bytes:
    partition = {"cluster": source_alias, "partition": tp[1], "topic": tp[0]}
    return json.dumps(["MirrorSourceConnector", partition], separators=(",", ":")).encode()


def parse_offset_record(
    key: bytes | None, value: bytes | None, source_alias: str
) -> tuple[TP, int | None] | None:
    """(source partition, last copied offset; None for a tombstone), None when not ours."""
    try:
        name, partition = json.loads(key or b"")
        if name != "MirrorSourceConnector" or partition.get("cluster") != source_alias:
            return None
        tp = (str(partition["topic"]), int(partition["partition"]))
        return tp, (None if value is None else int(json.loads(value)["offset"]))
    except (ValueError, TypeError, KeyError):
        return None


def stored_positions(reader: Any, flow: Flow, timeout_s: float = FLUSH_TIMEOUT_S) -> dict[TP, int]:
    """The last copied offset per source partition of `flow`, as committed on its target
    (`reader`: a read_committed consumer of the target)."""
    out: dict[TP, int] = {}
    for m in clients.read_to_end(reader, offsets_topic(flow), timeout_s):
        parsed = parse_offset_record(m.key(), m.value(), flow.source)
        if parsed is None:
            continue
        tp, offset = parsed
        if offset is None:
            out.pop(tp, None)
        else:
            out[tp] = offset
    return out


class ExactlyOnceSourceTask(SourceTask):
    def __init__(
        self,
        flow: Flow,
        clock: Clock,
        flush_interval_ms: int = 1000,
        metrics: MirrorMetrics | None = None,
    ):
        super().__init__(flow, clock, flush_interval_ms, metrics)
        self.offsets_topic = offsets_topic(flow)
        self.producers: dict[TP, Any] = {}
        self.open: set[TP] = set()
        # runs acknowledged, not committed yet: (tp, upstream, upstreams, downstream, count)
        self.uncommitted: list[tuple[TP, int, list[int] | None, int, int]] = []

    def start(self) -> None:
        clients.reach_both(self.flow, self.source_admin, self.target_admin)
        clients.ensure_internal_topic(
            self.target_admin,
            self.offsets_topic,
            self.flow.get("offset-syncs.topic.replication.factor"),
            self.flow.target,
        )
        super().start()

    def _transactional_producer(self, tp: TP) -> Any:
        transactional_id = f"{source_group(self.flow)}-{tp[0]}-{tp[1]}"
        producer = clients.producer(
            self.flow.client_config("target", "producer"),
            **{"transactional.id": transactional_id, "enable.idempotence": True, "acks": "all"},
        )
        producer.init_transactions(FLUSH_TIMEOUT_S)  # fences a previous owner
        return producer

    def _positions(self) -> dict[TP, int]:
        """The last copied offset per source partition, as committed on B."""
        config = self.flow.client_config("target", "consumer")
        reader = clients.consumer(
            config,
            **{
                "group.id": f"{source_group(self.flow)}-offsets",
                "isolation.level": "read_committed",
            },
        )
        try:
            return stored_positions(reader, self.flow)
        finally:
            reader.close()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        super()._on_assign(consumer, partitions)
        try:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                if key not in self.producers:
                    self.producers[key] = self._transactional_producer(key)
            positions = self._positions()
        except Exception as e:  # noqa: BLE001 - reported by the next step
            self.failure = f"{self.flow.name}: taking partitions failed: {clients.describe(e)}"
            consumer.assign(partitions)
            return
        for tp in partitions:
            last = positions.get((tp.topic, tp.partition))
            tp.offset = OFFSET_STORED if last is None else last + 1
        consumer.assign(partitions)

    def _producer_for(self, tp: TP) -> Any:
        producer = self.producers.get(tp)
        if producer is None:
            raise MirrorError(f"{self.flow.name}: {tp[0]}-{tp[1]} consumed without its producer")
        if tp not in self.open:
            producer.begin_transaction()
            self.open.add(tp)
        return producer

    def _written_run(
        self, tp: TP, upstream: int, upstreams: list[int] | None, downstream: int, count: int
    ) -> None:
        self.uncommitted.append((tp, upstream, upstreams, downstream, count))

    def step(self) -> None:
        for producer in self.producers.values():
            producer.poll(0)
        super().step()

    def flush(self) -> None:
        """Per partition: the new position, then commit the transaction."""
        self.next_flush_ms = self.clock.now_ms() + self.flush_interval_ms
        if self.failure is not None:
            raise MirrorError(self.failure)
        for tp in sorted(self.open):
            producer = self.producers[tp]
            last = self.consumed[tp] - 1
            value = json.dumps({"offset": last}).encode()
            producer.produce(
                self.offsets_topic, value, offset_key(self.flow.source, tp), partition=0
            )
            producer.commit_transaction(FLUSH_TIMEOUT_S)
            self.open.discard(tp)
        if self.failure is not None:
            raise MirrorError(self.failure)
        for tp, upstream, upstreams, downstream, count in self.uncommitted:
            super()._written_run(tp, upstream, upstreams, downstream, count)
        self.uncommitted.clear()
        self._commit_positions()

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        super()._on_revoke(consumer, partitions)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            producer = self.producers.pop(key, None)
            if key in self.open and producer is not None:
                self._abort(producer)
                self.open.discard(key)

    @staticmethod
    def _abort(producer: Any) -> None:
        try:
            producer.abort_transaction(5)
        except Exception:  # noqa: BLE001, S110 - fenced or gone: the broker aborts it anyway
            pass

    def close(self, clean: bool) -> None:
        try:
            super().close(clean)
        finally:
            for tp in list(self.open):
                self._abort(self.producers[tp])
            self.open.clear()
            for producer in self.producers.values():
                producer.flush(0)
            self.producers.clear()
