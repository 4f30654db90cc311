"""What the data-plane simulation checks after every event.

The checker keeps, per partition, the committed history: every batch that was ever below a
replica's high watermark, acknowledged to an acks=all producer, or read by a consumer, by base
offset: (last offset, CRC). A batch is identified by those (its CRC covers its records,
producer id and sequence, not its offset or leader epoch, which the leader stamps).

  * committed data never changes: a batch below any replica's high watermark, acknowledged,
    or read, agrees with the history (so replicas' logs below their HW are identical);
  * committed data is never lost: every live replica in the partition's ISR (the committed
    metadata's) whose registration is its current incarnation holds every committed batch,
    the acknowledged ones among them. A crashed broker comes back as a new incarnation and is
    out of every ISR until it catches up and the leader adds it again;
  * consumers read only committed data, each offset once and in order;
  * the high watermark never goes backwards on a leader within one leader epoch (and one
    incarnation: it is not persisted exactly);
  * at most one broker appends as leader in each leader epoch of a partition;
  * an idempotent producer's batch (producer id, epoch, base sequence) is in the history once
    (in the clients' topics);
  * read_committed: a consumer keeps only batches of committed transactions (and no batch of
    a transaction not decided yet), and drops only batches of aborted ones; committed
    offsets never go back (coordinator_invariants.py, with what else the coordinators owe).

The truth for the ISR is the committed metadata log, replayed here as the controllers commit
it (they agree on it: the Raft simulation checks that).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gregor.metadata.image import EMPTY_IMAGE, MetadataImage
from gregor.protocol.records.batch import BatchHeader, iter_headers
from gregor.sim.coordinator_invariants import CommittedOffsets, TxnLedger
from gregor.sim.invariants import InvariantViolation

if TYPE_CHECKING:
    from gregor.replication.partition import Partition, ReplicaManager

TopicPartition = tuple[str, int]


class BrokerHost(Protocol):
    """What the checker reads of a simulated broker (broker_host.py)."""

    node_id: int
    incarnation: int
    incarnation_id: uuid.UUID
    replicas: ReplicaManager | None


@dataclass
class History:
    """One partition's committed batches."""

    batches: dict[int, tuple[int, int]] = field(default_factory=dict)  # base -> (last, crc)
    end: int = 0  # one past the last committed offset
    # (producer id, epoch, base sequence) -> base offset
    sequences: dict[tuple[int, int, int], int] = field(default_factory=dict)


@dataclass
class ReplicaView:
    """How far one replica's log was checked, valid while the log is the same object and was
    not truncated since."""

    log_id: int
    incarnation: int
    truncations: int
    checked: int  # every batch below this offset agrees with the history


class DataChecker:
    def __init__(self) -> None:
        self.image: MetadataImage = EMPTY_IMAGE
        self.metadata_end = 0
        self.histories: dict[TopicPartition, History] = {}
        self.views: dict[tuple[int, TopicPartition], ReplicaView] = {}
        self.leader_hw: dict[tuple[int, int, TopicPartition], tuple[int, int]] = {}
        self.writers: dict[tuple[TopicPartition, int], int] = {}  # (tp, leader epoch) -> broker
        # what moved since `take_changed`: the metadata, the histories of these partitions
        self.metadata_moved = False
        self.moved: set[TopicPartition] = set()
        self.last_state: dict[tuple[int, TopicPartition], tuple[Any, ...]] = {}
        self.acked = 0
        self.read = 0
        self.offsets = CommittedOffsets()
        self.txns = TxnLedger(self.offsets)

    def history(self, tp: TopicPartition) -> History:
        h = self.histories.get(tp)
        if h is None:
            h = self.histories[tp] = History()
        return h

    def take_changed(self) -> tuple[bool, set[TopicPartition]]:
        """Whether the metadata moved, and the partitions whose history moved, since the last
        time: what every broker's replicas are checked against."""
        moved = self.metadata_moved, self.moved
        self.metadata_moved, self.moved = False, set()
        return moved

    # -- what happened ---------------------------------------------------------------------

    def on_metadata(self, rec: tuple[Any, int, int]) -> None:
        if rec[1] >= self.metadata_end:
            self.image = self.image.replay([rec])
            self.metadata_end = rec[1] + 1
            self.metadata_moved = True

    def on_ack(self, tp: TopicPartition, base: int, header: BatchHeader, who: Any) -> None:
        self.acked += 1
        last = base + header.last_offset_delta
        self._agree(tp, base, last, header, f"acknowledged to producer {who.node_id}")

    def on_read(
        self, tp: TopicPartition, offset: int, batches: list[BatchHeader], who: Any
    ) -> None:
        self.read += len(batches)
        first = batches[0]
        if not first.base_offset <= offset <= first.last_offset:
            raise InvariantViolation(
                "consumers read in order",
                f"consumer {who.node_id} asked {tp} at {offset}, got a batch at {first.base_offset}",
            )
        for h in batches:
            self._agree(tp, h.base_offset, h.last_offset, h, f"read by consumer {who.node_id}")

    def on_txn_decided(
        self, producer_id: int, batches: list[tuple[TopicPartition, int]], committed: bool
    ) -> None:
        """A transaction of epoch 0 its producer decided alone (clients.py's)."""
        txn = self.txns.begin(producer_id, [(producer_id, 0, tp, seq) for tp, seq in batches])
        self.txns.decided(txn, committed)

    def on_read_committed(
        self, tp: TopicPartition, kept: list[BatchHeader], dropped: list[BatchHeader], who: Any
    ) -> None:
        for h in kept:
            if h.is_transactional:
                self.txns.on_read(tp, h, True, who)
        for h in dropped:
            self.txns.on_read(tp, h, False, who)

    def on_leader_append(self, broker: BrokerHost, p: Partition, epoch: int) -> None:
        key = ((p.topic, p.index), epoch)
        known = self.writers.setdefault(key, broker.node_id)
        if known != broker.node_id:
            raise InvariantViolation(
                "one leader per leader epoch accepts writes",
                f"{p.name} epoch {epoch}: brokers {known} and {broker.node_id} appended as leader",
            )

    def _agree(self, tp: TopicPartition, base: int, last: int, h: Any, what: str) -> None:
        history = self.history(tp)
        known = history.batches.get(base)
        if known is None:
            if base != history.end and base < history.end:
                raise InvariantViolation(
                    "committed data never changes",
                    f"{tp}: a batch at {base}-{last} ({what}) is not a committed batch boundary",
                )
            history.batches[base] = (last, h.crc)
            history.end = max(history.end, last + 1)
            self.moved.add(tp)
            # (a coordinator writes a producer's transactional offsets with sequence 0 each
            # time, unchecked, as Kafka's does: only clients' batches are idempotent)
            if h.producer_id >= 0 and h.base_sequence >= 0 and not tp[0].startswith("__"):
                seq = (h.producer_id, h.producer_epoch, h.base_sequence)
                other = history.sequences.setdefault(seq, base)
                if other != base:
                    raise InvariantViolation(
                        "idempotent producers never duplicate",
                        f"{tp}: producer {seq[0]} epoch {seq[1]} sequence {seq[2]} at offsets "
                        f"{other} and {base}",
                    )
        elif known != (last, h.crc):
            raise InvariantViolation(
                "committed data never changes",
                f"{tp}: batch at {base} is {(last, h.crc)} ({what}), committed was {known}",
            )

    # -- after every event -----------------------------------------------------------------

    def check_broker(self, broker: BrokerHost, only: set[TopicPartition] | None = None) -> None:
        """Check the broker's replicas that moved since the last check (of `only`'s
        partitions: the others did not, nor what they are checked against)."""
        rm = broker.replicas
        if rm is None:
            return
        node_id, incarnation = broker.node_id, broker.incarnation
        last_state, histories, metadata_end = self.last_state, self.histories, self.metadata_end
        current: bool | None = None  # (looked up once some replica needs checking)
        for tp, p in rm.partitions.items():
            if only is not None and tp not in only:
                continue
            lg = p.log
            history = histories.get(tp) or self.history(tp)
            # Nothing to check again when nothing it depends on moved since the last time.
            state = (
                id(lg), incarnation, lg.truncations, lg.log_end_offset, lg.high_watermark,
                p.leader_epoch, p.leader_id == p.node_id, history.end, metadata_end,
            )  # fmt: skip
            key = (node_id, tp)
            if last_state.get(key) == state:
                continue
            last_state[key] = state
            if current is None:
                reg = self.image.brokers.get(node_id)
                current = reg is not None and reg.incarnation_id == broker.incarnation_id
            self._check_replica(broker, current, tp, p, history)

    def _check_replica(
        self, broker: BrokerHost, current: bool, tp: TopicPartition, p: Partition, history: History
    ) -> None:
        lg = p.log
        if p.is_leader:
            self._check_leader_hw(broker, p, tp)
        view = self.views.get((broker.node_id, tp))
        if view is None or view.log_id != id(lg) or view.incarnation != broker.incarnation:
            view = ReplicaView(id(lg), broker.incarnation, lg.truncations, lg.log_start_offset)
            self.views[(broker.node_id, tp)] = view
        elif view.truncations != lg.truncations:
            view.truncations = lg.truncations
            view.checked = min(view.checked, lg.log_end_offset)
        part = self.image.partition(*tp)
        in_isr = current and part is not None and broker.node_id in part.isr
        if in_isr and lg.log_end_offset < history.end:
            raise InvariantViolation(
                "committed data is never lost",
                f"{p.name}: ISR member {broker.node_id} has log end {lg.log_end_offset}, "
                f"committed up to {history.end} (ISR {list(part.isr) if part else None})",
            )
        upto = max(lg.high_watermark, history.end if in_isr else 0)
        if view.checked < upto:
            self._scan(broker, p, tp, view, upto)

    def _scan(
        self, broker: BrokerHost, p: Partition, tp: TopicPartition, view: ReplicaView, upto: int
    ) -> None:
        lg = p.log
        hw = lg.high_watermark
        offset = view.checked
        while offset < upto:
            chunk = lg.read_bytes(offset, 1 << 20, upto)
            if not chunk:
                raise InvariantViolation(
                    "committed data is never lost",
                    f"{p.name}: broker {broker.node_id} cannot read offset {offset} below {upto}",
                )
            start = offset
            for _pos, h in iter_headers(chunk):
                last = h.last_offset
                if last >= upto:
                    break
                if last < hw:
                    self._agree(
                        tp, h.base_offset, last, h, f"on broker {broker.node_id} below its HW {hw}"
                    )
                else:
                    known = self.history(tp).batches.get(h.base_offset)
                    if known != (last, h.crc):
                        raise InvariantViolation(
                            "committed data is never lost",
                            f"{p.name}: ISR member {broker.node_id} has {(last, h.crc)} at "
                            f"{h.base_offset}, committed {known}",
                        )
                offset = last + 1
            else:
                if offset > start:
                    continue
            break
        view.checked = offset

    def _check_leader_hw(self, broker: BrokerHost, p: Partition, tp: TopicPartition) -> None:
        key = (broker.node_id, broker.incarnation, tp)
        hw = p.log.high_watermark
        seen = self.leader_hw.get(key)
        if seen is not None and seen[0] == p.leader_epoch and hw < seen[1]:
            raise InvariantViolation(
                "the high watermark never goes backwards on a leader",
                f"{p.name} on broker {broker.node_id}, epoch {p.leader_epoch}: {seen[1]} -> {hw}",
            )
        self.leader_hw[key] = (p.leader_epoch, hw)
