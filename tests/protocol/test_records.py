"""RecordBatch v2 codec: build/decode round trips, validation refusals, in-place patches, and a
byte-for-byte cross-check against independent implementations (kafka-python, kio)."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records import compression
from gregor.protocol.records.records import (
    build_batch,
    decode_varint,
    encode_varint,
    iter_records,
    read_batch_records,
)

CODECS = [
    rb.COMPRESSION_NONE,
    rb.COMPRESSION_GZIP,
    rb.COMPRESSION_SNAPPY,
    rb.COMPRESSION_LZ4,
    rb.COMPRESSION_ZSTD,
]

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TIMESTAMPS = st.integers(0, 1 << 45)

headers_st = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=24))), max_size=3
)
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    headers_st,
)


@st.composite
def batch_specs(draw, max_records: int = 20):
    recs = draw(st.lists(record_st, min_size=1, max_size=max_records))
    first = draw(TIMESTAMPS)
    # Timestamps may go backwards inside a batch (negative deltas are legal).
    stamps = [first + draw(st.integers(-(1 << 20), 1 << 30)) for _ in recs]
    stamps[0] = first
    return {
        "records": recs,
        "timestamps": stamps,
        "base_offset": draw(st.integers(0, 1 << 50)),
        "compression_type": draw(st.sampled_from(CODECS)),
        "producer_id": draw(st.one_of(st.just(-1), st.integers(0, 1 << 40))),
        "producer_epoch": draw(st.integers(-1, 32767)),
        "base_sequence": draw(st.one_of(st.just(-1), st.integers(0, (1 << 31) - 1))),
        "partition_leader_epoch": draw(st.integers(-1, (1 << 31) - 1)),
        "transactional": draw(st.booleans()),
    }


def _expect(code: int, fn, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, f"expected {errors.name_of(code)}, got {info.value}"
    return info.value


def _simple(n: int = 3, compression_type: int = rb.COMPRESSION_NONE, **kw) -> bytearray:
    return build_batch(
        [(f"k{i}".encode(), f"value-{i}".encode() * (i + 1), [("h", b"x")]) for i in range(n)],
        base_timestamp=1_700_000_000_000,
        compression_type=compression_type,
        **kw,
    )


# -- round trip ------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=batch_specs())
def test_build_decode_round_trip(spec):
    buf = build_batch(
        spec["records"],
        base_offset=spec["base_offset"],
        timestamps=spec["timestamps"],
        compression_type=spec["compression_type"],
        producer_id=spec["producer_id"],
        producer_epoch=spec["producer_epoch"],
        base_sequence=spec["base_sequence"],
        partition_leader_epoch=spec["partition_leader_epoch"],
        transactional=spec["transactional"],
    )
    n = len(spec["records"])
    header = rb.check_batch(buf, 0, len(buf))
    assert header.size == len(buf)
    assert header.base_offset == spec["base_offset"]
    assert header.magic == 2
    assert header.records_count == n
    assert header.last_offset_delta == n - 1
    assert header.last_offset == spec["base_offset"] + n - 1
    assert header.base_timestamp == spec["timestamps"][0]
    assert header.max_timestamp == max(spec["timestamps"])
    assert header.compression == spec["compression_type"]
    assert header.producer_id == spec["producer_id"]
    assert header.producer_epoch == spec["producer_epoch"]
    assert header.base_sequence == spec["base_sequence"]
    assert header.partition_leader_epoch == spec["partition_leader_epoch"]
    assert header.is_transactional == spec["transactional"]
    assert not header.is_control and not header.is_log_append_time
    assert header.crc == crc32c(bytes(buf[rb.ATTRIBUTES_OFFSET :]))

    header2, records = read_batch_records(buf)
    assert header2 == header
    assert len(records) == n
    for i, (rec, (key, value, hdrs), ts) in enumerate(
        zip(records, spec["records"], spec["timestamps"], strict=True)
    ):
        assert rec.offset == spec["base_offset"] + i
        assert rec.timestamp == ts
        assert rec.key == key
        assert rec.value == value
        assert rec.headers == [(k, v) for k, v in hdrs]

    # The same batch decoded by kafka-python (gzip is the one codec it has here).
    if spec["compression_type"] in (rb.COMPRESSION_NONE, rb.COMPRESSION_GZIP):
        theirs = DefaultRecordBatch(bytes(buf))
        assert theirs.validate_crc()
        got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
        want = [
            (spec["base_offset"] + i, ts, k, v, list(h))
            for i, ((k, v, h), ts) in enumerate(
                zip(spec["records"], spec["timestamps"], strict=True)
            )
        ]
        assert got == want


def test_null_key_and_tombstone_are_distinct_from_empty():
    buf = build_batch([(None, None), (b"", b""), (None, b"v"), (b"k", None)], base_timestamp=5)
    _h, recs = read_batch_records(buf)
    assert [(r.key, r.value) for r in recs] == [
        (None, None),
        (b"", b""),
        (None, b"v"),
        (b"k", None),
    ]
    # A null key is varint -1 (0x01 zigzag), an empty one varint 0: the bytes differ.
    assert build_batch([(None, b"v")]) != build_batch([(b"", b"v")])


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_and_uses_kafka_framing(codec):
    recs = [(f"key{i}".encode(), b"abcdefgh" * 40, [("trace", b"id-%d" % i)]) for i in range(50)]
    buf = build_batch(recs, base_offset=7, base_timestamp=1000, compression_type=codec)
    header = rb.check_batch(buf, 0, len(buf))
    assert header.compression == codec
    _h, out = read_batch_records(buf)
    assert [(r.key, r.value, r.headers) for r in out] == [(k, v, h) for k, v, h in recs]
    body = bytes(buf[rb.HEADER_SIZE :])
    plain = bytes(build_batch(recs, base_offset=7, base_timestamp=1000)[rb.HEADER_SIZE :])
    if codec == rb.COMPRESSION_NONE:
        assert body == plain
        return
    assert len(body) < len(plain)  # repetitive data really is compressed
    if codec == rb.COMPRESSION_GZIP:
        assert body[:2] == b"\x1f\x8b"
        assert gzip.decompress(body) == plain  # the standard library is an independent decoder
    elif codec == rb.COMPRESSION_SNAPPY:
        assert bytes(cramjam.snappy.decompress_raw(body)) == plain
    elif codec == rb.COMPRESSION_LZ4:
        assert body[:4] == bytes.fromhex("04224d18")  # LZ4 frame magic 0x184D2204, little-endian
        assert bytes(cramjam.lz4.decompress(body)) == plain
    elif codec == rb.COMPRESSION_ZSTD:
        assert body[:4] == bytes.fromhex("28b52ffd")  # zstd frame magic 0xFD2FB528, little-endian
        assert bytes(cramjam.zstd.decompress(body)) == plain


def test_xerial_snappy_as_the_java_client_writes_it():
    recs = [(b"k", b"hello world " * 30)] * 20
    plain = bytes(build_batch(recs)[rb.HEADER_SIZE :])
    # Java's xerial framing: magic, version 1, compatible 1, then length-prefixed raw blocks.
    framed = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(plain), 100):
        block = bytes(cramjam.snappy.compress_raw(plain[i : i + 100]))
        framed += struct.pack(">i", len(block)) + block
    assert compression.decompress(rb.COMPRESSION_SNAPPY, bytes(framed)) == plain
    # A block length that runs past the end is CORRUPT_MESSAGE, not a crash.
    _expect(
        errors.CORRUPT_MESSAGE, compression.decompress, rb.COMPRESSION_SNAPPY, bytes(framed[:-5])
    )
    _expect(
        errors.CORRUPT_MESSAGE,
        compression.decompress,
        rb.COMPRESSION_SNAPPY,
        bytes(framed) + b"\x00\x00",
    )


@pytest.mark.parametrize("codec", CODECS[1:])
def test_damaged_compressed_data_is_corrupt_message(codec):
    data = compression.compress(codec, b"some data " * 100)
    _expect(errors.CORRUPT_MESSAGE, compression.decompress, codec, b"\x00garbage" + data[8:])


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    _expect(errors.UNSUPPORTED_COMPRESSION_TYPE, compression.compress, codec, b"x")
    _expect(errors.UNSUPPORTED_COMPRESSION_TYPE, compression.decompress, codec, b"x")


def test_iter_records_over_concatenated_batches_stops_at_partial_batch():
    a = build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0, base_timestamp=10)
    b = build_batch(
        [(b"c", b"3")], base_offset=2, base_timestamp=20, compression_type=rb.COMPRESSION_GZIP
    )
    c = build_batch([(b"d", b"4")], base_offset=3, base_timestamp=30)
    buf = bytes(a + b + c)
    assert [(r.offset, r.key) for _h, r in iter_records(buf)] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
        (3, b"d"),
    ]
    # A fetch may end with part of a batch: every cut yields exactly the whole batches before it.
    ends = [len(a), len(a) + len(b), len(buf)]
    for cut in range(len(buf) + 1):
        whole = sum(1 for e in ends if e <= cut)
        assert [pos for pos, _h in rb.iter_headers(buf[:cut])] == [0, len(a), len(a) + len(b)][
            :whole
        ]


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varint_round_trip(value):
    out = bytearray()
    encode_varint(value, out)
    assert decode_varint(out, 0) == (value, len(out))
    assert len(out) <= 10
    # Zigzag: small magnitudes take one byte whatever their sign.
    if -64 <= value < 64:
        assert len(out) == 1
    # Cut short, it is CORRUPT_MESSAGE.
    _expect(errors.CORRUPT_MESSAGE, decode_varint, out[:-1], 0)


def test_varint_known_bytes():
    # Kafka's zigzag varints: 0 -> 00, -1 -> 01, 1 -> 02, 63 -> 7e, -64 -> 7f, 64 -> 8001.
    for value, raw in [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
    ]:
        out = bytearray()
        encode_varint(value, out)
        assert out.hex() == raw
    _expect(errors.CORRUPT_MESSAGE, decode_varint, b"\xff" * 11, 0)


# -- validation ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(spec=batch_specs(max_records=5), data=st.data())
def test_truncated_batch_is_corrupt(spec, data):
    buf = bytes(
        build_batch(
            spec["records"],
            timestamps=spec["timestamps"],
            compression_type=spec["compression_type"],
        )
    )
    cut = data.draw(st.integers(0, len(buf) - 1))
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf[:cut], 0, cut)
    # The same cut seen through a larger buffer whose `end` is the cut.
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, 0, cut)


def test_every_truncation_of_one_batch_is_corrupt():
    buf = bytes(_simple(4))
    for cut in range(len(buf)):
        _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf[:cut], 0, cut)
    assert rb.check_batch(buf, 0, len(buf)).records_count == 4


@pytest.mark.parametrize("length", [-1, 0, 1, 48, (1 << 31) - 1])
def test_bad_batch_length_is_corrupt(length):
    buf = bytearray(_simple(3))
    struct.pack_into(">i", buf, rb.LENGTH_OFFSET, length)
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, 0, len(buf))


def test_batch_length_a_little_short_or_long_is_corrupt():
    good = bytes(_simple(3))
    true_len = len(good) - rb.LOG_OVERHEAD
    for delta in (-5, -1, 1, 5):
        buf = bytearray(good + b"\x00" * 8)
        struct.pack_into(">i", buf, rb.LENGTH_OFFSET, true_len + delta)
        # Shorter: the CRC covers fewer bytes and no longer matches; longer: it covers more.
        _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, 0, len(buf))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_wrong_magic_is_corrupt(magic):
    buf = bytearray(_simple(2))
    struct.pack_into(">b", buf, rb.MAGIC_OFFSET, magic)
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, 0, len(buf))


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    where=st.floats(0, 1, exclude_max=True),
    xor=st.integers(1, 255),
)
def test_any_flipped_byte_under_the_crc_is_corrupt(codec, where, xor):
    buf = bytearray(_simple(5, codec))
    pos = rb.CRC_OFFSET + int(
        where * (len(buf) - rb.CRC_OFFSET)
    )  # the CRC itself or what it covers
    buf[pos] ^= xor
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, 0, len(buf))


def test_fields_outside_the_crc_can_change_without_breaking_it():
    # baseOffset and partitionLeaderEpoch are outside the CRC: the broker stamps them freely.
    for pos in list(range(0, 8)) + list(range(12, 16)):
        buf = bytearray(_simple(2))
        buf[pos] ^= 0x5A
        rb.check_batch(buf, 0, len(buf))


def _resigned(buf: bytearray, field_offset: int, fmt: str, value: int) -> bytearray:
    struct.pack_into(fmt, buf, field_offset, value)
    rb.resign(buf, 0, len(buf))
    return buf


@pytest.mark.parametrize("count", [0, -1])
def test_non_positive_record_count_is_invalid_record(count):
    buf = _resigned(bytearray(_simple(1)), 57, ">i", count)
    err = _expect(errors.INVALID_RECORD, rb.check_batch, buf, 0, len(buf))
    assert "records" in err.message


@pytest.mark.parametrize("delta", [-1, 0, 1, 3, 100])
def test_last_offset_delta_disagreeing_with_count_is_invalid_record(delta):
    buf = _resigned(bytearray(_simple(3)), 23, ">i", delta)  # 3 records: only 2 is right
    _expect(errors.INVALID_RECORD, rb.check_batch, buf, 0, len(buf))


def test_resign_restores_a_valid_crc():
    buf = _resigned(bytearray(_simple(3)), 23, ">i", 2)  # rewriting the right value
    assert rb.check_batch(buf, 0, len(buf)).last_offset_delta == 2
    buf[40] ^= 1
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, 0, len(buf))
    rb.resign(buf, 0, len(buf))
    rb.check_batch(buf, 0, len(buf))


def test_size_above_max_is_message_too_large():
    buf = _simple(3)
    size = len(buf)
    _expect(errors.MESSAGE_TOO_LARGE, rb.check_batch, buf, 0, size, size - 1)
    assert rb.check_batch(buf, 0, size, size).size == size


def test_check_batch_at_an_offset_within_a_buffer():
    a, b = _simple(2), _simple(3, rb.COMPRESSION_ZSTD)
    buf = bytearray(a + b + b"\x00\x01")
    h = rb.check_batch(buf, len(a), len(a) + len(b))
    assert h.records_count == 3 and h.size == len(b)
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, buf, len(a), len(a) + len(b) - 1)
    # peek and iter_headers agree with the header.
    assert rb.peek_offset_and_size(buf, len(a)) == (h.base_offset, len(b))


# -- patches ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    offset=st.integers(0, (1 << 63) - 1),
    epoch=st.integers(-1, (1 << 31) - 1),
)
def test_patch_base_offset_and_leader_epoch_keep_the_crc(codec, offset, epoch):
    original = _simple(4, codec)
    buf = bytearray(b"\xee" * 7 + original)  # at a non-zero position
    rb.patch_base_offset(buf, 7, offset)
    rb.patch_partition_leader_epoch(buf, 7, epoch)
    h = rb.check_batch(buf, 7, len(buf))
    assert (h.base_offset, h.partition_leader_epoch) == (offset, epoch)
    assert h.crc == rb.read_header(original).crc
    assert buf[7 + 16 :] == original[16:]  # nothing but the two fields changed
    _h, recs = read_batch_records(buf, 7)
    assert [r.offset for r in recs] == [offset + i for i in range(4)]


@pytest.mark.parametrize("codec", CODECS)
def test_patch_log_append_time_resigns(codec):
    buf = bytearray(_simple(3, codec))
    before = rb.read_header(buf)
    rb.patch_log_append_time(buf, 0, len(buf), 1_800_000_000_123)
    h = rb.check_batch(buf, 0, len(buf))
    assert h.is_log_append_time
    assert h.max_timestamp == 1_800_000_000_123
    assert h.compression == codec  # the other attribute bits survive
    assert h.crc != before.crc
    # Without re-signing, the same edits break the CRC.
    raw = bytearray(_simple(3, codec))
    struct.pack_into(">h", raw, rb.ATTRIBUTES_OFFSET, before.attributes | rb.TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", raw, rb.MAX_TIMESTAMP_OFFSET, 1_800_000_000_123)
    _expect(errors.CORRUPT_MESSAGE, rb.check_batch, raw, 0, len(raw))
    # kafka-python reads a LogAppendTime batch's record timestamps as the batch max timestamp.
    if codec in (rb.COMPRESSION_NONE, rb.COMPRESSION_GZIP):
        theirs = DefaultRecordBatch(bytes(buf))
        assert theirs.validate_crc()
        assert [r.timestamp for r in theirs] == [1_800_000_000_123] * 3


def test_header_flags():
    h = rb.read_header(
        build_batch(
            [(b"k", b"v")],
            transactional=True,
            control=True,
            log_append_time=True,
            producer_id=5,
            producer_epoch=1,
            base_sequence=(1 << 31) - 1,
        )
    )
    assert h.is_transactional and h.is_control and h.is_log_append_time
    assert h.last_sequence == (1 << 31) - 1
    h = rb.read_header(build_batch([(b"k", b"v")] * 3, base_sequence=(1 << 31) - 2))
    assert h.last_sequence == 0  # sequences wrap at int32 max
    assert rb.read_header(build_batch([(b"k", b"v")])).last_sequence == -1


# -- cross-check with independent implementations --------------------------------------------


@settings(max_examples=100, deadline=None)
@given(spec=batch_specs(), codec=st.sampled_from([rb.COMPRESSION_NONE, rb.COMPRESSION_GZIP]))
def test_same_bytes_as_kafka_python(spec, codec):
    pid = spec["producer_id"]
    epoch = spec["producer_epoch"] if pid >= 0 else -1
    seq = spec["base_sequence"] if pid >= 0 else -1
    if pid >= 0 and epoch < 0:
        epoch = 0
    if pid >= 0 and seq < 0:
        seq = 0
    txn = spec["transactional"] and pid >= 0
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=txn,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 30,
    )
    for i, ((key, value, hdrs), ts) in enumerate(
        zip(spec["records"], spec["timestamps"], strict=True)
    ):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=list(hdrs)) is not None
    theirs = bytes(builder.build())
    their_header = rb.read_header(theirs)
    # kafka-python stamps base offset 0 and leader epoch 0, and sends uncompressed when
    # compression does not pay; build ours with the same choices.
    ours = build_batch(
        spec["records"],
        timestamps=spec["timestamps"],
        compression_type=their_header.compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        partition_leader_epoch=0,
        transactional=txn,
    )
    if their_header.compression == rb.COMPRESSION_NONE:
        assert bytes(ours) == theirs
    else:
        # Compressors differ in their output bytes; the headers (apart from length and CRC)
        # and the decoded records must not.
        mine = rb.read_header(ours)
        assert mine._replace(batch_length=0, crc=0) == their_header._replace(batch_length=0, crc=0)
    # Ours decodes theirs; theirs decodes ours.
    rb.check_batch(theirs, 0, len(theirs))
    _h, recs = read_batch_records(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (i, ts, k, v, list(hd))
        for i, ((k, v, hd), ts) in enumerate(zip(spec["records"], spec["timestamps"], strict=True))
    ]
    back = DefaultRecordBatch(bytes(ours))
    assert back.validate_crc()
    assert [(r.offset, r.key, r.value) for r in back] == [(r.offset, r.key, r.value) for r in recs]


def test_kafka_python_batch_with_known_fields_byte_for_byte():
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=1234,
        producer_epoch=7,
        base_sequence=42,
        batch_size=1 << 20,
    )
    rows = [(None, b"tombstone?", []), (b"key", None, [("a", None), ("b", b"")]), (b"", b"", [])]
    for i, (k, v, h) in enumerate(rows):
        builder.append(i, timestamp=1_600_000_000_000 + 10 * i, key=k, value=v, headers=h)
    theirs = bytes(builder.build())
    ours = build_batch(
        rows,
        base_timestamp=1_600_000_000_000,
        timestamps=[1_600_000_000_000 + 10 * i for i in range(3)],
        producer_id=1234,
        producer_epoch=7,
        base_sequence=42,
        partition_leader_epoch=0,
    )
    assert bytes(ours) == theirs
    h = rb.check_batch(theirs, 0, len(theirs))
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (1234, 7, 42, 44)


def test_kio_decodes_our_batches():
    from kio.records.readers import read_batch

    recs = [(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(1, 6)] + [(None, None)]
    buf = bytes(
        build_batch(
            recs, base_offset=100, base_timestamp=1_700_000_000_000, partition_leader_epoch=3
        )
    )
    batch, size = read_batch(memoryview(buf), 0)  # checks the CRC and every length
    assert size == len(buf)
    assert batch.base_offset == 100 and batch.partition_leader_epoch == 3
    assert [(r.offset, r.key, r.value) for r in batch.records] == [
        (100 + i, rec[0], rec[1]) for i, rec in enumerate(recs)
    ]
