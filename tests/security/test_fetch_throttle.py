"""A consumer's Fetch over its consumer_byte_rate, as Kafka's KafkaApis.handleFetchRequest
answers it: the response carries throttle_time_ms and no partitions (no record data), the bytes
it would have sent are taken back from the quota window, the connection is muted for the
throttle time, and the Fetch asks for no more than the quota window holds. A real consumer at
a rate limit still converges on it (the figures are printed; bounds are generous)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from cli_helpers import gregor  # noqa: E402

from gregor.protocol import api_keys  # noqa: E402
from gregor.protocol.messages import ApiVersionsRequest, FetchRequest  # noqa: E402
from gregor.testing.broker import Broker  # noqa: E402
from gregor.testing.raw_client import RawClient  # noqa: E402

pytestmark = pytest.mark.client
KB, MB = 1024, 1024 * 1024
PAYLOAD = b"f" * 10_000
TOPIC = "throttled-reads"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # 4 samples of 1 s (Kafka's default is 11): the allowance a consumer starts with is spent
    # within the warm-up, so the rate measured after it is the steady one.
    config = {"quota.window.num": "4"}
    with Broker(config, data_dir=str(tmp_path_factory.mktemp("fetch-quota"))) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        # Small batches: a Fetch returns at least one whole batch, whatever its max_bytes.
        producer = Producer(
            {"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 32 * KB}
        )
        for _ in range(8 * MB // len(PAYLOAD)):
            producer.produce(TOPIC, PAYLOAD, partition=0)
            producer.poll(0)
        assert producer.flush(60) == 0
        yield b


def set_quota(broker: Broker, client_id: str, rate: int) -> None:
    run = gregor(
        "quotas", "alter", "--entity-type", "clients", "--entity-name", client_id,
        "--add-config", f"consumer_byte_rate={rate}", "-b", broker.bootstrap,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


def fetch_request(max_bytes: int = MB) -> FetchRequest:
    part = FetchRequest.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )  # fmt: skip
    return FetchRequest(
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[part])],
    )  # fmt: skip


@pytest.mark.parametrize("version", [11, 12])  # v12: flexible
def test_a_throttled_fetch_answers_no_records(broker: Broker, version: int) -> None:
    client_id = f"raw-reader-{version}"
    with RawClient(broker.bootstrap, client_id="unlimited") as free:
        whole = free.call(api_keys.FETCH, version, fetch_request())
        assert whole.throttle_time_ms == 0 and len(whole.responses[0].partitions[0].records) > 0
    set_quota(broker, client_id, 100)  # 100 bytes/s: one batch of 10 kB is far over
    with RawClient(broker.bootstrap, client_id=client_id, timeout_s=10) as raw:
        answer = raw.call(api_keys.FETCH, version, fetch_request())
        assert answer.throttle_time_ms > 0
        assert (answer.error_code, answer.session_id, answer.responses) == (0, 0, [])
        # Muted for the throttle time: nothing more is read from this connection meanwhile.
        raw.send(
            api_keys.API_VERSIONS, 3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )  # fmt: skip
        raw.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            raw.recv()


def test_a_consumer_converges_on_its_byte_rate(broker: Broker) -> None:
    quota = 256 * KB
    set_quota(broker, "rate-reader", quota)
    stats: list[dict[str, Any]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "rate-reader",
            "group.id": "rate-readers",
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": 64 * KB,  # responses small next to the quota
            "fetch.max.bytes": 64 * KB,
            "message.max.bytes": 64 * KB,
            "statistics.interval.ms": 500,
            "stats_cb": lambda s: stats.append(json.loads(s)),
        }
    )
    consumer.subscribe([TOPIC])
    consumed, counting = 0, False
    warm_until = time.monotonic() + 5  # the first window's allowance is spent and paid back
    end = warm_until + 8
    while (now := time.monotonic()) < end:
        if not counting and now >= warm_until:
            counting, started = True, now
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None and counting:
            consumed += len(msg.value())
    elapsed = time.monotonic() - started
    consumer.close()
    throttle = max(
        (b["throttle"]["max"] for s in stats for b in s["brokers"].values() if b["nodeid"] >= 0),
        default=0,
    )
    rate = consumed / elapsed
    print(
        f"rate-reader {rate / KB:.0f} kB/s (quota {quota // KB} kB/s), throttle max {throttle} ms"
    )
    assert 0.6 * quota < rate < 1.2 * quota
    assert throttle > 0


def session_fetch(topic: str, session_id: int, epoch: int, offset: int | None) -> FetchRequest:
    """A Fetch of partition 0 of `topic` in a fetch session (offset None: naming nothing)."""
    parts = []
    if offset is not None:
        parts = [
            FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                partition_max_bytes=MB,
            )
        ]  # fmt: skip
    topics = [FetchRequest.FetchTopic(topic=topic, partitions=parts)] if parts else []
    return FetchRequest(
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=MB, isolation_level=0,
        session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=[],
    )  # fmt: skip


def test_a_throttled_incremental_fetch_keeps_its_session(broker: Broker) -> None:
    """As Kafka's getThrottledResponse: the answer withheld for the quota names the session
    (the client goes on with it, at the next epoch), and what it would have told (the new
    high watermark) is told by the session's next answer."""
    topic = "session-reads"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})

    def append() -> None:
        producer.produce(topic, PAYLOAD, partition=0)
        assert producer.flush(30) == 0

    append()
    set_quota(broker, "session-reader", 1000)  # a batch of 10 kB is far over
    with RawClient(broker.bootstrap, client_id="session-reader", timeout_s=10) as raw:
        full = raw.call(api_keys.FETCH, 12, session_fetch(topic, 0, 0, 1))  # at the end: small
        assert (full.throttle_time_ms, full.error_code) == (0, 0) and full.session_id != 0
        assert full.responses[0].partitions[0].high_watermark == 1
        append()  # the high watermark moves to 2
        answer = raw.call(api_keys.FETCH, 12, session_fetch(topic, full.session_id, 1, 1))
        assert answer.throttle_time_ms > 0
        assert (answer.error_code, answer.session_id, answer.responses) == (
            0,
            full.session_id,
            [],
        )
    # The session goes on at the next epoch (over an unthrottled connection here): the
    # partition, read at the new end, is answered for the high watermark not yet told.
    with RawClient(broker.bootstrap, client_id="session-free") as free:
        after = free.call(api_keys.FETCH, 12, session_fetch(topic, full.session_id, 2, 2))
        assert (after.error_code, after.session_id) == (0, full.session_id)
        (part,) = after.responses[0].partitions
        assert part.high_watermark == 2 and len(part.records or b"") == 0
