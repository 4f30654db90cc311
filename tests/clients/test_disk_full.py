"""A full disk loses no acknowledged record: acks=all producers run into ENOSPC on a small
tmpfs; the broker answers KAFKA_STORAGE_ERROR (never a closed connection), takes the log dir
offline with one line naming it, keeps serving everything else, and takes no write after the
failure; the operator frees space; after a SIGKILL and a restart every acknowledged record is
read back at the offset it was acknowledged at, and new writes are acknowledged again."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import confluent_kafka as ck
import pytest

from gregor import Broker
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import DescribeLogDirsRequest, MetadataRequest
from gregor.protocol.records.records import build_batch
from gregor.testing.raw_client import RawClient

TOPIC = "full"
VALUE = os.urandom(16384)


@pytest.fixture
def small_disk():
    """A 48 MiB tmpfs as the broker's log dir (data_dir/logs), 12 MiB of it a ballast file."""
    base = tempfile.mkdtemp(prefix="gregor-full-")
    logs = os.path.join(base, "logs")
    os.makedirs(logs)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", logs], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    ballast = os.path.join(logs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * (12 << 20))
    try:
        yield base, ballast
    finally:
        subprocess.run(["umount", "-l", logs], check=False)
        subprocess.run(["rm", "-rf", base], check=False)


def _produce(
    bootstrap: str, keys: list[bytes], timeout_ms: int = 8000
) -> tuple[dict[bytes, int], list[str]]:
    """acks=all idempotent produce of one 16 KiB record per key: {key: acknowledged offset}
    and the names of the errors the others failed with."""
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": timeout_ms,
        }
    )
    acked: dict[bytes, int] = {}
    failed: list[str] = []

    def done(err, msg) -> None:
        if err is None:
            acked[msg.key()] = msg.offset()
        else:
            failed.append(err.name())

    for key in keys:
        while True:
            try:
                p.produce(TOPIC, VALUE, key=key, on_delivery=done)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(timeout_ms / 1000 + 30) == 0
    return acked, failed


def _raw_produce(raw: RawClient) -> int:
    return int(raw.produce(TOPIC, bytes(build_batch([(b"raw", VALUE)]))).error_code)


def _read_all(bootstrap: str, end: int) -> dict[int, bytes]:
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "fetch.max.bytes": 4 << 20,
        }
    )
    c.assign([ck.TopicPartition(TOPIC, 0, 0)])
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while len(seen) < end and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            assert m.error() is None, m.error()
            assert m.value() == VALUE
            seen[m.offset()] = m.key()
    finally:
        c.close()
    return seen


def test_a_full_disk_loses_no_acknowledged_record(small_disk):
    base, ballast = small_disk
    config = {"num.partitions": "1", "log.segment.bytes": str(8 << 20)}
    broker = Broker(config, data_dir=base, log_level="INFO").start()
    try:
        acked, failed = _produce(broker.bootstrap, [b"a%d" % i for i in range(3000)])
        assert failed, "the disk never filled up"
        assert 1000 < len(acked) < 3000
        with RawClient(broker.bootstrap) as raw:
            # Answered with the error, on a connection that stays open, and the broker still
            # answers other requests on it.
            assert _raw_produce(raw) == errors.KAFKA_STORAGE_ERROR
            meta = raw.call(
                api_keys.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False)
            )
            assert [t.name for t in meta.topics if t.name == TOPIC] == [TOPIC]
            dirs = raw.call(api_keys.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
            assert [(r.log_dir, r.error_code) for r in dirs.results] == [
                (os.path.join(base, "logs"), errors.KAFKA_STORAGE_ERROR)
            ]
            os.unlink(ballast)  # the operator frees space
            # Still offline: nothing may land after the failed write until a restart.
            assert _raw_produce(raw) == errors.KAFKA_STORAGE_ERROR
        lines = [
            line
            for line in broker.read_log().splitlines()
            if "failed (" in line and "log dir" in line
        ]
        assert len(lines) == 1, lines
        assert os.path.join(base, "logs") in lines[0] and "No space left on device" in lines[0]
        broker.kill()
        broker.start()
        more, failed_after = _produce(
            broker.bootstrap, [b"b%d" % i for i in range(200)], timeout_ms=30000
        )
        assert failed_after == [] and len(more) == 200
        everything = {**acked, **more}
        end = max(everything.values()) + 1
        seen = _read_all(broker.bootstrap, end)
        assert len(seen) == end, f"read {len(seen)} of {end} records"
        for key, offset in everything.items():
            assert seen.get(offset) == key, (
                f"{key!r} acknowledged at {offset}, read {seen.get(offset)!r}"
            )
    finally:
        broker.kill()


def test_a_full_metadata_log_halts_the_node_and_loses_nothing(small_disk):
    """The metadata log shares the full disk: a topic creation cannot be written, so the node
    stops at once with one line naming the dir (Kafka halts too), and starts again once space
    is freed with every acknowledged record."""
    base, ballast = small_disk
    broker = Broker({"num.partitions": "1"}, data_dir=base, log_level="INFO").start()
    try:
        acked, failed = _produce(broker.bootstrap, [b"a%d" % i for i in range(3000)])
        assert failed and acked
        rest = os.path.join(os.path.dirname(ballast), "rest")
        fd = os.open(rest, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        from confluent_kafka.admin import AdminClient, NewTopic

        # The metadata log's last page may still hold a few small batches: create topics until
        # a write needs a new block.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert broker.process is not None
        for i in range(200):
            if broker.process.poll() is not None:
                break
            for f in admin.create_topics(
                [NewTopic(f"another-{i}-" + "x" * 200, 1, 1)], request_timeout=5
            ).values():
                try:
                    f.result(10)
                except Exception:
                    pass
        assert broker.process.wait(30) == 1
        lines = [line for line in broker.read_log().splitlines() if "the metadata log in" in line]
        assert len(lines) == 1 and os.path.join(base, "logs") in lines[0], lines
        assert "Traceback" not in broker.read_log()
        broker.process = None
        os.unlink(ballast)
        os.unlink(rest)
        broker.start()
        end = max(acked.values()) + 1
        seen = _read_all(broker.bootstrap, end)
        for key, offset in acked.items():
            assert seen.get(offset) == key
    finally:
        broker.kill()
