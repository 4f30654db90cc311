"""`gregor dump-log --output json`: JSON Lines over the files a real broker wrote, checked against
what was produced and against the plain (Kafka-shaped) output of the same files."""

from __future__ import annotations

import base64
import glob
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from cli_helpers import gregor

from gregor.protocol.records.records import build_batch, build_control_batch
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin
from gregor.testing.broker import Broker

TOPIC = "dumped"
RECORDS = 30


def _value(i: int) -> bytes:
    # every fifth value is not UTF-8: it comes back in base64, flagged
    return b"\xff\xfe%d" % i if i % 5 == 0 else b"value-%d-" % i + b"y" * 150


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: Any) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    path = str(tmp_path_factory.mktemp("dumped"))
    with Broker(data_dir=path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = NewTopic(TOPIC, 1, 1, config={"index.interval.bytes": "100"})
        for f in admin.create_topics([topic], request_timeout=15).values():
            f.result()
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0}
        )
        for i in range(RECORDS):
            producer.produce(
                TOPIC,
                key=b"key-%d" % i,
                value=_value(i),
                headers=[("n", str(i).encode())],
                timestamp=1_700_000_000_000 + i,
            )
            producer.flush(15)  # one batch each, so the index gets entries
        broker.stop()
    return path


def _files(data_dir: str, suffix: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data_dir, "logs", f"{TOPIC}-0", f"*{suffix}")))


def _lines(*args: str) -> list[dict[str, Any]]:
    run = gregor("dump-log", *args)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_batches_and_records_match_what_was_produced(data_dir: str) -> None:
    segments = _files(data_dir, ".log")
    batches = _lines("-o", "json", "--print-data-log", *segments)
    assert {b["file"] for b in batches} == set(segments)
    records = [r for b in batches for r in b["records"]]
    assert [r["offset"] for r in records] == list(range(RECORDS))
    for i, r in enumerate(records):
        value = _value(i)
        if i % 5 == 0:
            assert r["value_base64"] is True
            assert base64.b64decode(r["value"]) == value
        else:
            assert (r["value"], r["value_base64"]) == (value.decode(), False)
        assert (r["key"], r["key_base64"], r["key_size"]) == (f"key-{i}", False, len(f"key-{i}"))
        assert r["value_size"] == len(value)
        assert r["create_time"] == 1_700_000_000_000 + i
        assert r["headers"] == [{"key": "n", "value": str(i), "value_base64": False}]
        assert r["sequence"] == i  # idempotent producer: sequences from 0
    for b in batches:
        assert b["count"] == len(b["records"]) == b["last_offset"] - b["base_offset"] + 1
        assert b["producer_id"] >= 0 and b["is_valid"] is True
        assert b["compress_codec"] == "none" and b["magic"] == 2
    positions = [b["position"] for b in batches]
    assert positions == [0] + [sum(b["size"] for b in batches[:n]) for n in range(1, len(batches))]


def _plain_batch_line(b: dict[str, Any]) -> str:
    return (
        f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['count']} "
        f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} "
        f"producerId: {b['producer_id']} producerEpoch: {b['producer_epoch']} "
        f"partitionLeaderEpoch: {b['partition_leader_epoch']} isTransactional: "
        f"{b['is_transactional']} isControl: {b['is_control']} position: {b['position']} "
        f"CreateTime: {b['create_time']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compress_codec']} crc: {b['crc']} isvalid: true"
    )


def test_json_says_what_the_plain_output_says(data_dir: str) -> None:
    segments = _files(data_dir, ".log")
    batches = _lines("-o", "json", *segments)
    assert all("records" not in b for b in batches)
    plain = gregor("dump-log", *segments)
    assert plain.returncode == 0, plain.stderr
    lines = [line for line in plain.stdout.splitlines() if not line.startswith("Dumping ")]
    assert lines == [_plain_batch_line(b) for b in batches]


def test_index_entries_point_at_the_batches(data_dir: str) -> None:
    [segment] = _files(data_dir, ".log")
    [index] = _files(data_dir, ".index")
    [timeindex] = _files(data_dir, ".timeindex")
    batches = _lines("-o", "json", segment)
    entries = _lines("-o", "json", index)
    time_entries = _lines("-o", "json", timeindex)
    # 30 batches of about 250 bytes, an index entry every 100 bytes: one per batch after the first
    assert len(entries) >= RECORDS // 2
    by_position = {b["position"]: b for b in batches}
    for e in entries:
        assert e["file"] == index
        batch = by_position[e["position"]]
        assert batch["base_offset"] <= e["offset"] <= batch["last_offset"]
    assert time_entries
    for e in time_entries:
        assert e["file"] == timeindex
        [batch] = [b for b in batches if b["base_offset"] <= e["offset"] <= b["last_offset"]]
        assert batch["create_time"] == e["timestamp"]
    plain = gregor("dump-log", index, timeindex).stdout.splitlines()
    assert plain == (
        [f"Dumping {index}"]
        + [f"offset: {e['offset']} position: {e['position']}" for e in entries]
        + [f"Dumping {timeindex}"]
        + [f"timestamp: {e['timestamp']} offset: {e['offset']}" for e in time_entries]
    )


def test_cluster_metadata_records_decoded_as_json(data_dir: str) -> None:
    segments = sorted(glob.glob(os.path.join(data_dir, "logs", "__cluster_metadata-0", "*.log")))
    batches = _lines("-o", "json", "--cluster-metadata-decoder", *segments)
    records = [r for b in batches for r in b["records"]]
    payloads = [r["payload"] for r in records if "payload" in r]
    assert any(p["type"] == "TOPIC_RECORD" and p["data"]["name"] == TOPIC for p in payloads)
    controls = [r for r in records if "control_type" in r]
    assert any(r["control_type"] == "LeaderChange" for r in controls)
    assert all("error" not in r for r in records)


def test_markers_txn_index_and_a_corrupt_batch(tmp_path: Any) -> None:
    log = Log.open(str(tmp_path / "t-0"))
    log.append(
        build_batch(
            [(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
        )
    )
    log.append(build_control_batch(7, 0, 3, False, 1000), origin=AppendOrigin.COORDINATOR)
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    txn = seg.with_suffix(".txnindex")
    batches = _lines("-o", "json", "--print-data-log", str(seg))
    assert batches[1]["is_control"] is True
    assert batches[1]["records"] == [
        {
            "offset": 1,
            "create_time": 1000,
            "end_txn_marker": "ABORT",
            "coordinator_epoch": 3,
        }
    ]
    assert _lines("-o", "json", str(txn)) == [
        {
            "file": str(txn),
            "version": 0,
            "producer_id": 7,
            "first_offset": 0,
            "last_offset": 1,
            "last_stable_offset": 2,
        }
    ]
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF
    seg.write_bytes(bytes(data))
    run = gregor("dump-log", "-o", "json", str(seg))
    assert run.returncode == 1
    [first] = [json.loads(line) for line in run.stdout.splitlines()]  # the good batch
    assert first["base_offset"] == 0
    assert run.stderr.startswith(f"gregor: {seg}: position {first['size']}: CORRUPT_MESSAGE: ")
    assert run.stderr.count("\n") == 1


def test_a_closed_stdout_ends_quietly_with_json(tmp_path: Any) -> None:
    log = Log.open(str(tmp_path / "t-0"))
    for i in range(300):
        log.append(build_batch([(b"k", b"v" * 1000)], base_timestamp=i))
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gregor.cli.main", "dump-log", "-o", "json", "--print-data-log"]
        + [str(seg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["base_offset"] == 0
    proc.stdout.close()  # as `| head -1` does: 300 KB still to write
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert stderr == b""


def test_a_metadata_record_that_does_not_decode(tmp_path: Any) -> None:
    log = Log.open(str(tmp_path / "m-0"))
    log.append(build_batch([(None, b"\xff\xff\xff")]))
    log.close()
    seg = str(tmp_path / "m-0" / "00000000000000000000.log")
    [batch] = _lines("-o", "json", "--cluster-metadata-decoder", seg)
    why = "metadata record truncated in its frame version"
    assert batch["records"] == [{"offset": 0, "error": why}]
    plain = gregor("dump-log", "--cluster-metadata-decoder", seg).stdout.splitlines()
    assert plain[-1] == f"| Error at offset 0, skipping. {why}"
