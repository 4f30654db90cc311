"""`gregor dump-log` reads the files the log writes."""

import subprocess
import sys

from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import Log


def test_dump_log_prints_batches_records_and_index_entries(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=100))
    for i in range(5):
        log.append(build_batch([(b"key-%d" % i, b"x" * 200)], base_timestamp=1000 + i))
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor.cli.main",
            "dump-log",
            "--print-data-log",
            str(seg),
            str(seg.with_suffix(".index")),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for i in range(5):
        assert f"baseOffset: {i} lastOffset: {i}" in out
        assert f"key: b'key-{i}'" in out
    # index.interval.bytes=100 and 275-byte batches: an entry at every batch after the first.
    assert "offset: 1 position: 275" in out
    assert "offset: 4 position: 1100" in out


def test_dump_log_reports_a_corrupt_batch(tmp_path):
    log = Log.open(str(tmp_path / "t-0"))
    log.append(build_batch([(b"k", b"v" * 50)]))
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF
    seg.write_bytes(bytes(data))
    proc = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "dump-log", str(seg)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "CORRUPT_MESSAGE" in proc.stdout


def test_dump_log_prints_markers_and_the_txn_index(tmp_path):
    from gregor.protocol.records.records import build_control_batch
    from gregor.storage.producer_state import AppendOrigin

    log = Log.open(str(tmp_path / "t-0"))
    log.append(
        build_batch(
            [(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
        )
    )
    log.append(build_control_batch(7, 0, 3, False, 1000), origin=AppendOrigin.COORDINATOR)
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor.cli.main",
            "dump-log",
            "--print-data-log",
            str(seg),
            str(seg.with_suffix(".txnindex")),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "isTransactional: True isControl: True" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in out
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in out


def test_cluster_metadata_decoder_prints_metadata_records_of_a_real_broker(tmp_path):
    import glob
    import os

    from confluent_kafka.admin import AdminClient, NewTopic

    from gregor import Broker

    with Broker(data_dir=str(tmp_path)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("dumped-topic", 2, 1)], request_timeout=15).values():
            f.result()
        broker.stop()
    segs = sorted(glob.glob(os.path.join(str(tmp_path), "logs", "__cluster_metadata-0", "*.log")))
    out = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "dump-log", "--cluster-metadata-decoder", *segs],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    topic_lines = [line for line in out.splitlines() if '"type":"TOPIC_RECORD"' in line]
    assert any('"name":"dumped-topic"' in line for line in topic_lines)
    assert out.count('"type":"PARTITION_RECORD"') >= 2
    assert '"type":"FEATURE_LEVEL_RECORD"' in out and '"type":"REGISTER_BROKER_RECORD"' in out
    assert 'LeaderChange: {"version":0,"leaderId":1' in out


def test_cluster_metadata_decoder_reads_a_snapshot_file(tmp_path):
    import uuid

    from gregor.metadata import records as r
    from gregor.metadata.image import EMPTY_IMAGE
    from gregor.metadata.snapshot import encode_snapshot

    image = EMPTY_IMAGE.replay([(r.TopicRecord(name="snap-topic", topic_id=uuid.uuid4()), 0, 1)])
    path = tmp_path / "00000000000000000001-0000000001.checkpoint"
    path.write_bytes(encode_snapshot(image, 1, 1234, 5678))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor.cli.main",
            "dump-log",
            "--cluster-metadata-decoder",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'SnapshotHeader: {"version":0,"lastContainedLogTimestamp":1234}' in out
    assert '"type":"TOPIC_RECORD","version":0,"data":{"name":"snap-topic"' in out
    assert 'SnapshotFooter: {"version":0}' in out


def test_cluster_metadata_decoder_prints_metadata_transaction_markers(tmp_path):
    from gregor.metadata import records as r
    from gregor.raft.log import Batch
    from gregor.raft.storage_log import StorageRaftLog

    raft_log = StorageRaftLog.open(str(tmp_path))
    begin = r.BeginTransactionRecord(name="create topics")
    raft_log.append(Batch(0, 1, (r.encode(begin), r.encode(r.NoOpRecord()))))
    raft_log.append(Batch(2, 1, (r.encode(r.EndTransactionRecord()),)))
    raft_log.append(Batch(3, 1, (r.encode(r.BeginTransactionRecord()),)))
    raft_log.append(
        Batch(4, 2, (r.encode(r.AbortTransactionRecord(reason="Controller failover")),))
    )
    raft_log.close()
    seg = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor.cli.main",
            "dump-log",
            "--cluster-metadata-decoder",
            str(seg),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        'payload: {"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{"name":"create topics"}}'
        in out
    )
    assert 'payload: {"type":"END_TRANSACTION_RECORD","version":0,"data":{}}' in out
    assert 'payload: {"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{"name":null}}' in out
    assert (
        'payload: {"type":"ABORT_TRANSACTION_RECORD","version":0,"data":{"reason":"Controller failover"}}'
        in out
    )
