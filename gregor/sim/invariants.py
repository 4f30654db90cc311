"""What the simulator checks after every event, and the state machine whose history it checks.

Safety, after every event:
  * election safety: at most one leader per epoch, over the whole run;
  * epochs are monotonic per node, across restarts (the epoch is persisted);
  * high watermark: it never goes backwards within one incarnation of a node. It is not
    persisted (as Kafka's), so after a restart it is unknown until a leader says or computes
    it, and may then be lower than before the crash; what a restart cannot do is change or
    lose committed entries, which the next rules check;
  * committed history: every entry any node hands to its state machine (offset, epoch, data)
    and every snapshot it loads agree with one global history, which only grows; each node
    applies it densely from offset 0 (or a snapshot's end), so all committed prefixes agree;
  * leader completeness: a node that becomes leader holds every entry committed so far (in its
    log, or below its log start in a snapshot the history already checked).

Liveness, at the end (after every fault is healed and the run went on long enough): one leader
in the highest epoch, every node following it, and every log, high watermark and state machine
at the same end offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gregor.raft.log import MemoryLog, SnapshotId
from gregor.raft.node import Entry, RaftNode
from gregor.raft.quorum_state import LEADER

Record = tuple[int, bytes, bool]  # (epoch, data, control) at one offset

_HEADER = struct.Struct(">iI?")


class InvariantViolation(Exception):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


def encode_state(records: list[Record]) -> bytes:
    """The sim state machine's snapshot: every record applied, in offset order."""
    out = bytearray()
    for epoch, data, control in records:
        out += _HEADER.pack(epoch, len(data), control)
        out += data
    return bytes(out)


def decode_state(data: bytes) -> list[Record]:
    out: list[Record] = []
    pos = 0
    while pos < len(data):
        epoch, size, control = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        out.append((epoch, data[pos : pos + size], control))
        pos += size
    return out


@dataclass
class NodeView:
    """What the checker remembers of one node id across its incarnations."""

    state: list[Record] = field(default_factory=list)  # the state machine: records by offset
    last_hw: int | None = None  # within the current incarnation
    max_epoch: int = 0  # over all incarnations
    leader_checked_epoch: int = -1


class Checker:
    def __init__(self) -> None:
        self.history: list[Record] = []  # the committed history, dense from offset 0
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.views: dict[int, NodeView] = {}

    def view(self, node_id: int) -> NodeView:
        view = self.views.get(node_id)
        if view is None:
            view = self.views[node_id] = NodeView()
        return view

    def on_restart(self, node_id: int) -> None:
        view = self.view(node_id)
        view.state = []
        view.last_hw = None
        view.leader_checked_epoch = -1

    # -- the committed history --------------------------------------------------------------

    def _agree(self, node_id: int, offset: int, record: Record) -> None:
        history = self.history
        if offset < len(history):
            if history[offset] != record:
                raise InvariantViolation(
                    "committed entries never change",
                    f"node {node_id} has {record!r} at offset {offset}, committed was {history[offset]!r}",
                )
        elif offset == len(history):
            history.append(record)
        else:
            raise InvariantViolation(
                "committed history is dense",
                f"node {node_id} committed offset {offset} past {len(history)}",
            )

    def on_snapshot(self, node_id: int, snapshot_id: SnapshotId, data: bytes) -> None:
        records = decode_state(data)
        if len(records) != snapshot_id.end_offset:
            raise InvariantViolation(
                "snapshot matches its id",
                f"node {node_id}: {snapshot_id} holds {len(records)} records",
            )
        for offset, record in enumerate(records):
            self._agree(node_id, offset, record)
        if records and records[-1][0] != snapshot_id.epoch:
            raise InvariantViolation(
                "snapshot matches its id", f"node {node_id}: {snapshot_id} last epoch"
            )
        self.view(node_id).state = records

    def on_committed(self, node_id: int, entry: Entry) -> None:
        view = self.view(node_id)
        if entry.offset != len(view.state):
            raise InvariantViolation(
                "committed entries arrive in order",
                f"node {node_id} got offset {entry.offset}, its state machine is at {len(view.state)}",
            )
        record = (entry.epoch, entry.data, entry.control)
        self._agree(node_id, entry.offset, record)
        view.state.append(record)

    # -- per node, after every event --------------------------------------------------------

    def check_node(self, node_id: int, node: RaftNode) -> None:
        view = self.view(node_id)
        epoch = node.epoch
        if epoch < view.max_epoch:
            raise InvariantViolation(
                "epochs are monotonic", f"node {node_id}: epoch {view.max_epoch} -> {epoch}"
            )
        view.max_epoch = epoch
        hw = node.high_watermark
        if hw is not None:
            if view.last_hw is not None and hw < view.last_hw:
                raise InvariantViolation(
                    "high watermark never goes backwards", f"node {node_id}: {view.last_hw} -> {hw}"
                )
            view.last_hw = hw
        if node.state is LEADER:
            known = self.leaders.setdefault(epoch, node_id)
            if known != node_id:
                raise InvariantViolation(
                    "one leader per epoch", f"epoch {epoch}: nodes {known} and {node_id}"
                )
            if view.leader_checked_epoch != epoch:
                view.leader_checked_epoch = epoch
                self._check_leader_complete(node_id, node)

    def _check_leader_complete(self, node_id: int, node: RaftNode) -> None:
        log = node.log
        assert isinstance(log, MemoryLog)
        history = self.history
        if log.end_offset < len(history):
            raise InvariantViolation(
                "leader completeness",
                f"node {node_id} leads epoch {node.epoch} with log end {log.end_offset} < committed {len(history)}",
            )
        for batch in log.batches:
            if batch.base_offset >= len(history):
                break
            for i, data in enumerate(batch.records):
                offset = batch.base_offset + i
                if offset < len(history) and history[offset] != (batch.epoch, data, batch.control):
                    raise InvariantViolation(
                        "leader completeness",
                        f"node {node_id} leads epoch {node.epoch} with {(batch.epoch, data)!r} at {offset}, "
                        f"committed {history[offset]!r}",
                    )
