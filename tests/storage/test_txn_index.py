"""The .txnindex file on its own: Kafka's byte layout (built here from the format with struct,
not with the code under test), lazy creation, truncation, the search a fetch makes, torn tails,
renames and deletes with the segment, and Kafka-written files read back."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.storage.index import CorruptIndexError
from gregor.storage.segment import LogSegment
from gregor.storage.txn_index import ENTRY_SIZE, TransactionIndex, TxnIndexEntry

# AbortedTxn, as Kafka's TransactionIndex writes it: version int16 = 0, producerId int64,
# firstOffset int64, lastOffset int64, lastStableOffset int64, big-endian.
KAFKA_ENTRY = struct.Struct(">hqqqq")


def kafka_bytes(*entries: tuple[int, int, int, int]) -> bytes:
    return b"".join(KAFKA_ENTRY.pack(0, *e) for e in entries)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def index(tmp_path) -> TransactionIndex:
    idx = TransactionIndex(str(tmp_path / "00000000000000000100.txnindex"), 100)
    yield idx
    idx.close()


def test_entries_are_kafkas_34_bytes_big_endian(index: TransactionIndex) -> None:
    assert ENTRY_SIZE == KAFKA_ENTRY.size == 34
    entries = [(7, 90, 104, 95), ((1 << 62) + 3, 100, 200, 201), (-5 & 0x7FFF, 150, 300, 150)]
    for e in entries:
        index.append(TxnIndexEntry(*e))
    assert read(index.path) == kafka_bytes(*entries)
    assert index.all_entries() == [TxnIndexEntry(*e) for e in entries]


def test_the_file_exists_only_once_there_is_an_aborted_transaction(index: TransactionIndex) -> None:
    assert not os.path.exists(index.path)
    assert index.is_empty() and index.all_entries() == [] and index.collect(0, 1000) == ([], False)
    index.truncate_to(0)
    index.reset()
    index.flush()
    assert not os.path.exists(index.path)
    index.append(TxnIndexEntry(1, 100, 105, 106))
    assert os.path.getsize(index.path) == 34
    index.reset()  # a recovery's rebuild starts from nothing: no file
    assert not os.path.exists(index.path) and index.is_empty()


def test_markers_must_increase(index: TransactionIndex) -> None:
    index.append(TxnIndexEntry(1, 100, 105, 106))
    with pytest.raises(ValueError):
        index.append(TxnIndexEntry(2, 100, 105, 106))
    with pytest.raises(ValueError):
        index.append(TxnIndexEntry(2, 100, 104, 106))
    # Also when the last entry is only known from the file (a reopened index).
    again = TransactionIndex(index.path, 100)
    with pytest.raises(ValueError):
        again.append(TxnIndexEntry(2, 101, 103, 106))
    again.append(TxnIndexEntry(2, 101, 110, 111))
    again.close()
    assert read(index.path) == kafka_bytes((1, 100, 105, 106), (2, 101, 110, 111))


@pytest.mark.parametrize(
    ("offset", "kept"),
    [(0, 0), (105, 0), (106, 1), (120, 1), (121, 2), (130, 2), (131, 3), (10_000, 3)],
)
def test_truncate_to_drops_entries_with_a_marker_at_or_above(
    index: TransactionIndex, offset: int, kept: int
) -> None:
    entries = [(1, 100, 105, 106), (2, 101, 120, 121), (3, 125, 130, 131)]
    for e in entries:
        index.append(TxnIndexEntry(*e))
    index.truncate_to(offset)
    if kept == 0:
        assert not os.path.exists(index.path)
    else:
        assert read(index.path) == kafka_bytes(*entries[:kept])
    # Appends go on after the truncation point.
    index.append(TxnIndexEntry(9, 131, 140, 141))
    assert index.all_entries()[-1] == TxnIndexEntry(9, 131, 140, 141)
    assert len(index.all_entries()) == kept + 1


def _kafka_collect(entries, fetch_offset, upper):
    """Kafka's TransactionIndex.collectAbortedTxns, transcribed as a scan from the start."""
    out = []
    for e in entries:
        if e[2] >= fetch_offset and e[1] < upper:
            out.append(TxnIndexEntry(*e))
        if e[3] >= upper:
            return out, True
    return out, False


def _random_entries(rng: random.Random, n: int) -> list[tuple[int, int, int, int]]:
    """Entries a log could write: markers increasing, each txn begun before its marker, and the
    LSO at most the marker + 1 (and not above an earlier-begun other txn)."""
    out = []
    marker = 100
    for _ in range(n):
        marker += rng.randint(1, 20)
        first = rng.randint(max(0, marker - 60), marker - 1)
        lso = rng.choice([marker + 1, rng.randint(first, marker)])
        out.append((rng.randint(1, 5), first, marker, lso))
    return out


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 2500),
    fetch=st.integers(0, 30_000),
    width=st.integers(1, 2000),
)
def test_collect_finds_what_kafkas_scan_finds(
    tmp_path_factory, seed: int, n: int, fetch: int, width: int
) -> None:
    # Up to 2500 entries: more than one read chunk, and a binary search with many steps.
    rng = random.Random(seed)
    entries = _random_entries(rng, n)
    d = tmp_path_factory.mktemp("idx")
    idx = TransactionIndex(str(d / "x.txnindex"), 0)
    with open(idx.path, "wb") as f:
        f.write(kafka_bytes(*entries))
    fetch = fetch % (entries[-1][2] + 10) if entries else fetch
    try:
        assert idx.collect(fetch, fetch + width) == _kafka_collect(entries, fetch, fetch + width)
    finally:
        idx.close()


def test_a_torn_last_entry_is_ignored_and_cut_by_the_next_append(index: TransactionIndex) -> None:
    whole = kafka_bytes((1, 100, 105, 106), (2, 101, 120, 121))
    with open(index.path, "wb") as f:
        f.write(whole + kafka_bytes((3, 122, 130, 131))[:20])  # a crash mid-append
    index = TransactionIndex(index.path, 100)
    assert index.all_entries() == [TxnIndexEntry(1, 100, 105, 106), TxnIndexEntry(2, 101, 120, 121)]
    assert index.collect(0, 10_000) == (index.all_entries(), False)
    index.append(TxnIndexEntry(4, 125, 127, 128))
    index.close()
    assert read(index.path) == whole + kafka_bytes((4, 125, 127, 128))


def test_an_unknown_version_is_corrupt(index: TransactionIndex) -> None:
    with open(index.path, "wb") as f:
        f.write(kafka_bytes((1, 100, 105, 106)) + struct.pack(">hqqqq", 1, 2, 101, 120, 121))
    with pytest.raises(CorruptIndexError):
        index.all_entries()
    with pytest.raises(CorruptIndexError):
        index.collect(0, 1000)


@pytest.mark.parametrize(
    "entries",
    [
        [(1, 10, 99, 100)],  # its marker is below the segment's base (Kafka's sanity check)
        [(1, 100, 120, 121), (2, 101, 110, 121)],  # markers out of order
        [(1, 130, 120, 121)],  # begins after its marker
    ],
)
def test_sanity_check(index: TransactionIndex, entries) -> None:
    with open(index.path, "wb") as f:
        f.write(kafka_bytes(*entries))
    with pytest.raises(CorruptIndexError):
        index.sanity_check()


def test_reads_a_file_kafka_wrote(tmp_path) -> None:
    # What Kafka's TransactionIndex leaves after aborts by two producers across a segment: the
    # second one's LSO is the first offset of producer 11's transaction, still open then.
    path = tmp_path / "00000000000000001000.txnindex"
    path.write_bytes(bytes.fromhex(
        "0000" "000000000000000a" "00000000000003e8" "00000000000003f2" "00000000000003f3"
        "0000" "000000000000000c" "00000000000003ea" "00000000000003f8" "00000000000003f5"
    ))  # fmt: skip
    idx = TransactionIndex(str(path), 1000)
    idx.sanity_check()
    assert idx.all_entries() == [
        TxnIndexEntry(10, 1000, 1010, 1011),
        TxnIndexEntry(12, 1002, 1016, 1013),
    ]
    assert idx.collect(1011, 1012) == ([TxnIndexEntry(12, 1002, 1016, 1013)], True)
    assert idx.collect(1000, 1011) == ([TxnIndexEntry(10, 1000, 1010, 1011)], True)
    idx.close()


def test_the_segment_renames_and_deletes_it_with_its_other_files(tmp_path) -> None:
    d = str(tmp_path)
    seg = LogSegment(
        d,
        100,
        index_interval_bytes=4096,
        max_index_size=1 << 16,
        active=True,
        now_ms=0,
        file_suffix=".cleaned",
    )
    seg.ensure_created()
    seg.txn_index.append(TxnIndexEntry(1, 100, 105, 106))
    seg.change_file_suffixes(".cleaned", ".swap")
    seg.change_file_suffixes(".swap", "")
    assert sorted(os.listdir(d)) == ["00000000000000000100.log", "00000000000000000100.txnindex"]
    seg.txn_index.append(TxnIndexEntry(2, 106, 110, 111))  # still the same file, open
    seg.flush()
    seg.rename_to_deleted()
    assert "00000000000000000100.txnindex.deleted" in os.listdir(d)
    assert read(os.path.join(d, "00000000000000000100.txnindex.deleted")) == kafka_bytes(
        (1, 100, 105, 106), (2, 106, 110, 111)
    )
    seg.delete()
    assert os.listdir(d) == []


def test_a_segment_without_aborts_has_no_txnindex_and_costs_no_read(tmp_path, monkeypatch) -> None:
    seg = LogSegment(
        str(tmp_path), 0, index_interval_bytes=4096, max_index_size=1 << 16, active=True, now_ms=0
    )
    seg.ensure_created()
    seg.flush()
    seg.truncate_to(0)
    seg.rename_to_deleted()
    assert not any("txnindex" in n for n in os.listdir(tmp_path))
    reads = []
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a))
    assert seg.txn_index.collect(0, 100) == ([], False) and reads == []
