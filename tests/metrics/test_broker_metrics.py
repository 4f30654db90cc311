"""A broker's metrics listener with real clients: the counters equal what the test did, the
health endpoints answer, and a real Prometheus scrapes and queries it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.protocol import api_keys
from gregor.protocol.errors import UNKNOWN_TOPIC_OR_PARTITION
from gregor.protocol.messages import FetchRequest
from gregor.protocol.records.records import build_batch
from gregor.testing.ports import free_ports
from gregor.testing.raw_client import RawClient
from tests.metrics.helpers import (
    HAVE_PROMETHEUS,
    get,
    host_port,
    prometheus,
    sample,
    scrape,
    total,
    wait_for,
)

pytestmark = pytest.mark.client

N = 250


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(config={"metrics.listener": "http://127.0.0.1:0"}) as b:
        yield b


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(timeout=30)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"value-%d" % i, partition=0)
    assert p.flush(30) == 0


def _consume_and_commit(bootstrap: str, topic: str, group: str, upto: int) -> None:
    """A consumer of `group` reads `topic` from the start, commits `upto` and stops."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        got = 0
        while got < upto:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got += 1
        c.commit(offsets=[TopicPartition(topic, 0, upto)], asynchronous=False)
    finally:
        c.close()


def test_counters_over_http_equal_what_was_produced_and_consumed(broker: Broker) -> None:
    url = broker.metrics_url
    assert url is not None and url.startswith("http://127.0.0.1:")
    _create(broker.bootstrap, "counted")
    _produce(broker.bootstrap, "counted", N)
    _consume_and_commit(broker.bootstrap, "counted", "readers", 100)
    m = scrape(url)
    assert sample(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="counted") == N
    bytes_in = sample(m, "kafka_server_brokertopicmetrics_bytesin_total", topic="counted")
    size = sample(m, "kafka_log_log_size", topic="counted", partition="0")
    assert bytes_in == size and size is not None and size > N * len(b"value-0")
    # the consumer read at least the 100 records it committed, and nothing failed
    out = sample(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="counted")
    assert out is not None and out >= size * 100 / N
    assert (
        sample(m, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="counted")
        == 0
    )
    produces = sample(
        m, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic="counted"
    )
    assert produces is not None and produces >= 1
    assert sample(m, "kafka_log_log_logendoffset", topic="counted", partition="0") == N
    assert sample(m, "kafka_log_log_logstartoffset", topic="counted", partition="0") == 0
    assert sample(m, "kafka_log_log_numlogsegments", topic="counted", partition="0") == 1
    lag = dict(group="readers", topic="counted", partition="0")
    assert sample(m, "kafka_consumergroup_group_offset", **lag) == 100
    assert sample(m, "kafka_consumergroup_group_lag", **lag) == N - 100
    assert sample(m, "kafka_consumergroup_group_sum_lag", group="readers") == N - 100
    commits = sample(m, "kafka_server_group_coordinator_metrics_offset_commit_count")
    assert commits is not None and commits >= 1
    rebalances = sample(
        m, "kafka_server_group_coordinator_metrics_classic_group_completed_rebalance_count"
    )
    assert rebalances is not None and rebalances >= 1
    empty = sample(
        m, "kafka_server_group_coordinator_metrics_group_count", protocol="classic", state="Empty"
    )
    assert empty is not None and empty >= 1  # the consumer left
    requests = total(m, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert requests >= produces  # one partition per request here
    fetched = sample(m, "kafka_network_requestmetrics_totaltimems_count", request="Fetch")
    assert fetched is not None and fetched >= 1
    assert sample(m, "kafka_server_replicamanager_leadercount") == sample(
        m, "kafka_server_replicamanager_partitioncount"
    )
    assert sample(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample(m, "kafka_server_raft_metrics_current_leader") == 1
    incoming = sample(
        m, "kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT"
    )
    assert incoming is not None and incoming > size
    rss = sample(m, "process_resident_memory_bytes")
    assert rss is not None and rss > 10_000_000
    assert sample(m, "gregor_event_loop_lag_seconds") is not None


def test_connections_served_and_closed_are_counted_per_listener(broker: Broker) -> None:
    """Kafka's socket-server-metrics connection-creation-total and connection-close-total,
    their -rate forms, and the acceptor's connection-accept-rate{listener} and
    broker-connection-accept-rate (connections per second over the quota window)."""
    name = "kafka_server_socket_server_metrics_connection_{}"

    def values(kind: str) -> tuple[float, float]:
        m = scrape(broker.metrics_url)
        made = sample(m, name.format(f"creation_{kind}"), listener="PLAINTEXT")
        closed = sample(m, name.format(f"close_{kind}"), listener="PLAINTEXT")
        assert made is not None and closed is not None
        return made, closed

    made, closed = values("total")
    host, port = broker.bootstrap.rsplit(":", 1)
    clients = [socket.create_connection((host, int(port))) for _ in range(3)]
    wait_for("three connections served", lambda: values("total")[0] >= made + 3)
    m = scrape(broker.metrics_url)
    accepted = sample(m, name.format("accept_rate"), listener="PLAINTEXT")
    broker_wide = sample(m, "kafka_server_socket_server_metrics_broker_connection_accept_rate")
    assert accepted is not None and accepted > 0
    assert broker_wide is not None and broker_wide >= accepted  # the one client listener
    assert values("rate")[0] > 0
    for c in clients:
        c.close()
    wait_for("three connections closed", lambda: values("total")[1] >= closed + 3)
    assert values("rate")[1] > 0


def test_health_endpoints_of_a_running_broker(broker: Broker) -> None:
    url = broker.metrics_url
    assert url is not None
    status, body = get(url + "/health/ready")
    assert (status, body) == (200, '{"status": "ready", "reason": "ready"}\n')
    assert get(url + "/health/live") == (200, '{"status": "live"}\n')
    assert get(url + "/nothing")[0] == 404


def test_off_by_default(kafka_broker: Broker) -> None:
    assert kafka_broker.metrics_url is None


@pytest.mark.skipif(not HAVE_PROMETHEUS, reason="no prometheus binary")
def test_a_real_prometheus_queries_records_end_offsets_and_lag(
    broker: Broker, tmp_path: Path
) -> None:
    url = broker.metrics_url
    assert url is not None
    _create(broker.bootstrap, "watched", 2)
    _produce(broker.bootstrap, "watched", 120)
    _consume_and_commit(broker.bootstrap, "watched", "watchers", 45)
    with prometheus(tmp_path, [host_port(url)]) as prom:
        prom.wait_value('kafka_server_brokertopicmetrics_messagesin_total{topic="watched"}', 120)
        prom.wait_value('kafka_log_log_logendoffset{topic="watched",partition="0"}', 120)
        prom.wait_value('kafka_log_log_logendoffset{topic="watched",partition="1"}', 0)
        prom.wait_value(
            'kafka_consumergroup_group_lag{group="watchers",topic="watched",partition="0"}', 75
        )
        (series,) = prom.query('kafka_server_brokertopicmetrics_messagesin_total{topic="watched"}')
        assert series["metric"]["job"] == "gregor"
        prom.wait_value("kafka_server_replicamanager_underreplicatedpartitions", 0)
        assert prom.value('up{job="gregor"}') == 1
        # more records: the lag grows by them once scraped again
        _produce(broker.bootstrap, "watched", 30)
        prom.wait_value(
            'kafka_consumergroup_group_lag{group="watchers",topic="watched",partition="0"}', 105
        )
        rate = prom.query(
            'rate(kafka_network_requestmetrics_requests_total{request="Produce"}[1m])'
        )
        assert rate, "Produce requests are a counter Prometheus can rate"


# Every family the metrics issue names, as Prometheus stores them (a histogram by its buckets).
NAMED_FAMILIES = [
    *(
        f"kafka_server_brokertopicmetrics_{m}_total"
        for m in ("messagesin", "bytesin", "bytesout", "failedproducerequests")
    ),
    "kafka_network_requestmetrics_requests_total",
    *(
        f"kafka_network_requestmetrics_{t}timems_bucket"
        for t in ("total", "requestqueue", "local", "remote", "responsequeue", "responsesend")
    ),
    *(
        f"kafka_server_replicamanager_{m}"
        for m in (
            "underreplicatedpartitions",
            "offlinereplicacount",
            "leadercount",
            "partitioncount",
            "isrshrinks_total",
            "isrexpands_total",
        )
    ),  # fmt: skip
    *(
        f"kafka_controller_kafkacontroller_{m}"
        for m in ("activecontrollercount", "offlinepartitionscount", "globaltopiccount")
    ),
    *(
        f"kafka_server_raft_metrics_{m}"
        for m in (
            "current_leader",
            "current_epoch",
            "high_watermark",
            "commit_latency_avg",
            "commit_latency_max",
        )
    ),  # fmt: skip
    *(f"kafka_log_log_{m}" for m in ("size", "numlogsegments", "logstartoffset", "logendoffset")),
    *(
        f"kafka_server_group_coordinator_metrics_{m}"
        for m in ("group_count", "classic_group_completed_rebalance_count", "offset_commit_count")
    ),
    *(f"kafka_consumergroup_group_{m}" for m in ("offset", "lag", "max_lag", "sum_lag")),
    *(
        f"kafka_server_socket_server_metrics_{m}"
        for m in ("connection_count", "incoming_byte_total", "outgoing_byte_total")
    ),
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "gregor_event_loop_lag_seconds",
]


@pytest.mark.skipif(not HAVE_PROMETHEUS, reason="no prometheus binary")
def test_prometheus_holds_every_named_metric_with_what_the_test_did(
    broker: Broker, tmp_path: Path
) -> None:
    url = broker.metrics_url
    assert url is not None
    _create(broker.bootstrap, "everything")
    _produce(broker.bootstrap, "everything", 80)
    _consume_and_commit(broker.bootstrap, "everything", "everyone", 30)  # then it stops
    with prometheus(tmp_path, [host_port(url)]) as prom:
        prom.wait_value('kafka_server_brokertopicmetrics_messagesin_total{topic="everything"}', 80)
        stored = {
            r["metric"]["__name__"] for r in prom.query('group by (__name__) ({job="gregor"})')
        }
        assert [n for n in NAMED_FAMILIES if n not in stored] == []
        tp = 'topic="everything",partition="0"'
        lag = 'group="everyone",topic="everything",partition="0"'
        for promql, expected in (
            (f"kafka_log_log_logendoffset{{{tp}}}", 80),
            (f"kafka_log_log_logstartoffset{{{tp}}}", 0),
            (f"kafka_log_log_numlogsegments{{{tp}}}", 1),
            (f"kafka_consumergroup_group_offset{{{lag}}}", 30),
            (f"kafka_consumergroup_group_lag{{{lag}}}", 50),  # after the consumer stopped
            ('kafka_consumergroup_group_sum_lag{group="everyone"}', 50),
            ('kafka_consumergroup_group_max_lag{group="everyone"}', 50),
            (
                'kafka_server_brokertopicmetrics_failedproducerequests_total{topic="everything"}',
                0,
            ),
            # the bytes appended are the log's bytes
            (
                'kafka_server_brokertopicmetrics_bytesin_total{topic="everything"} - on () '
                f"kafka_log_log_size{{{tp}}}",
                0,
            ),
            ("kafka_server_raft_metrics_current_leader", 1),
            ("kafka_controller_kafkacontroller_activecontrollercount", 1),
            ("kafka_controller_kafkacontroller_offlinepartitionscount", 0),
            ("kafka_server_replicamanager_underreplicatedpartitions", 0),
            ("kafka_server_replicamanager_offlinereplicacount", 0),
            (
                "kafka_server_replicamanager_leadercount - kafka_server_replicamanager_partitioncount",
                0,
            ),
        ):
            prom.wait_value(promql, expected)
        positive = [
            'kafka_server_brokertopicmetrics_bytesout_total{topic="everything"}',
            'kafka_network_requestmetrics_requests_total{request="Produce"}',
            'kafka_network_requestmetrics_totaltimems_count{request="Fetch"}',
            "kafka_controller_kafkacontroller_globaltopiccount",
            "kafka_server_raft_metrics_current_epoch",
            "kafka_server_raft_metrics_high_watermark",
            "kafka_server_raft_metrics_commit_latency_max",  # topics were created: not NaN
            'kafka_server_group_coordinator_metrics_group_count{state="Empty"}',
            "kafka_server_group_coordinator_metrics_offset_commit_count",
            "kafka_server_group_coordinator_metrics_classic_group_completed_rebalance_count",
            'kafka_server_socket_server_metrics_incoming_byte_total{listener="PLAINTEXT"}',
            'kafka_server_socket_server_metrics_outgoing_byte_total{listener="PLAINTEXT"}',
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
        ]
        for promql in positive:
            assert (prom.value(f"sum({promql})") or 0) > 0, promql


def test_failed_requests_are_counted_per_topic(broker: Broker) -> None:
    url = broker.metrics_url
    assert url is not None
    _create(broker.bootstrap, "refusing")
    batch = bytes(build_batch([(b"k", b"v")]))
    with RawClient(broker.bootstrap) as raw:
        assert raw.produce("refusing", batch, partition=0).error_code == 0
        assert raw.produce("refusing", batch, partition=7).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert raw.produce("refusing", batch, partition=8).error_code == UNKNOWN_TOPIC_OR_PARTITION
    m = scrape(url)
    name = "kafka_server_brokertopicmetrics_"
    assert sample(m, name + "failedproducerequests_total", topic="refusing") == 2
    assert sample(m, name + "totalproducerequests_total", topic="refusing") == 3
    assert sample(m, name + "messagesin_total", topic="refusing") == 1
    assert (
        total(m, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") >= 3
    )


def test_a_broker_without_its_controller_is_live_but_not_ready() -> None:
    """A broker-only node whose controller does not answer starts, but is not registered:
    /health/ready says so with a 503, /health/live is 200, /metrics is served."""
    (dead,) = free_ports(1)
    config = {
        "process.roles": "broker",
        "node.id": "2",
        "controller.quorum.voters": f"1@127.0.0.1:{dead}",
        "controller.listener.names": "CONTROLLER",
        "cluster.id": "MkU3OEVBNTcwNTJENDM2Qg",
        "metrics.listener": "http://127.0.0.1:0",
    }
    with Broker(config=config) as lonely:
        url = lonely.metrics_url
        assert url is not None
        status, body = get(url + "/health/ready")
        assert status == 503
        assert json.loads(body) == {
            "status": "not ready",
            "reason": "not registered with the controller",
        }
        assert get(url + "/health/live")[0] == 200
        m = scrape(url)
        assert sample(m, "kafka_server_raft_metrics_current_leader") == -1
        assert sample(m, "kafka_controller_kafkacontroller_activecontrollercount") == 0


def _fetch(session_id: int, epoch: int, partitions: list[int]) -> FetchRequest:
    """A consumer's Fetch v12 of `sessioned` at offset 0 (no partitions: as its session has)."""
    parts = [
        FetchRequest.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=65536,
        )
        for p in partitions
    ]  # fmt: skip
    topics = [FetchRequest.FetchTopic(topic="sessioned", partitions=parts)] if parts else []
    return FetchRequest(
        replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=[],
    )  # fmt: skip


def test_fetch_requests_count_each_partition_read_as_kafka_does(broker: Broker) -> None:
    """TotalFetchRequestsPerSec counts every partition a Fetch reads: of an incremental fetch,
    every partition of its session, those left out of the answer too; a partition the broker
    does not host is counted, but not as failed (Kafka counts only unexpected failures)."""
    url = broker.metrics_url
    assert url is not None
    _create(broker.bootstrap, "sessioned", 3)
    _produce(broker.bootstrap, "sessioned", 5)  # into partition 0 only

    def counted() -> tuple[float | None, float | None]:
        m = scrape(url)
        return (
            sample(
                m, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic="sessioned"
            ),
            sample(
                m, "kafka_server_brokertopicmetrics_failedfetchrequests_total", topic="sessioned"
            ),
        )

    with RawClient(broker.bootstrap) as raw:
        full = raw.call(api_keys.FETCH, 12, _fetch(0, 0, [0, 1, 2]))
        assert full.error_code == 0 and full.session_id != 0
        assert counted() == (3, 0)
        incremental = raw.call(api_keys.FETCH, 12, _fetch(full.session_id, 1, []))
        assert (incremental.error_code, incremental.session_id) == (0, full.session_id)
        answered = [p.partition_index for t in incremental.responses for p in t.partitions]
        assert answered == [0]  # 1 and 2 have nothing new: read, not answered
        assert counted() == (6, 0)
        unknown = raw.call(api_keys.FETCH, 12, _fetch(0, -1, [7]))
        assert unknown.responses[0].partitions[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert counted() == (7, 0)
