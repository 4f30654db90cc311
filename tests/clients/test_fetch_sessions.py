"""Incremental fetch sessions (KIP-227) over a real socket, through gregor's own codec: a full
Fetch makes a session, incremental ones answer only the partitions with something new (an
append shows up for its partition alone), a parked incremental Fetch wakes on news in a
partition the request did not name, a wrong epoch answers INVALID_FETCH_SESSION_EPOCH, an
unknown id FETCH_SESSION_ID_NOT_FOUND, a session keyed by names asked by topic id
FETCH_SESSION_TOPIC_ID_ERROR, and epoch -1 closes the session."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from client_helpers import SHARED_PARTITIONS, ensure_topic
from kafka import KafkaConsumer, TopicPartition

from gregor import Broker
from gregor.protocol import api_keys
from gregor.protocol.messages import FetchRequest, MetadataRequest
from gregor.testing.raw_client import RawClient

pytestmark = pytest.mark.client

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106


@pytest.fixture
def raw(bootstrap: str) -> Iterator[RawClient]:
    # the socket times out well before a parked Fetch's max_wait_ms: an answer that came only
    # at expiry fails the test
    with RawClient(bootstrap, client_id="fetch-sessions", timeout_s=20) as conn:
        yield conn


def produce(bootstrap: str, topic: str, partition: int, value: bytes) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    p.produce(topic, value, partition=partition)
    assert p.flush(10) == 0


def fetch(
    raw: RawClient,
    version: int,
    session: tuple[int, int],
    parts: list[tuple[Any, int, int]],
    forgotten: list[tuple[Any, list[int]]] = (),  # type: ignore[assignment]
    max_wait_ms: int = 0,
) -> Any:
    """A consumer's Fetch of (topic name or id, partition, offset)s."""
    by_id = version >= 13
    topics: dict[Any, list[Any]] = {}
    for t, index, offset in parts:
        topics.setdefault(t, []).append(
            FetchRequest.FetchPartition(
                partition=index, fetch_offset=offset, partition_max_bytes=1 << 20
            )
        )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session[0],
        session_epoch=session[1],
        topics=[
            FetchRequest.FetchTopic(**({"topic_id": t} if by_id else {"topic": t}), partitions=ps)
            for t, ps in topics.items()
        ],
        forgotten_topics_data=[
            FetchRequest.ForgottenTopic(
                **({"topic_id": t} if by_id else {"topic": t}), partitions=ps
            )
            for t, ps in forgotten
        ],
    )
    return raw.call(api_keys.FETCH, version, request)


def answered(response: Any) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, record bytes) of the answer."""
    return {
        p.partition_index: (p.error_code, p.high_watermark, len(p.records or b""))
        for t in response.responses
        for p in t.partitions
    }


def test_full_then_incremental_fetch_answers_only_what_changed(
    bootstrap: str, raw: RawClient, topic: str
) -> None:
    ensure_topic(bootstrap, topic)
    produce(bootstrap, topic, 0, b"first")
    everything = [(topic, i, 0) for i in range(SHARED_PARTITIONS)]
    full = fetch(raw, 12, (0, 0), everything)
    sid = full.session_id
    assert full.error_code == 0 and sid > 0
    got = answered(full)
    assert sorted(got) == list(range(SHARED_PARTITIONS)) and got[0][2] > 0
    # partition 0 moves on to offset 1: nothing new anywhere, an empty answer
    r = fetch(raw, 12, (sid, 1), [(topic, 0, 1)])
    assert (r.error_code, r.session_id, answered(r)) == (0, sid, {})
    # an append to partition 2 shows up for partition 2 alone
    produce(bootstrap, topic, 2, b"second")
    r = fetch(raw, 12, (sid, 2), [])
    got = answered(r)
    assert list(got) == [2] and got[2][1] == 1 and got[2][2] > 0
    # the same epoch again, an unknown id, a topic-id request to a session of names
    assert fetch(raw, 12, (sid, 2), []).error_code == INVALID_FETCH_SESSION_EPOCH
    assert fetch(raw, 12, (sid + 1, 1), []).error_code == FETCH_SESSION_ID_NOT_FOUND
    assert fetch(raw, 13, (sid, 3), []).error_code == FETCH_SESSION_TOPIC_ID_ERROR
    # a parked incremental Fetch (naming only partition 2) wakes on an append to partition 3
    threading.Timer(0.5, produce, (bootstrap, topic, 3, b"third")).start()
    r = fetch(raw, 12, (sid, 3), [(topic, 2, 1)], max_wait_ms=60_000)
    got = answered(r)
    assert list(got) == [3] and got[3][2] > 0
    # forgotten partitions are no longer read: an append there is not answered
    r = fetch(raw, 12, (sid, 4), [(topic, 3, 1)], forgotten=[(topic, [1])])
    assert answered(r) == {}
    produce(bootstrap, topic, 1, b"fourth")
    r = fetch(raw, 12, (sid, 5), [])
    assert answered(r) == {}
    # epoch -1 closes the session (a sessionless full fetch)
    r = fetch(raw, 12, (sid, -1), [(topic, 1, 0)])
    assert r.session_id == 0 and list(answered(r)) == [1]
    assert fetch(raw, 12, (sid, 6), []).error_code == FETCH_SESSION_ID_NOT_FOUND


def test_sessions_by_topic_id_forget_by_topic_id(
    bootstrap: str, raw: RawClient, topic: str
) -> None:
    ensure_topic(bootstrap, topic)
    md = raw.call(
        api_keys.METADATA,
        12,
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
    )
    tid = md.topics[0].topic_id
    full = fetch(raw, 15, (0, 0), [(tid, 0, 0), (tid, 1, 0)])
    sid = full.session_id
    assert sid > 0 and sorted(answered(full)) == [0, 1]
    assert fetch(raw, 12, (sid, 1), []).error_code == FETCH_SESSION_TOPIC_ID_ERROR
    r = fetch(raw, 15, (sid, 1), [], forgotten=[(tid, [0])])
    assert answered(r) == {}
    produce(bootstrap, topic, 0, b"forgotten")
    produce(bootstrap, topic, 1, b"kept")
    r = fetch(raw, 15, (sid, 2), [])
    assert list(answered(r)) == [1]


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not served")


def test_kafka_python_reads_many_partitions_through_one_incremental_session(topic: str) -> None:
    """kafka-python (which speaks KIP-227) reading 8 partitions with appends between its polls
    gets every record once and in order, through one session the broker keeps (its gauges)
    whose epoch moves on (the client's own session state: a refused incremental Fetch would
    take it back to a full one)."""
    parts = 8
    with Broker(config={"metrics.listener": "http://127.0.0.1:0", "num.partitions": "8"}) as b:
        url = b.metrics_url
        ensure_topic(b.bootstrap, topic, parts)
        producer = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        consumer = KafkaConsumer(
            bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=100,
        )  # fmt: skip
        try:
            consumer.assign([TopicPartition(topic, i) for i in range(parts)])
            got: dict[int, list[bytes]] = {i: [] for i in range(parts)}
            sent: dict[int, list[bytes]] = {i: [] for i in range(parts)}
            epochs = []
            for round_ in range(40):
                partition = (round_ * 3) % parts
                for k in range(1 + round_ % 3):
                    value = f"{round_}-{k}".encode()
                    producer.produce(topic, value, partition=partition)
                    sent[partition].append(value)
                assert producer.flush(10) == 0
                deadline = time.monotonic() + 30
                while sum(map(len, got.values())) < sum(map(len, sent.values())):
                    assert time.monotonic() < deadline, "records did not arrive"
                    for tp, msgs in consumer.poll(timeout_ms=200).items():
                        got[tp.partition] += [m.value for m in msgs]
                handlers = consumer._fetcher._session_handlers
                epochs.append(next(iter(handlers.values())).next_metadata.epoch)
            assert got == sent
            # the session is in incremental mode and went on without a reset to a full fetch
            assert epochs[0] >= 1
            assert all(b > a for a, b in zip(epochs, epochs[1:], strict=False))
            assert _metric(url, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
            cached = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
            assert _metric(url, cached) == parts
        finally:
            consumer.close()
