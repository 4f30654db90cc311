"""The leader's walk of a client's records (records/validate.py): valid batches of every codec
pass, from our builder and from kafka-python's and aiokafka's as oracles; each malformation is
refused with the code Kafka answers; the log refuses such a batch whole and stays appendable;
and a seeded mutation fuzz of valid batches through `Log.append` finds nothing accepted that
does not read back with consistent offsets, and no exception but a KafkaError."""

from __future__ import annotations

import random
import re
import tracemalloc
from typing import Any

import pytest
from aiokafka.codec import snappy_encode
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as AioBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records import compression
from gregor.protocol.records import validate as v
from gregor.protocol.records.records import (
    build_batch,
    encode_record,
    iter_records,
    read_batch_records,
)
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin
from gregor.testing.batches import (
    TS,
    fields,
    good_records,
    mutate,
    raw_batch,
    record,
    seed_batch,
    varint,
)

CODECS = range(5)
REFUSALS = {
    errors.CORRUPT_MESSAGE,
    errors.INVALID_RECORD,
    errors.UNSUPPORTED_COMPRESSION_TYPE,
    errors.MESSAGE_TOO_LARGE,
}


def check(batch: bytes | bytearray, **kwargs: Any) -> None:
    """check_client_batch on the batch, and on it inside a view of a larger buffer (a batch
    of up to 64 KiB walked in a copy of its records, a larger one through the view): both
    must say the same."""
    header = rb.check_batch(batch, 0, len(batch))
    answers = []
    for buf, pos in ((batch, 0), (memoryview(b"~" + bytes(batch) + b"~")[1:], 0)):
        try:
            v.check_client_batch(buf, pos, header, "t-0", **kwargs)
            answers.append(None)
        except KafkaError as exc:
            answers.append((exc.code, exc.message))
    assert answers[0] == answers[1]
    if answers[0] is not None:
        raise KafkaError(*answers[0])


def refused(batch: bytes | bytearray, **kwargs: Any) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        check(batch, **kwargs)
    return info.value


# -- valid batches pass -------------------------------------------------------------------------

SHAPES = [
    [(b"k", b"v")],
    [(None, None)],
    [(b"", b"")],
    [(b"key", b"x" * 20_000, [("a", b"1"), ("b", None), ("", b"")])],  # a 3-byte value length
    [(f"k{i}".encode(), bytes(i % 256)) for i in range(300)],  # 2-byte offset deltas
    [(None, b"v")] * 10_000,  # 3-byte offset deltas (8,192 and up)
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_valid_batches_of_every_codec_pass(codec: int, shape: int) -> None:
    check(build_batch(SHAPES[shape], base_timestamp=TS, compression_type=codec))


@pytest.mark.parametrize("delta", [-1, 1, 63, 64, 1 << 20, -(1 << 40), 1 << 62, -(1 << 62)])
def test_timestamp_deltas_of_every_length_pass(delta: int) -> None:
    # 1 to 10 bytes as a varlong; negative deltas are legal (records out of time order).
    base = max(0, -delta)
    check(build_batch([(None, b"a"), (None, b"b")], timestamps=[base, base + delta]))


def test_compacted_topic_batch_with_keys_passes() -> None:
    check(build_batch([(b"k", None), (b"", b"v")]), compacted=True)


@pytest.mark.parametrize("codec", [0, 1])
def test_kafka_python_batches_pass(codec: int) -> None:
    # kafka-python has gzip only here (no lz4/zstd/snappy modules installed).
    builder = KafkaPythonBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i in range(200):
        builder.append(i, TS + i, f"k{i}".encode(), b"v" * i, [("h", b"x"), ("n", None)])
    check(builder.build())


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_batches_pass(codec: int) -> None:
    # aiokafka's snappy is the Java client's xerial framing; ours and librdkafka's are raw.
    builder = AioBuilder(2, codec, 0, 7, 0, 0, 1 << 22)
    for i in range(500):
        builder.append(i, TS + 3 * i, None if i % 3 else b"k", b"v" * (i % 50), [("h", b"x")])
    batch = bytes(builder.build())
    if codec == rb.COMPRESSION_SNAPPY:
        assert batch[rb.HEADER_SIZE :].startswith(b"\x82SNAPPY\x00")
    check(batch)


def test_xerial_snappy_of_many_blocks_passes() -> None:
    body = good_records(2_000)
    framed = snappy_encode(body, xerial_compatible=True, xerial_blocksize=4096)
    assert len(framed) > 3 * 4096 // 22  # several blocks
    check(raw_batch(framed, 2_000, attributes=rb.COMPRESSION_SNAPPY))


records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(
            st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_st, st.sampled_from(list(CODECS)), st.lists(st.integers(0, 1 << 42), min_size=40))
def test_any_batch_the_builder_makes_passes(records: list, codec: int, stamps: list) -> None:
    batch = build_batch(records, timestamps=stamps[: len(records)], compression_type=codec)
    check(batch)
    _, decoded = read_batch_records(batch)
    assert [(r.key, r.value, r.headers) for r in decoded] == [
        (k, val, [(hk, hv) for hk, hv in h]) for k, val, h in records
    ]


# -- uniform runs agree with the one-by-one walk -------------------------------------------------


def outcome(walk: Any, data: bytes, count: int, need_keys: bool = False) -> tuple[Any, ...]:
    """What a walk says: why and where it refused, or "ok" and the keyless records it found
    (a compacted topic's walk, with `need_keys`)."""
    keyless: list[int] | None = [] if need_keys else None
    try:
        walk(data, count, keyless)
    except v.Malformed as exc:
        return exc.reason, exc.index, exc.position
    return ("ok", keyless)


def by_runs(data: bytes, count: int, keyless: list[int] | None) -> None:
    v.walk_records(memoryview(data), 0, len(data), count, keyless)  # a large batch, in place


def by_runs_in_bytes(data: bytes, count: int, keyless: list[int] | None) -> None:
    v.walk_records(data, 0, len(data), count, keyless)  # a small one, in a copy of its records


def one_by_one(data: bytes, count: int, keyless: list[int] | None) -> None:
    """The reference: every record through `_walk`, no runs."""
    _, pos = v._walk(data, 0, len(data), 0, count, count, keyless)
    if pos != len(data):
        raise v.Malformed(f"bytes remain after the {count} records declared", count, pos)


def uniform_records(rng: random.Random, count: int) -> tuple[bytes, int]:
    """`count` records of one size and layout (what a run takes), but for the odd one out."""
    key = rng.choice([None, b"", b"k" * rng.randint(1, 70)])
    value = rng.choice([None, b"v" * rng.randint(0, 9000)])
    step = rng.choice([0, 1, 100, 10_000])
    out = bytearray()
    for i in range(count):
        odd = rng.random() < 0.02
        encode_record(out, i, i * step, key, b"odd" if odd else value, [("h", b"")] if odd else [])
    return bytes(out), count


def test_uniform_runs_agree_with_the_walk_one_by_one() -> None:
    rng = random.Random(17)
    runs = 0
    for case in range(1500):
        body, count = uniform_records(rng, rng.choice([2, 3, 63, 64, 65, 66, 200, 1100]))
        data = bytearray(body)
        for _ in range(rng.choice([0, 1, 1, 2])):  # a byte anywhere, or a count off by one
            data[rng.randrange(len(data))] = rng.choice(
                [0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)]
            )
        count += rng.choice([0] * 8 + [-1, 1])
        need_keys = case % 5 == 0
        expected = outcome(one_by_one, bytes(data), count, need_keys)
        assert outcome(by_runs, bytes(data), count, need_keys) == expected, case
        assert outcome(by_runs_in_bytes, bytes(data), count, need_keys) == expected, case
        runs += expected[0] == "ok"
    assert runs > 300  # most cases were valid, and taken in runs


@pytest.mark.parametrize("at", [63, 64, 65, 8191, 8192, 8193, 1 << 17])
def test_runs_across_offset_delta_widths(at: int) -> None:
    # Offset deltas take 1 byte below index 64, 2 below 8,192, 3 above; runs compare them
    # against tables up to index 2**17, and stop at each of these bounds.
    n = at + 500
    body, swapped = bytearray(), bytearray()
    for i in range(n):
        encode_record(body, i, 0, None, b"x")
        encode_record(swapped, {at: at + 1, at + 1: at}.get(i, i), 0, None, b"x")
    assert outcome(by_runs, bytes(body), n) == outcome(one_by_one, bytes(body), n) == ("ok", None)
    assert outcome(by_runs_in_bytes, bytes(body), n) == ("ok", None)
    got = outcome(by_runs, bytes(swapped), n)
    assert got == outcome(one_by_one, bytes(swapped), n)
    assert got == outcome(by_runs_in_bytes, bytes(swapped), n)
    assert got[:2] == (f"offset delta {at + 1}, expected {at}", at)


# -- malformations are refused ------------------------------------------------------------------

MALFORMED = {
    # 40 random bytes under a header that says 3 records (the CRC covers them).
    "random bytes": (raw_batch(random.Random(7).randbytes(40), 3), "record 0"),
    "header says 1, 2 inside": (raw_batch(good_records(2), 1), "bytes remain after the 1"),
    "header says 3, 2 inside": (raw_batch(good_records(2), 3), "2 records where the header"),
    "offset deltas 0, 0": (raw_batch(record(fields(0)) * 2, 2), "offset delta 0, expected 1"),
    "offset deltas 1, 2": (raw_batch(record(fields(1)) + record(fields(2)), 2), "expected 0"),
    "negative record length": (raw_batch(varint(-3) + fields(), 1), "record length -3"),
    "record length past the end": (raw_batch(varint(100) + fields(), 1), "record length 100"),
    "key length -2": (raw_batch(record(fields(key=varint(-2))), 1), "key length of -2"),
    "value length -7": (raw_batch(record(fields(value=varint(-7))), 1), "value length of -7"),
    "null header key": (
        raw_batch(record(fields(headers=varint(1) + varint(-1) + varint(-1))), 1),
        "keys cannot be null",
    ),
    "header value length -2": (
        raw_batch(record(fields(headers=varint(1) + varint(1) + b"h" + varint(-2))), 1),
        "header value length of -2",
    ),
    "negative header count": (
        raw_batch(record(fields(headers=varint(-1))), 1),
        "header count of -1",
    ),
    "header count beyond the record": (
        raw_batch(record(fields(headers=varint(100) + b"\x00\x00")), 1),
        "header count of 100",
    ),
    "fields short of the length": (raw_batch(record(fields() + b"\x00"), 1), "-1 bytes"),
    "fields past the length": (
        raw_batch(varint(len(fields()) - 1) + fields() + record(fields(1)), 2),
        "fields end",
    ),
    "a 6-byte varint": (
        raw_batch(record(fields(key=b"\x80\x80\x80\x80\x80\x00")), 1),
        "longer than 5 bytes",
    ),
    "an 11-byte timestamp delta": (
        raw_batch(record(fields(ts_delta=b"\x80" * 10 + b"\x00")), 1),
        "longer than 10 bytes",
    ),
    "a record cut short": (raw_batch(good_records(3)[:-2], 3), "record 2"),
    "the control flag": (
        build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], control=True),
        "clients are not allowed to write control records",
    ),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_records_are_invalid_record(name: str) -> None:
    batch, fragment = MALFORMED[name]
    exc = refused(batch)
    assert exc.code == errors.INVALID_RECORD, exc
    assert fragment in exc.message and exc.message.startswith("t-0: batch at position 0")


def refused_records(batch: bytes | bytearray, **kwargs: Any) -> v.RecordValidationError:
    header = rb.check_batch(batch, 0, len(batch))
    with pytest.raises(v.RecordValidationError) as info:
        v.check_client_batch(batch, 0, header, "t-0", **kwargs)
    return info.value


KEYLESS = "Compacted topic cannot accept message without key in topic partition t-0"


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topic_names_each_keyless_record_in_kafkas_words(codec: int) -> None:
    batch = build_batch(
        [(b"k", b"v"), (None, b"v"), (b"k", b"v"), (None, b"v"), (None, b"v"), (None, b"v")],
        compression_type=codec,
    )
    exc = refused_records(batch, compacted=True)
    assert exc.code == errors.INVALID_RECORD
    assert exc.record_errors == [(1, KEYLESS), (3, KEYLESS), (4, KEYLESS), (5, KEYLESS)]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{KEYLESS}')" for i in (1, 3, 4))
    assert exc.message == (
        "One or more records have been rejected due to 4 record errors in total, and only "
        f"showing the first three errors at most: [{shown}]"
    )
    check(batch)  # the same batch in a topic that does not compact


def test_a_keyless_record_with_a_long_length_varint_is_named_too() -> None:
    # A null key written in 2 bytes (zigzag -1 as 0x81 0x00) takes the walk's slow path.
    body = record(fields(0, key=varint(1) + b"k")) + record(fields(1, key=b"\x81\x00"))
    exc = refused_records(raw_batch(body, 2), compacted=True)
    assert exc.record_errors == [(1, KEYLESS)]


def test_keyless_records_are_found_inside_uniform_runs() -> None:
    # Stretches of keyless and keyed records of one layout: runs must neither skip a keyless
    # record nor name a keyed one.
    rng = random.Random(5)
    for _ in range(40):
        keys = [None if rng.random() < rng.choice([0.02, 0.5, 0.98]) else b"kk" for _ in range(300)]
        out = bytearray()
        for i, key in enumerate(keys):
            encode_record(out, i, i, key, None if key is None else b"v", [])
        keyless: list[int] = []
        v.walk_records(memoryview(bytes(out)), 0, len(out), len(keys), keyless)
        assert keyless == [i for i, key in enumerate(keys) if key is None]


def ts_bounds_batch(stamps: list[int], codec: int = 0) -> bytearray:
    return build_batch(
        [(b"k%d" % i, b"v") for i in range(len(stamps))],
        timestamps=stamps,
        base_offset=7,
        compression_type=codec,
    )


@pytest.mark.parametrize("codec", CODECS)
def test_records_out_of_timestamp_bounds_are_named_in_kafkas_words(codec: int) -> None:
    # Out of order in time: record 2 is below the first, record 3 above the rest.
    batch = ts_bounds_batch([TS, TS + 5, TS - 2_000, TS + 9_000, TS + 10], codec)
    exc = refused_records(batch, timestamp_bounds=(TS - 1_000, TS + 1_000))
    assert exc.code == errors.INVALID_TIMESTAMP
    assert exc.message == "One or more records have been rejected due to invalid timestamp"
    within = f"The timestamp should be within [{TS - 1_000}, {TS + 1_000}]"
    assert exc.record_errors == [
        (2, f"Timestamp {TS - 2_000} of message with offset 9 is out of range. {within}"),
        (3, f"Timestamp {TS + 9_000} of message with offset 10 is out of range. {within}"),
    ]
    check(batch, timestamp_bounds=(TS - 2_000, TS + 9_000))  # the bounds are inclusive


def test_a_keyless_record_is_named_for_its_key_and_the_batch_for_timestamps() -> None:
    # Kafka judges a record's key before its timestamp; one bad timestamp makes the whole
    # answer INVALID_TIMESTAMP.
    stamps = [TS, TS + 5, TS + 5]  # record 2 is out of bounds and keyless: named for its key
    batch = build_batch([(None, b"v"), (b"k", b"v"), (None, b"v")], timestamps=stamps)
    exc = refused_records(batch, compacted=True, timestamp_bounds=(TS, TS + 1))
    assert exc.code == errors.INVALID_TIMESTAMP
    assert [i for i, _ in exc.record_errors] == [0, 1, 2]
    assert exc.record_errors[0][1] == exc.record_errors[2][1] == KEYLESS
    assert exc.record_errors[1][1].startswith(f"Timestamp {TS + 5} of message with offset 1 ")
    exc = refused_records(batch, compacted=True, timestamp_bounds=(TS, TS + 5))
    assert exc.code == errors.INVALID_RECORD and [i for i, _ in exc.record_errors] == [0, 2]


def test_a_malformed_batch_is_refused_for_its_framing_before_its_keys() -> None:
    body = record(fields(0, key=b"\x01")) + record(fields(5))
    exc = refused(raw_batch(body, 2), compacted=True)
    assert not isinstance(exc, v.RecordValidationError) and exc.code == errors.INVALID_RECORD
    assert "offset delta 5, expected 1" in exc.message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_unsupported(codec: int) -> None:
    exc = refused(raw_batch(good_records(2), 2, attributes=codec))
    assert exc.code == errors.UNSUPPORTED_COMPRESSION_TYPE and f"codec {codec}" in exc.message


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_codec_flag_on_records_it_did_not_write_is_corrupt(codec: int) -> None:
    exc = refused(raw_batch(good_records(5), 5, attributes=codec))
    assert exc.code == errors.CORRUPT_MESSAGE, exc
    assert f"cannot decompress its {rb.COMPRESSION_NAMES[codec]} records" in exc.message


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_records_are_walked_too(codec: int) -> None:
    body = compression.compress(codec, good_records(2) + record(fields(5)))
    exc = refused(raw_batch(body, 3, attributes=codec))
    assert exc.code == errors.INVALID_RECORD
    assert "record 2 (byte" in exc.message and "decompressed records" in exc.message


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_batch_inflating_past_the_bound_is_refused_in_bounded_memory(codec: int) -> None:
    zeros = b"\x00" * (8 << 20)
    body = record(fields(value=varint(len(zeros)) + zeros))
    batch = raw_batch(compression.compress(codec, body), 1, attributes=codec)
    check(batch, max_uncompressed=16 << 20)  # under the bound: fine
    tracemalloc.start()
    try:
        exc = refused(batch, max_uncompressed=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert exc.code == errors.MESSAGE_TOO_LARGE and "more than 1048576 bytes" in exc.message
    assert peak < 3 << 20, f"{peak} bytes allocated to refuse an 8 MiB batch at a 1 MiB bound"


def test_snappy_stating_more_than_its_bytes_can_hold_is_corrupt() -> None:
    body = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00" * 30  # a preamble of 1 GiB
    exc = refused(raw_batch(body, 1, attributes=rb.COMPRESSION_SNAPPY))
    assert exc.code == errors.CORRUPT_MESSAGE and "cannot hold" in exc.message


def test_uncompressed_limit_follows_max_message_bytes() -> None:
    assert v.uncompressed_limit(1048588) == 64 * 1048588
    assert v.uncompressed_limit(1000) == 64 << 20


def test_one_batch_per_partition() -> None:
    one = build_batch([(b"k", b"v")])
    v.check_single_batch(one, "t-0")
    for records in (one + one, one + b"\x00"):
        with pytest.raises(KafkaError) as info:
            v.check_single_batch(records, "t-0")
        assert info.value.code == errors.INVALID_RECORD and "exactly one record batch" in str(
            info.value.message
        )
    v.check_single_batch(one[:-1], "t-0")  # short: check_batch's to refuse (CORRUPT_MESSAGE)


# -- the log ------------------------------------------------------------------------------------


def test_log_refuses_a_malformed_batch_whole_and_takes_the_next(tmp_path: Any) -> None:
    log = Log.open(str(tmp_path / "t-0"))
    log.append(build_batch([(b"a", b"1"), (b"b", b"2")]))
    size = log.size_in_bytes
    for batch, _ in MALFORMED.values():
        with pytest.raises(KafkaError) as info:
            log.append(bytearray(batch))
        assert info.value.code == errors.INVALID_RECORD
        assert log.log_end_offset == 2 and log.size_in_bytes == size
    log.append(build_batch([(b"c", b"3")]))
    offsets = [(r.offset, r.key) for _, r in iter_records(log.read_bytes(0, 1 << 20))]
    assert offsets == [(0, b"a"), (1, b"b"), (2, b"c")]
    log.close()


def test_compacted_log_needs_keys(tmp_path: Any) -> None:
    log = Log.open(str(tmp_path / "t-0"), LogConfig(cleanup_policy="compact"))
    with pytest.raises(KafkaError) as info:
        log.append(build_batch([(None, b"v")]))
    assert info.value.code == errors.INVALID_RECORD and log.log_end_offset == 0
    log.close()


def test_followers_and_coordinators_are_trusted(tmp_path: Any) -> None:
    # A control batch is refused from a client, and is what a follower copies from its leader
    # and a coordinator writes.
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], control=True)
    log = Log.open(str(tmp_path / "t-0"))
    with pytest.raises(KafkaError):
        log.append(bytearray(marker))
    log.append(bytearray(marker), origin=AppendOrigin.COORDINATOR)
    follower = Log.open(str(tmp_path / "t-1"))
    follower.append_as_follower(log.read_bytes(0, 1 << 20))
    assert log.log_end_offset == follower.log_end_offset == 1
    log.close()
    follower.close()


# -- seeded mutation fuzz -----------------------------------------------------------------------


def test_mutated_batches_are_refused_whole_or_read_back_consistently(tmp_path: Any) -> None:
    rng = random.Random(20261201)
    log = Log.open(str(tmp_path / "t-0"))
    accepted, refusals = 0, dict.fromkeys(REFUSALS, 0)
    for _case in range(5000):
        batch = mutate(rng, seed_batch(rng))
        try:
            info = log.append(batch)
        except KafkaError as exc:
            assert exc.code in REFUSALS, exc
            refusals[exc.code] += 1
            continue
        # Accepted: it decodes, and its records are exactly the offsets the log gave it.
        _, decoded = read_batch_records(batch)
        assert [r.offset for r in decoded] == list(range(info.first_offset, info.last_offset + 1))
        accepted += info.records
    assert log.log_end_offset == accepted
    offsets = [r.offset for _, r in iter_records(log.read_bytes(0, 1 << 30))]
    assert offsets == list(range(accepted))
    # The fuzz reaches each kind of refusal but MESSAGE_TOO_LARGE (64 MiB of decompressed
    # records), and some mutations (a flipped value bit) pass.
    assert all(n for code, n in refusals.items() if code != errors.MESSAGE_TOO_LARGE), refusals
    assert accepted > 0
    log.close()


def test_mutation_fuzz_reaches_the_walk_with_a_valid_crc() -> None:
    # Without re-signing, the CRC would refuse every edit and the walk would go untested.
    rng = random.Random(5)
    reasons = set()
    for _ in range(600):
        batch = mutate(rng, seed_batch(rng))
        try:
            check(batch)
        except KafkaError as exc:
            if exc.code == errors.INVALID_RECORD and "): " in exc.message:
                reasons.add(re.sub(r"[-+]?\d+", "N", exc.message.split("): ")[-1]))
    assert len(reasons) >= 8, reasons
