"""The clients of the data-plane simulation that talk to the coordinators (coordinator_host.py).

Each finds its coordinator with FindCoordinator (asking any broker), keeps one request in
flight to it, and looks for it again after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or no
answer (`CoordinatorLink`).

GroupConsumer: a consumer (clients.py) of every partition in a group of its own (a static
assignment: a simple group, generation -1, as standalone consumers commit). Now and then it
commits its positions (OffsetCommit: never lower than before), or reads its committed offsets
back (OffsetFetch) and sometimes starts over from them, as a restarted consumer does. What it
was acknowledged and what it read back go to the checker (coordinator_invariants.py).

TxnProducer: a transactional producer through the transaction coordinator, as Kafka's: an
InitProducerId for its transactional id (a new epoch: sequences start again at 0), then
transactions of one batch to each of one or two partitions: AddPartitionsToTxn, the batches
(acks=all, each sent again until acknowledged), EndTxn commit or abort (at random), sent again
until answered. Half of them also commit an offset of the producer's group (AddOffsetsToTxn,
then TxnOffsetCommit to the group coordinator; the transaction's number, so each is distinct),
which it reads back between transactions and, once stopped, until the end. A fencing answer, or a batch refused for good, makes it start over with a new
InitProducerId (which aborts or completes what the coordinator has open); the coordinator's
marker sender writes the markers. Each step goes to the checker's transaction ledger.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from gregor.coordinator.group.results import (
    OffsetCommitRequest,
    PartitionErrors,
    TxnOffsetCommitRequest,
)
from gregor.coordinator.txn.results import ProducerIdAndEpoch
from gregor.protocol import errors
from gregor.protocol.records.batch import read_header
from gregor.protocol.records.records import build_batch
from gregor.sim.clients import FATAL, REQUEST_TIMEOUT_MS, RETRY_MS, Client, Consumer
from gregor.sim.coordinator_invariants import Transaction
from gregor.sim.coordinator_rpc import (
    GROUP,
    TRANSACTION,
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    CoordinatorFound,
    EndTxn,
    FindCoordinator,
    InitProducerId,
    OffsetFetch,
    OffsetsRead,
)
from gregor.sim.rpc import Produce, ProduceResult, SimContext
from gregor.sim.scenarios import TOPIC

_code = errors.BY_NAME
LOST = frozenset(
    _code[n].code for n in ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "REQUEST_TIMED_OUT")
)
FENCED = frozenset(
    _code[n].code
    for n in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_TXN_STATE",
              "INVALID_PRODUCER_ID_MAPPING", "TRANSACTION_COORDINATOR_FENCED")
)  # fmt: skip
TXN_TIMEOUT_MS = 10_000


class CoordinatorLink:
    """A client's way to its coordinator for `key`: found, then one request at a time."""

    def __init__(self, client: Client, key: str, key_type: int) -> None:
        self.client = client
        self.key = key
        self.key_type = key_type
        self.node: int | None = None
        self.last: int | None = None  # the coordinator found last
        self.busy = False

    def send(self, body: Any, on_answer: Callable[[Any], None]) -> bool:
        """Send `body` to the coordinator (False: busy, or looking for it first)."""
        if self.busy:
            return False
        if self.node is None:
            self._find()
            return False
        self.busy = True

        def answered(response: Any) -> None:
            self.busy = False
            if response is None:
                self.node = None
            on_answer(response)

        self.client.request(self.node, body, answered, REQUEST_TIMEOUT_MS)
        return True

    def check(self, code: int) -> None:
        """After an answer's error code: look for the coordinator again if it moved."""
        if code in LOST:
            self.node = None

    def _find(self) -> None:
        self.busy = True
        broker = self.client.rng.choice(self.client.sim.broker_ids)

        def answered(response: Any) -> None:
            self.busy = False
            if isinstance(response, CoordinatorFound) and response.error_code == errors.NONE:
                if self.last is not None and self.last != response.node_id:
                    self.client.sim.count("coordinator_moved")
                self.node = self.last = response.node_id

        request = FindCoordinator(self.key, self.key_type)
        self.client.request(broker, request, answered, REQUEST_TIMEOUT_MS)


class GroupConsumer(Consumer):
    def __init__(self, sim: SimContext, node_id: int, rng: random.Random, interval_ms: int) -> None:
        super().__init__(sim, node_id, rng, interval_ms)
        self.group_id = f"group-{node_id}"
        self.link = CoordinatorLink(self, self.group_id, GROUP)
        self.acked: dict[tuple[str, int], int] = {}  # the highest commit acknowledged

    def boot(self) -> None:
        super().boot()
        self.sim.timer(self, self.sim.now + self.rng.randint(1, 500), "commit")

    def timer_commit(self) -> None:
        self.sim.timer(self, self.sim.now + self.rng.randint(50, 500), "commit")
        if self.rng.random() < 0.3:
            self._fetch_committed()
            return
        offsets = [(tp, pos) for tp, pos in sorted(self.positions.items())
                   if pos > self.acked.get(tp, -1)]  # fmt: skip
        if not offsets:
            return
        request = OffsetCommitRequest(
            self.group_id, -1, "", None, -1, [(t, p, pos, -1, None) for (t, p), pos in offsets]
        )
        self.link.send(request, lambda response: self._committed(offsets, response))

    def _committed(self, offsets: list[tuple[tuple[str, int], int]], response: Any) -> None:
        if not isinstance(response, PartitionErrors):
            return
        self.link.check(response.error)
        codes = {(t, p): code for t, p, code in response.partitions}
        for tp, offset in offsets:
            if response.error == errors.NONE and codes.get(tp) == errors.NONE:
                self.acked[tp] = max(self.acked.get(tp, -1), offset)
                self.sim.checker.offsets.on_committed(self.group_id, tp, offset)
                self.sim.count("offsets_committed")

    def _fetch_committed(self) -> None:
        parts = tuple(sorted(p for t, p in self.sim.partitions if t == TOPIC))
        self.link.send(OffsetFetch(self.group_id, ((TOPIC, parts),)), self._fetched)

    def _fetched(self, read: Any) -> None:
        if not isinstance(read, OffsetsRead):
            return
        if not read.current:
            self.sim.count("stale_offset_reads")
        response = read.result
        self.link.check(response.error)
        if response.error != errors.NONE:
            return
        restart = self.rng.random() < 0.3
        for f in response.offsets:
            if f.error != errors.NONE:
                continue
            tp = (f.topic, f.partition)
            self.sim.checker.offsets.on_fetched(self.group_id, tp, f.offset, self, read.current)
            if restart:
                self.positions[tp] = max(f.offset, 0)
        if restart:
            self.sim.count("group_consumer_restarts")


class TxnProducer(Client):
    def __init__(self, sim: SimContext, node_id: int, rng: random.Random, interval_ms: int) -> None:
        super().__init__(sim, node_id, rng)
        self.transactional_id = f"txn-{node_id}"
        self.interval_ms = interval_ms
        self.link = CoordinatorLink(self, self.transactional_id, TRANSACTION)
        self.group_id = f"txn-group-{node_id}"
        self.group_link = CoordinatorLink(self, self.group_id, GROUP)
        self.txn_no = 0
        self.offset: tuple[str, int, int] | None = None  # the transaction's TxnOffsetCommit
        self.offset_added = self.offset_sent = True
        self.producer: tuple[int, int] | None = None  # (id, epoch)
        self.sequences: dict[tuple[str, int], int] = {}
        self.txn: Transaction | None = None
        self.parts: list[tuple[str, int]] = []
        self.added = False
        self.to_send: list[tuple[tuple[str, int], Produce]] = []
        self.committed = False
        self.sending = False

    def boot(self) -> None:
        self.sim.timer(self, self.sim.now + self.rng.randint(1, self.interval_ms), "step")

    def _next(self, delay: int | None = None) -> None:
        delay = self.rng.randint(1, self.interval_ms) if delay is None else delay
        self.sim.timer(self, self.sim.now + delay, "step")

    def timer_step(self) -> None:
        if self.producer is None:
            if not self.link.send(
                InitProducerId(self.transactional_id, TXN_TIMEOUT_MS), self._initialized
            ):
                self._next(RETRY_MS)
            return
        if self.txn is None:
            if not self.sim.clients_on or self.rng.random() < 0.2:
                self._read_offset()
            if not self.sim.clients_on:
                self._next(300)  # stopped between transactions: it only reads its offset
                return
            self._begin()
        if not self.added:
            body = AddPartitionsToTxn(self.transactional_id, *self.producer, tuple(self.parts))
            self._send(self.link, body, self._added)
        elif not self.offset_added:
            body2 = AddOffsetsToTxn(self.transactional_id, *self.producer, self.group_id)
            self._send(self.link, body2, self._offsets_added)
        elif self.to_send:
            self._produce()
        elif not self.offset_sent:
            self._send(self.group_link, self._txn_offset_commit(), self._offset_committed)
        else:
            self._end()

    def _send(self, link: CoordinatorLink, body: Any, on_answer: Callable[[Any], None]) -> None:
        if not link.send(body, on_answer):
            self._next(RETRY_MS)

    def _txn_offset_commit(self) -> TxnOffsetCommitRequest:
        assert self.producer is not None and self.offset is not None
        pid, epoch = self.producer
        topic, partition, offset = self.offset
        return TxnOffsetCommitRequest(
            self.group_id, pid, epoch, -1, "", None, [(topic, partition, offset, -1, None)],
            self.transactional_id,
        )  # fmt: skip

    def _read_offset(self) -> None:
        body = OffsetFetch(self.group_id, ((TOPIC, (0,)),))
        self.group_link.send(body, self._offset_read)

    def _offset_read(self, read: Any) -> None:
        if isinstance(read, OffsetsRead):
            response = read.result
            self.group_link.check(response.error)
            for f in response.offsets if response.error == errors.NONE else ():
                if f.error == errors.NONE:
                    tp = (f.topic, f.partition)
                    offsets = self.sim.checker.offsets
                    offsets.on_fetched(self.group_id, tp, f.offset, self, read.current)
                    self.sim.count("txn_offsets_read" if f.offset >= 0 else "txn_offsets_none")

    def _initialized(self, response: Any) -> None:
        if isinstance(response, ProducerIdAndEpoch):
            self.link.check(response.error)
            if response.error == errors.NONE:
                self.producer = (response.producer_id, response.producer_epoch)
                self.sequences = {}
                self.sim.count("txn_init_producer_id")
                self._next(1)
                return
        self._next(RETRY_MS)

    def _start_over(self, why: str) -> None:
        """A new InitProducerId: what is open is abandoned (the coordinator ends it)."""
        self.sim.record("txn producer starts over", self.node_id, why)
        self.sim.count("txn_start_over")
        if self.txn is not None:
            self.sim.checker.txns.abandoned(self.txn)
        self.txn, self.producer = None, None
        self._next(RETRY_MS)

    def _begin(self) -> None:
        assert self.producer is not None
        pid, epoch = self.producer
        self.parts = sorted(self.rng.sample(self.sim.partitions, self.rng.choice((1, 2))))
        self.to_send = []
        keys = []
        for tp in self.parts:
            seq = self.sequences.get(tp, 0)
            self.sequences[tp] = seq + 1
            value = b"x%d-%d-%d-%d" % (self.node_id, epoch, tp[1], seq)
            batch = build_batch(
                [(None, value)], base_timestamp=self.now_ms(), producer_id=pid,
                producer_epoch=epoch, base_sequence=seq, transactional=True,
            )  # fmt: skip
            self.to_send.append((tp, Produce(tp[0], tp[1], bytes(batch))))
            keys.append((pid, epoch, tp, seq))
        self.txn_no += 1
        offset = None
        if self.rng.random() < 0.5:
            self.offset = (TOPIC, 0, self.txn_no)
            offset = (self.group_id, (TOPIC, 0), self.txn_no)
        else:
            self.offset = None
        self.offset_added = self.offset_sent = offset is None
        self.txn = self.sim.checker.txns.begin(pid, keys, offset)
        self.added = False
        self.committed = self.rng.random() < 0.5

    def _answered(self, link: CoordinatorLink, code: int | None) -> bool:
        """True when a coordinator answered NONE; else start over if fenced, or retry later."""
        if code is not None:
            link.check(code)
            if code == errors.NONE:
                return True
            if code in FENCED:
                self._start_over(errors.name_of(code))
                return False
        self._next(RETRY_MS)
        return False

    def _added(self, response: Any) -> None:
        if self._answered(self.link, response if isinstance(response, int) else None):
            self.added = True
            self._next(1)

    def _offsets_added(self, response: Any) -> None:
        if self._answered(self.link, response if isinstance(response, int) else None):
            self.offset_added = True
            self._next(1)

    def _offset_committed(self, response: Any) -> None:
        code = None
        if isinstance(response, PartitionErrors):
            code = response.error or (response.partitions[0][2] if response.partitions else 0)
        if self._answered(self.group_link, code):
            self.offset_sent = True
            self._next(1)

    def _produce(self) -> None:
        tp, body = self.to_send[0]
        leader = self.leaders.get(tp, -1)
        if leader < 0 or self.sending:
            self.refresh_metadata()
            self._next(RETRY_MS)
            return
        self.sending = True
        txn = self.txn
        self.request(leader, body, lambda r: self._produced(txn, tp, body, r), REQUEST_TIMEOUT_MS)

    def _produced(self, txn: Any, tp: tuple[str, int], body: Produce, response: Any) -> None:
        self.sending = False
        if txn is not self.txn:
            return
        if isinstance(response, ProduceResult) and response.error_code == errors.NONE:
            header = read_header(body.records, 0)
            self.sim.checker.on_ack(tp, response.base_offset, header, self)
            self.to_send.pop(0)
            self._next(1)
            return
        code = response.error_code if isinstance(response, ProduceResult) else None
        if code in FATAL or code in FENCED:
            self._start_over(errors.name_of(code))
            return
        self.refresh_metadata()
        self._next(RETRY_MS)

    def _end(self) -> None:
        assert self.producer is not None and self.txn is not None
        body = EndTxn(self.transactional_id, *self.producer, self.committed)
        txn = self.txn
        if self.link.send(body, lambda response: self._ended(txn, response)):
            self.sim.checker.txns.ending(txn, self.committed)
        else:
            self._next(RETRY_MS)

    def _ended(self, txn: Transaction, response: Any) -> None:
        if txn is not self.txn:
            return
        code = response.error if isinstance(response, ProducerIdAndEpoch) else None
        if self._answered(self.link, code):
            self.sim.checker.txns.decided(txn, self.committed)
            self.sim.count("txn_committed" if self.committed else "txn_aborted")
            self.txn = None
            self._next()
