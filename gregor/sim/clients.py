"""The clients of the data-plane simulation: idempotent acks=all producers and consumers of
committed data, each a host on the simulated network.

Producer: a fixed producer id (epoch 0) and a sequence per partition; one batch in flight at a
time. It finds leaders by asking a broker for its metadata, and sends a batch until it is
acknowledged, again and again with the same bytes (the same sequence) after any error or lost
answer, as Kafka's idempotent producer does. Every acknowledgement goes to the checker:
(partition, base offset, the batch's CRC). A fatal answer (OUT_OF_ORDER_SEQUENCE_NUMBER,
UNKNOWN_PRODUCER_ID, ...) stops the producer and is counted.

Transactional producer: as the producer, with transactional batches; a transaction writes one
batch to each of one or two partitions, and once every one is acknowledged it commits or
aborts (at random): the decision goes to the checker, then a COMMIT or ABORT marker to each
partition's leader (WriteTxnMarkers), again until each is replicated. The client plays the
transaction coordinator's part (coordinator epoch 0): what the partitions do with markers,
the last stable offset and aborted-transaction indexes is checked, not the coordinator.

Consumer: reads every partition from its leader, from offset 0, below the high watermark (the
broker's `committed_only` read), or with read_committed below the last stable offset, dropping
the batches of the aborted transactions the broker lists, as Kafka's consumer does; what it
reads and drops goes to the checker.
"""

from __future__ import annotations

import random
from typing import Any

from gregor.protocol import errors
from gregor.protocol.records.batch import iter_headers, read_header
from gregor.protocol.records.records import build_batch
from gregor.sim.rpc import (
    ConsumerFetch,
    ConsumerRecords,
    Metadata,
    MetadataResult,
    Produce,
    ProduceResult,
    SimContext,
    SimHost,
    WriteTxnMarker,
)

REQUEST_TIMEOUT_MS = 4000
RETRY_MS = 100
_code = errors.BY_NAME
FATAL = frozenset(
    _code[n].code
    for n in (
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "UNKNOWN_PRODUCER_ID",
        "INVALID_PRODUCER_EPOCH",
        "DUPLICATE_SEQUENCE_NUMBER",
        "CORRUPT_MESSAGE",
        "INVALID_RECORD",
    )
)


class Client(SimHost):
    def __init__(self, sim: SimContext, node_id: int, rng: random.Random) -> None:
        super().__init__(sim, node_id)
        self.rng = rng
        self.leaders: dict[tuple[str, int], int] = {}
        self.refreshing = False

    def refresh_metadata(self) -> None:
        if self.refreshing:
            return
        self.refreshing = True
        broker = self.rng.choice(self.sim.broker_ids)

        def answered(response: Any) -> None:
            self.refreshing = False
            if isinstance(response, MetadataResult):
                self.leaders = dict(response.leaders)

        self.request(broker, Metadata(), answered, REQUEST_TIMEOUT_MS)


class Producer(Client):
    transactional = False

    def __init__(
        self, sim: SimContext, node_id: int, rng: random.Random, producer_id: int, interval_ms: int
    ) -> None:
        super().__init__(sim, node_id, rng)
        self.producer_id = producer_id
        self.interval_ms = interval_ms
        self.sequences: dict[tuple[str, int], int] = {}
        self.batch: tuple[tuple[str, int], Any] | None = None  # the one in flight
        self.queue: list[tuple[tuple[str, int], Any]] = []  # what comes after it
        self.sending = False
        self.stopped = False
        self.acked = 0

    def boot(self) -> None:
        self.sim.timer(self, self.sim.now + self.rng.randint(1, self.interval_ms), "send")

    def timer_send(self) -> None:
        if self.stopped or self.sending:
            return
        if self.batch is None:
            if self.queue:
                self.batch = self.queue.pop(0)
            elif not self.sim.clients_on:
                return
            else:
                self.next_work()
                assert self.queue
                self.batch = self.queue.pop(0)
        tp, body = self.batch
        leader = self.leaders.get(tp, -1)
        if leader < 0:
            self.refresh_metadata()
            self.sim.timer(self, self.sim.now + RETRY_MS, "send")
            return
        self.sending = True
        self.request(
            leader, body, lambda response: self._answered(tp, body, response), REQUEST_TIMEOUT_MS
        )

    def next_work(self) -> None:
        tp = self.rng.choice(self.sim.partitions)
        self.queue.append((tp, self._next_batch(tp)))

    def _next_batch(self, tp: tuple[str, int]) -> Produce:
        seq = self.sequences.get(tp, 0)
        count = self.rng.choice((1, 1, 2, 3))
        self.sequences[tp] = seq + count
        values = [(None, b"p%d-%s-%d-%d" % (self.producer_id, tp[0].encode(), tp[1], seq + i))
                  for i in range(count)]  # fmt: skip
        batch = build_batch(
            values,
            base_timestamp=self.now_ms(),
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=seq,
            transactional=self.transactional,
        )
        return Produce(tp[0], tp[1], bytes(batch))

    def _answered(self, tp: tuple[str, int], body: Any, response: Any) -> None:
        self.sending = False
        if isinstance(response, ProduceResult) and response.error_code == errors.NONE:
            if isinstance(body, Produce):
                header = read_header(body.records, 0)
                self.sim.checker.on_ack(tp, response.base_offset, header, self)
            self.acked += 1
            self.batch = None
            self.after_ack(tp, body)
            delay = 1 if self.queue else self.rng.randint(1, self.interval_ms)
            self.sim.timer(self, self.sim.now + delay, "send")
            return
        code = response.error_code if isinstance(response, ProduceResult) else None
        self.sim.record(
            "produce failed", self.node_id, tp, errors.name_of(code) if code else "no answer"
        )
        if code in FATAL:
            self.stopped = True
            self.sim.count("producer_fatal_" + errors.name_of(code))
            return
        self.refresh_metadata()
        self.sim.timer(self, self.sim.now + RETRY_MS, "send")

    def after_ack(self, tp: tuple[str, int], body: Any) -> None:
        pass


class TransactionalProducer(Producer):
    transactional = True

    def next_work(self) -> None:
        parts = self.rng.sample(self.sim.partitions, self.rng.choice((1, 2)))
        self.txn: list[tuple[tuple[str, int], int]] = []
        for tp in parts:
            batch = self._next_batch(tp)
            self.txn.append((tp, read_header(batch.records, 0).base_sequence))
            self.queue.append((tp, batch))

    def after_ack(self, tp: tuple[str, int], body: Any) -> None:
        if self.queue or isinstance(body, WriteTxnMarker):
            return
        committed = self.rng.random() < 0.5
        self.sim.checker.on_txn_decided(self.producer_id, self.txn, committed)
        self.sim.count("txn_committed" if committed else "txn_aborted")
        for tp, _seq in self.txn:
            marker = WriteTxnMarker(tp[0], tp[1], self.producer_id, 0, committed)
            self.queue.append((tp, marker))


class Consumer(Client):
    def __init__(
        self,
        sim: SimContext,
        node_id: int,
        rng: random.Random,
        interval_ms: int,
        read_committed: bool = False,
    ) -> None:
        super().__init__(sim, node_id, rng)
        self.interval_ms = interval_ms
        self.read_committed = read_committed
        self.positions: dict[tuple[str, int], int] = {}
        self.fetching = False

    def boot(self) -> None:
        self.sim.timer(self, self.sim.now + self.rng.randint(1, self.interval_ms), "poll")

    def timer_poll(self) -> None:
        self.sim.timer(self, self.sim.now + self.rng.randint(1, self.interval_ms), "poll")
        if self.fetching:
            return
        tp = self.rng.choice(self.sim.partitions)
        leader = self.leaders.get(tp, -1)
        if leader < 0:
            self.refresh_metadata()
            return
        offset = self.positions.get(tp, 0)
        self.fetching = True
        self.request(
            leader,
            ConsumerFetch(tp[0], tp[1], offset, self.read_committed),
            lambda response: self._answered(tp, offset, response),
            REQUEST_TIMEOUT_MS,
        )

    def _answered(self, tp: tuple[str, int], offset: int, response: Any) -> None:
        self.fetching = False
        if not isinstance(response, ConsumerRecords) or response.error_code != errors.NONE:
            self.refresh_metadata()
            return
        if self.positions.get(tp, 0) != offset:
            return
        batches = [h for _pos, h in iter_headers(response.records)]
        if batches:
            self.sim.checker.on_read(tp, offset, batches, self)
            if self.read_committed:
                kept, dropped = drop_aborted(batches, response.aborted)
                self.sim.checker.on_read_committed(tp, kept, dropped, self)
            self.positions[tp] = batches[-1].last_offset + 1


def drop_aborted(
    batches: list[Any], aborted: tuple[tuple[int, int], ...]
) -> tuple[list[Any], list[Any]]:
    """(kept, dropped) data batches of a read_committed fetch, as Kafka's consumer filters them:
    a producer's batches from the first offset of an aborted transaction of its, up to its
    ABORT marker, are dropped; control batches are neither."""
    pending = sorted(aborted, key=lambda a: a[1])
    open_aborted: set[int] = set()
    kept, dropped = [], []
    for h in batches:
        while pending and pending[0][1] <= h.last_offset:
            open_aborted.add(pending.pop(0)[0])
        if h.is_control:
            if h.producer_id in open_aborted:
                open_aborted.discard(h.producer_id)  # its marker ends the aborted transaction
            continue
        if h.is_transactional and h.producer_id in open_aborted:
            dropped.append(h)
        else:
            kept.append(h)
    return kept, dropped
