"""Metadata transactions (KIP-868): a commit larger than one Raft batch is framed by
BeginTransactionRecord and EndTransactionRecord and applied all at once at its End; a
transaction left open at the end of the log (a crash between its batches) is not applied, and
the next active controller aborts it; a snapshot is never taken inside one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from gregor.clock import ManualClock
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import Listener, QuorumController, TopicRequest
from gregor.metadata import records as r
from gregor.metadata import snapshot as ms
from gregor.metadata.image import EMPTY_IMAGE, MetadataReplayError
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.transactions import FAILOVER_REASON, TransactionBuffer
from gregor.protocol.records import batch as rb
from gregor.raft import snapshot_file
from gregor.raft.log import SnapshotId
from gregor.raft.node import Entry
from gregor.raft.storage_log import DIR_NAME
from tests.kraft_broker.helpers import metadata_records

NOW = 1_700_000_000_000
CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"
NAMES = [f"t{i:02d}" for i in range(40)]


def topic_records(name: str, partitions: int = 1) -> list[Any]:
    tid = uuid.uuid5(uuid.NAMESPACE_DNS, name)
    out: list[Any] = [r.TopicRecord(name=name, topic_id=tid)]
    out += [
        r.PartitionRecord(
            partition_id=i,
            topic_id=tid,
            replicas=[1],
            isr=[1],
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        )
        for i in range(partitions)
    ]
    return out


def entries(records: list[Any], first: int, epoch: int = 1) -> list[tuple[Any, int, int]]:
    return [(rec, first + i, epoch) for i, rec in enumerate(records)]


# -- replay ---------------------------------------------------------------------------------


def test_a_transaction_is_applied_at_its_end_only() -> None:
    buf = TransactionBuffer()
    before = entries(topic_records("before"), 0)
    assert buf.feed(before) == before, "outside a transaction: applied at once"
    part1 = entries([r.BeginTransactionRecord(name="two topics"), *topic_records("a", 2)], 2)
    assert buf.feed(part1) == [] and buf.open and buf.start_offset == 2
    assert buf.stable_offset(5) == 1, "visible: up to the record before the Begin"
    part2 = entries([*topic_records("b"), r.EndTransactionRecord()], 6)
    ready = buf.feed(part2)
    assert ready == part1 + part2 and not buf.open and buf.stable_offset(8) == 8
    image = EMPTY_IMAGE.replay(before + ready)
    assert set(image.topics_by_name) == {"before", "a", "b"} and image.offset == 8


def test_a_transaction_open_at_the_end_of_the_log_is_not_applied() -> None:
    buf = TransactionBuffer()
    ready = buf.feed(
        entries([r.BeginTransactionRecord(), *topic_records("a"), *topic_records("b")], 0)
    )
    assert ready == [] and buf.open and buf.held == 5
    assert EMPTY_IMAGE.replay(ready).topics_by_name == {}


def test_an_aborted_transaction_is_discarded_and_what_follows_applies() -> None:
    buf = TransactionBuffer()
    held = entries([r.BeginTransactionRecord(), *topic_records("lost")], 0)
    assert buf.feed(held) == []
    abort = entries([r.AbortTransactionRecord(reason=FAILOVER_REASON)], 3)
    after = entries(topic_records("after"), 4)
    ready = buf.feed(abort + after)
    assert ready == abort + after and not buf.open
    image = EMPTY_IMAGE.replay(ready)
    assert set(image.topics_by_name) == {"after"} and image.offset == 5


def test_markers_out_of_place_are_a_broken_log() -> None:
    buf = TransactionBuffer()
    buf.feed(entries([r.BeginTransactionRecord()], 0))
    with pytest.raises(MetadataReplayError, match="never closed"):
        buf.feed(entries([r.BeginTransactionRecord()], 1))
    for marker in (r.EndTransactionRecord(), r.AbortTransactionRecord()):
        with pytest.raises(MetadataReplayError, match="without an open transaction"):
            TransactionBuffer().feed(entries([marker], 0))


def test_a_snapshot_holding_a_marker_is_refused() -> None:
    data = snapshot_file.encode([r.encode(r.BeginTransactionRecord())], 1, NOW, NOW)
    with pytest.raises(MetadataReplayError, match="cannot appear within a snapshot"):
        ms.from_snapshot(data, SnapshotId(1, 1))


def test_a_follower_replays_a_transaction_at_its_end() -> None:
    """The networked store (every node, followers too) as the Raft driver feeds it."""
    store = RaftMetadataStore(None, CLUSTER, clock=lambda: NOW)
    replayed: list[int] = []
    store.on_replayed = lambda: replayed.append(store.applied)

    def commit(records: list[Any], first: int) -> None:
        store.on_committed([Entry(first + i, 1, r.encode(rec)) for i, rec in enumerate(records)])

    commit(topic_records("before"), 0)
    commit([r.BeginTransactionRecord(), *topic_records("a", 3)], 2)
    assert set(store.topics) == {"before"} and store.in_transaction
    assert store.applied == 1, "the transaction's records are not replayed yet"
    commit([*topic_records("b"), r.EndTransactionRecord()], 7)
    assert set(store.topics) == {"before", "a", "b"} and not store.in_transaction
    assert store.applied == 9 and store.image.offset == 9
    assert store.topics["a"].partitions == 3
    assert replayed[-1] == 9


# -- the store: commits of several batches, cut by a crash ----------------------------------


def open_store(d: Path, batch_bytes: int = 2000, **configs: str) -> RaftMetadataStore:
    conf = {k.replace("_", "."): v for k, v in configs.items()}
    store = RaftMetadataStore.open(str(d), 1, CLUSTER, clock=ManualClock(NOW), configs=conf)
    store.max_batch_bytes = batch_bytes  # small batches: a few topics take several
    return store


def start(d: Path, **configs: str) -> tuple[RaftMetadataStore, LocalController]:
    store = open_store(d, **configs)
    ctl = LocalController(store, 1, {})
    ctl.start([Listener("PLAINTEXT", "127.0.0.1", 9092)], [uuid.UUID(int=1)], None, None, NOW)
    return store, ctl


def create_topics(store: RaftMetadataStore, names: list[str]) -> int:
    """CreateTopics of `names` (3 partitions each) in one commit; the offset it starts at."""
    planned = QuorumController(image=store.image).create_topics(
        [TopicRequest(n, 3, 1) for n in names]
    )
    assert all(t.error_code == 0 for t in planned.response)
    first = store.next_offset
    store.commit(planned.records, "create topics")
    return first


def batch_positions(d: Path) -> list[tuple[int, int]]:
    """(base offset, file position) of every batch of the log's only segment."""
    data = (d / DIR_NAME / "00000000000000000000.log").read_bytes()
    return [(h.base_offset, pos) for pos, h in rb.iter_headers(data)]


def cut_before(d: Path, offset: int) -> None:
    """Cut the segment just before the batch at `offset`: a crash that wrote only what came
    before it (recovery keeps whole batches, so this is what any crash inside it leaves)."""
    pos = dict(batch_positions(d))[offset]
    with open(d / DIR_NAME / "00000000000000000000.log", "r+b") as f:
        f.truncate(pos)


def test_a_large_commit_is_one_transaction_over_several_batches(tmp_path: Path) -> None:
    store, _ = start(tmp_path)
    first = create_topics(store, NAMES)
    assert set(NAMES) <= set(store.topics)
    txn_batches = [base for base, _ in batch_positions(tmp_path) if base >= first]
    assert len(txn_batches) >= 3
    store.close()
    recs = [rec for offset, rec in metadata_records(str(tmp_path)) if offset >= first]
    assert (
        recs[0] == r.BeginTransactionRecord(name="create topics")
        and recs[-1] == r.EndTransactionRecord()
    )
    assert sum(isinstance(rec, r.TopicRecord) for rec in recs) == len(NAMES)
    single = RaftMetadataStore.open(
        str(tmp_path), 1, CLUSTER, clock=ManualClock(NOW)
    )  # 1 MiB batches
    assert set(NAMES) <= set(single.topics)
    before = single.next_offset
    single.commit(topic_records("small"))
    assert [type(rec).__name__ for o, rec in metadata_records(str(tmp_path)) if o >= before] == [
        "TopicRecord",
        "PartitionRecord",
    ], "a commit that fits one batch has no Begin/End"
    single.close()


@pytest.mark.parametrize("kept", [1, 2, -1])
def test_a_crash_between_the_batches_leaves_none_of_the_topics(tmp_path: Path, kept: int) -> None:
    store, _ = start(tmp_path)
    first = create_topics(store, NAMES)
    store.close()
    txn_batches = [base for base, _ in batch_positions(tmp_path) if base >= first]
    cut_before(tmp_path, txn_batches[kept])  # the first `kept` batches (-1: all but the last)

    again = open_store(tmp_path)
    assert again.in_transaction, "the log ends inside the transaction"
    assert not set(NAMES) & set(again.topics), "none of it is applied"
    again.close()

    restarted, _ = start(tmp_path)  # the active controller aborts it first
    assert not restarted.in_transaction and not set(NAMES) & set(restarted.topics)
    assert 1 in restarted.image.brokers and not restarted.image.brokers[1].fenced, (
        "the start after it applies"
    )
    create_topics(restarted, NAMES)  # and the topics can be created again, whole
    assert set(NAMES) <= set(restarted.topics)
    restarted.close()
    recs = [rec for offset, rec in metadata_records(str(tmp_path)) if offset >= first]
    aborts = [rec for rec in recs if isinstance(rec, r.AbortTransactionRecord)]
    assert aborts == [r.AbortTransactionRecord(reason=FAILOVER_REASON)]
    last = open_store(tmp_path)
    assert set(NAMES) <= set(last.topics) and all(last.topics[n].partitions == 3 for n in NAMES)
    last.close()


def test_a_snapshot_asked_for_inside_a_transaction_waits_for_its_end(tmp_path: Path) -> None:
    store, _ = start(tmp_path)
    first = create_topics(store, NAMES)
    store.close()
    cut_before(tmp_path, [base for base, _ in batch_positions(tmp_path) if base >= first][1])
    again = open_store(tmp_path)
    assert again.in_transaction
    assert again.snapshot() is None, "deferred: the image is not that of the log's end"
    assert again.node.log.latest_snapshot() is None and again.node.log.start_offset == 0
    assert again.abort_open_transaction()
    sid = again.node.log.latest_snapshot()
    assert sid is not None and sid.end_offset == again.next_offset, (
        "taken once the Abort is replayed"
    )
    assert again.node.log.start_offset == sid.end_offset
    data = again.node.log.read_snapshot(sid)
    assert data is not None and not set(NAMES) & set(ms.from_snapshot(data, sid).topics_by_name)
    again.close()
    loaded = open_store(tmp_path)
    assert not loaded.in_transaction and not set(NAMES) & set(loaded.topics)
    loaded.close()


def test_automatic_snapshots_skip_an_open_transaction(tmp_path: Path) -> None:
    """The byte threshold is passed by replaying a log that ends inside a transaction: the
    snapshot waits for the Abort."""
    store, _ = start(tmp_path)
    first = create_topics(store, NAMES)
    store.close()
    cut_before(tmp_path, [base for base, _ in batch_positions(tmp_path) if base >= first][-1])
    again = open_store(tmp_path, metadata_log_max_record_bytes_between_snapshots="1500")
    assert again.in_transaction and again.node.log.latest_snapshot() is None
    again.abort_open_transaction()
    sid = again.node.log.latest_snapshot()
    assert sid is not None and sid.end_offset == again.next_offset
    again.close()
