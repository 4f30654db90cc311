"""The metric names (the JMX exporter's rules), the counters, the readiness decision and the
collectors over stand-ins of the broker's parts, rendered by prometheus_client and parsed back."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gregor.coordinator.group.classic import GroupState
from gregor.coordinator.group.shard import GroupStats
from gregor.metadata.config_defs import BROKER_CONFIGS, ConfigError
from gregor.metrics import names
from gregor.metrics.collectors import BrokerSources, collectors
from gregor.metrics.health import NodeHealth, readiness
from gregor.metrics.stats import (
    FOLD_AT,
    SAMPLE_EVERY,
    BrokerTopicStats,
    Histogram,
    RequestCounters,
    RequestStats,
    Window,
)
from gregor.protocol import api_keys
from gregor.runtime.metrics_listener import MetricsListener, parse_listener
from gregor.runtime.request_metrics import MeasuredDispatcher

pytestmark = pytest.mark.unit


def test_names_follow_the_jmx_exporter_rules() -> None:
    assert (
        names.meter("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec")
        == "kafka_server_brokertopicmetrics_messagesin_total"
    )
    assert (
        names.gauge("kafka.controller", "KafkaController", "ActiveControllerCount")
        == "kafka_controller_kafkacontroller_activecontrollercount"
    )
    assert names.raft("current-leader") == "kafka_server_raft_metrics_current_leader"
    assert names.replica_manager("IsrShrinks") == "kafka_server_replicamanager_isrshrinks"
    assert names.log("LogEndOffset") == "kafka_log_log_logendoffset"
    assert names.REQUESTS == "kafka_network_requestmetrics_requests_total"
    assert names.REQUEST_TIMES["total"] == "kafka_network_requestmetrics_totaltimems"
    assert names.TOPIC_METERS["failed_produce"] == (
        "kafka_server_brokertopicmetrics_failedproducerequests_total"
    )


def test_all_topics_counts_keep_what_deleted_topics_counted() -> None:
    stats = BrokerTopicStats()
    stats.topic("a").messages_in += 5
    stats.topic("b").messages_in += 2
    stats.remove("a")
    stats.topic("a").messages_in += 1  # made again
    assert stats.all_topics().messages_in == 8
    assert stats.topic("a").messages_in == 1


def test_histogram_is_cumulative_with_inf() -> None:
    h = Histogram()
    for ms in (0.05, 0.3, 0.3, 7, 20_000):
        h.observe(ms)
    buckets = dict(h.cumulative())
    assert buckets["0.1"] == 1 and buckets["0.5"] == 3 and buckets["10.0"] == 4
    assert buckets["10000.0"] == 4 and buckets["+Inf"] == 5
    assert h.count == 5 and h.sum == pytest.approx(20_007.65)


def test_window_keeps_the_last_values() -> None:
    w = Window(size=3)
    assert w.avg is None and w.max is None
    for v in (10, 1, 2, 3):
        w.record(v)
    assert (w.avg, w.max, w.last, w.count) == (2, 3, 3, 4)


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        (NodeHealth(False, False, 5, False, True), (False, "starting")),
        (NodeHealth(True, True, 5, False, True), (False, "shutting down")),
        (NodeHealth(True, False, -1, True, False), (False, "not registered with the controller")),
        (NodeHealth(True, False, 5, True, True), (False, "fenced by the controller")),
        (NodeHealth(True, False, 5, False, False), (False, "not caught up with the metadata")),
        (NodeHealth(True, False, 5, False, True), (True, "ready")),
    ],
)
def test_readiness(health: NodeHealth, expected: tuple[bool, str]) -> None:
    assert readiness(health) == expected


def test_listener_addresses() -> None:
    assert parse_listener("http://127.0.0.1:9644") == ("127.0.0.1", 9644)
    assert parse_listener("0.0.0.0:0") == ("0.0.0.0", 0)
    for bad in ("https://h:1", "http://h", "http://h:99999", "http://h:1/metrics"):
        with pytest.raises(ValueError):
            parse_listener(bad)
    key = BROKER_CONFIGS["metrics.listener"]
    assert key.default == ""
    key.parse("http://127.0.0.1:0")
    with pytest.raises(ConfigError):
        key.parse("http://127.0.0.1:70000")


# -- collectors over stand-ins ------------------------------------------------------------------


def _partition(topic: str, index: int, leader: bool, replicas: list[int], isr: list[int]) -> Any:
    log = SimpleNamespace(
        size_in_bytes=1000 + index,
        segments=[1, 2],
        log_start_offset=3,
        log_end_offset=40,
        high_watermark=30,
        offline=False,
    )
    return SimpleNamespace(
        topic=topic, index=index, is_leader=leader, replicas=replicas, isr=isr,
        min_insync_replicas=2, log=log,
    )  # fmt: skip


def _sources() -> BrokerSources:
    parts = {
        ("t", 0): _partition("t", 0, True, [1, 2, 3], [1, 2, 3]),
        ("t", 1): _partition("t", 1, True, [1, 2, 3], [1]),
        ("t", 2): _partition("t", 2, False, [2, 1, 3], [2, 1]),
    }
    replicas = SimpleNamespace(
        partitions=parts, isr_shrinks=4, isr_expands=2, get=lambda t, i: parts.get((t, i))
    )
    group = SimpleNamespace(state=GroupState.STABLE)
    shard = SimpleNamespace(
        groups={"g": group, "h": SimpleNamespace(state=GroupState.EMPTY)},
        offsets={
            "g": {("t", 0): SimpleNamespace(offset=25), ("t", 1): SimpleNamespace(offset=30)},
            "h": {("elsewhere", 0): SimpleNamespace(offset=1)},
        },
    )
    groups = SimpleNamespace(
        runtime=SimpleNamespace(shards=lambda: [shard]),
        adapter=SimpleNamespace(stats=GroupStats(rebalances=3, offset_commits=9)),
    )
    reg = SimpleNamespace
    image = SimpleNamespace(
        topics_by_name={"t": 1},
        topics_by_id={
            1: SimpleNamespace(partitions={0: reg(leader=1), 1: reg(leader=-1), 2: reg(leader=2)})
        },
        brokers={1: reg(fenced=False), 2: reg(fenced=True)},
    )
    raft = SimpleNamespace(
        leader_id=1, epoch=7, high_watermark=55, log=SimpleNamespace(end_offset=56)
    )
    sources = BrokerSources(
        1, replicas, None, groups, image=lambda: image, raft=lambda: raft,
        active_controller=lambda: True, connections=lambda: {"PLAINTEXT": 3},
        socket_bytes=lambda: {"PLAINTEXT": (70, 900)},
    )  # fmt: skip
    sources.topic_stats.topic("t").messages_in = 10
    sources.topic_stats.topic("gone").messages_in = 4  # not in the image any more
    sources.commit_latency.record(5)
    sources.commit_latency.record(9)
    return sources


def _scrape(sources: BrokerSources) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors(sources):
        registry.register(c)
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_collectors_read_the_state_at_scrape_time() -> None:
    sources = _sources()
    m = _scrape(sources)
    topic = (("topic", "t"),)
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == 10
    # the deleted topic's counts left its series for the all-topics one
    assert ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "gone"),)) not in m
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 14
    rm = "kafka_server_replicamanager_"
    assert m[(rm + "underreplicatedpartitions", ())] == 1
    assert m[(rm + "underminisrpartitioncount", ())] == 1
    assert m[(rm + "leadercount", ())] == 2
    assert m[(rm + "partitioncount", ())] == 3
    assert m[(rm + "isrshrinks_total", ())] == 4
    assert m[(rm + "isrexpands_total", ())] == 2
    ctl = "kafka_controller_kafkacontroller_"
    assert m[(ctl + "activecontrollercount", ())] == 1
    assert m[(ctl + "offlinepartitionscount", ())] == 1
    assert m[(ctl + "globaltopiccount", ())] == 1
    assert m[(ctl + "globalpartitioncount", ())] == 3
    assert m[(ctl + "fencedbrokercount", ())] == 1
    raft = "kafka_server_raft_metrics_"
    assert m[(raft + "current_leader", ())] == 1
    assert m[(raft + "current_epoch", ())] == 7
    assert m[(raft + "high_watermark", ())] == 55
    assert m[(raft + "commit_latency_avg", ())] == 7
    assert m[(raft + "commit_latency_max", ())] == 9
    tp1 = (("partition", "1"), ("topic", "t"))
    assert m[("kafka_log_log_size", tp1)] == 1001
    assert m[("kafka_log_log_numlogsegments", tp1)] == 2
    assert m[("kafka_log_log_logstartoffset", tp1)] == 3
    assert m[("kafka_log_log_logendoffset", tp1)] == 40
    gc = "kafka_server_group_coordinator_metrics_"
    assert m[(gc + "group_count", (("protocol", "classic"), ("state", "Stable")))] == 1
    assert m[(gc + "group_count", (("protocol", "classic"), ("state", "Empty")))] == 1
    assert m[(gc + "group_count", (("protocol", "classic"), ("state", "Dead")))] == 0
    assert m[(gc + "classic_group_completed_rebalance_count", ())] == 3
    assert m[(gc + "offset_commit_count", ())] == 9
    g0 = (("group", "g"), ("partition", "0"), ("topic", "t"))
    assert m[("kafka_consumergroup_group_lag", g0)] == 5  # high watermark 30 - 25
    assert m[("kafka_consumergroup_group_offset", g0)] == 25
    assert m[("kafka_consumergroup_group_max_lag", (("group", "g"),))] == 5
    assert m[("kafka_consumergroup_group_sum_lag", (("group", "g"),))] == 5
    # a partition not hosted here: its committed offset (to join with the end offsets its
    # brokers serve, in PromQL), no lag series
    h0 = (("group", "h"), ("partition", "0"), ("topic", "elsewhere"))
    assert m[("kafka_consumergroup_group_offset", h0)] == 1
    assert ("kafka_consumergroup_group_lag", h0) not in m
    assert ("kafka_consumergroup_group_max_lag", (("group", "h"),)) not in m
    listener = (("listener", "PLAINTEXT"),)
    assert m[("kafka_server_socket_server_metrics_connection_count", listener)] == 3
    assert m[("kafka_server_socket_server_metrics_incoming_byte_total", listener)] == 70
    assert m[("kafka_server_socket_server_metrics_outgoing_byte_total", listener)] == 900


def _conn() -> Any:
    """What the measuring dispatcher reads and sets on a connection (a real one reports the
    responses' departures: tests/metrics/test_request_times.py)."""
    return SimpleNamespace(timer=None, received_s=0.0, bytes_out=0, timing=None)


def test_requests_are_counted_and_timed_per_api_and_version() -> None:
    requests = RequestStats()
    frame = memoryview(bytes([0, api_keys.PRODUCE, 0, 9]) + b"rest")
    answered = [b"12345", memoryview(b"678")]
    measured = MeasuredDispatcher(lambda conn, f: answered, requests)  # type: ignore[arg-type]
    conn = _conn()

    def leaves() -> None:  # what the connection does with a sampled answer
        if conn.timing is not None:
            conn.timer.queued(conn.timing, answered, time.perf_counter())
            conn.timing = None
        conn.timer.sent(conn.bytes_out, time.perf_counter(), None)

    assert measured(conn, frame) is answered
    counters = requests.of(api_keys.PRODUCE, 9)
    assert counters.count == 1 and counters.times()["total"].count == 0  # not yet left
    leaves()
    times = counters.times()
    assert all(times[part].count == 1 for part in RequestCounters.PARTS)  # the first: timed
    assert times["remote"].buckets[0] == 1  # answered at once: 0 ms waiting
    for _ in range(FOLD_AT * SAMPLE_EVERY):  # many: one in SAMPLE_EVERY timed
        measured(conn, frame)
        leaves()
    assert counters.count == FOLD_AT * SAMPLE_EVERY + 1
    times = counters.times()
    assert all(times[part].count == FOLD_AT + 1 for part in RequestCounters.PARTS)

    async def later() -> list[Any]:
        await asyncio.sleep(0.01)
        return [b"xy"]

    async def waits() -> None:
        slow = MeasuredDispatcher(lambda conn, f: later(), requests)  # type: ignore[arg-type]
        result = slow(conn, memoryview(bytes([0, api_keys.PRODUCE, 0, 8]) + b"rest"))
        await result  # type: ignore[misc]
        await asyncio.sleep(0)
        leaves()

    asyncio.run(waits())
    waited = requests.of(api_keys.PRODUCE, 8).times()
    assert waited["remote"].count == 1 and waited["remote"].sum >= 10 * 0.9  # about 10 ms
    assert waited["total"].sum >= waited["remote"].sum
    none = MeasuredDispatcher(lambda conn, f: None, requests)  # type: ignore[arg-type]
    none(conn, memoryview(bytes([0, api_keys.PRODUCE, 0, 7]) + b"rest"))  # acks=0
    assert requests.of(api_keys.PRODUCE, 7).times()["total"].count == 1  # done once handled


def test_the_listener_answers_health_and_paths() -> None:
    ready = [False, "not caught up with the metadata"]
    listener = MetricsListener(
        "127.0.0.1", 0, CollectorRegistry(), lambda: (bool(ready[0]), str(ready[1])), Window()
    )
    status, kind, body = listener._answer(b"GET /health/ready HTTP/1.1\r\n\r\n")
    assert (status, kind) == (503, "application/json")
    assert b"not caught up with the metadata" in body
    ready[0] = True
    assert listener._answer(b"GET /health/ready HTTP/1.1\r\n\r\n")[0] == 200
    assert listener._answer(b"GET /health/live HTTP/1.1\r\n\r\n")[0] == 200
    assert listener._answer(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n")[0] == 200
    assert listener._answer(b"GET /other HTTP/1.1\r\n\r\n")[0] == 404
    assert listener._answer(b"POST /metrics HTTP/1.1\r\n\r\n")[0] == 405


def test_many_observations_land_where_one_by_one_would() -> None:
    values = [0.05, 0.1, 0.1000001, 0.3, 7.0, 10_000.0, 20_000.0, 0.0, 2.5]
    one, many = Histogram(), Histogram()
    for v in values:
        one.observe(v)
    many.observe_many(list(values))
    assert (many.buckets, many.count) == (one.buckets, one.count)
    assert many.sum == pytest.approx(one.sum)
