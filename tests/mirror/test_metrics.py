"""The mirror's measurements (gregor.mirror.metrics), their Prometheus rendering under
MirrorMaker 2's names (gregor.mirror.exporter) and the sans-I/O core of `gregor mirror status`,
with the client's own Message objects."""

from __future__ import annotations

import pytest
from confluent_kafka import Message
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gregor.mirror.config import MirrorMakerConfig
from gregor.mirror.exporter import MirrorCollector
from gregor.mirror.formats import Checkpoint, Heartbeat
from gregor.mirror.metrics import SAMPLE_MS, MirrorMetrics, PartitionTracker, WindowedStat, runs
from gregor.mirror.status import (
    FlowStatus,
    PartitionStatus,
    assemble,
    checkpoint_ages,
    heartbeat_age,
    lag,
    with_rates,
)
from gregor.mirror.status_metrics import PartitionRates, merge, parse

pytestmark = pytest.mark.unit


def msg(topic: str, partition: int, offset: int, value: bytes | None = b"v", ts: int = 1000):
    return Message(topic=topic, partition=partition, offset=offset, value=value, timestamp=(1, ts))


def test_runs_split_a_batch_by_partition_in_order() -> None:
    batch = [msg("t", 0, o, b"ab", ts=100 + o) for o in range(5)]
    batch += [msg("t", 1, o, b"abc") for o in range(10, 17)]
    batch += [msg("u", 1, 3, None), msg("t", 0, 5, b"z", ts=300)]
    found = runs(batch)
    assert [(r.tp, r.count, r.last_offset, r.value_bytes) for r in found] == [
        (("t", 0), 5, 4, 10),
        (("t", 1), 7, 16, 21),
        (("u", 1), 1, 3, 0),
        (("t", 0), 1, 5, 1),
    ]
    assert (found[0].first_timestamp, found[0].last_timestamp) == (100, 104)


def test_a_run_with_gaps_or_a_foreign_record_inside_is_counted_exactly() -> None:
    # a compacted partition (offsets 0, 2, 4, 6) whose ends and probes all look alike
    batch = [msg("t", 0, 0), msg("t", 0, 2), msg("t", 1, 9), msg("t", 0, 4), msg("t", 0, 6)]
    assert [(r.tp, r.count) for r in runs(batch)] == [
        (("t", 0), 2),
        (("t", 1), 1),
        (("t", 0), 2),
    ]
    assert [r.count for r in runs([msg("t", 0, o * 3) for o in range(9)])] == [9]


def test_value_bytes_are_exact_in_short_runs_and_estimated_from_every_eighth_in_long_ones() -> None:
    mixed = [msg("t", 0, o, b"x" * (o % 3)) for o in range(32)]
    assert runs(mixed)[0].value_bytes == sum(o % 3 for o in range(32))
    same = [msg("t", 0, o, b"abcde") for o in range(1000)]
    assert runs(same)[0].value_bytes == 5000


def test_windowed_stat_keeps_two_samples_of_thirty_seconds() -> None:
    s = WindowedStat()
    s.record(10, 0)
    s.record(30, 1000)
    assert (s.last, s.min(1000), s.max(1000), s.avg(1000)) == (30, 10, 30, 20)
    s.record(5, SAMPLE_MS + 1)
    assert (s.min(SAMPLE_MS + 1), s.max(SAMPLE_MS + 1)) == (5, 30)
    later = 2 * SAMPLE_MS + 2  # the first sample has left the window
    s.record(7, later)
    assert (s.min(later), s.max(later), s.last) == (5, 7, 7)
    assert s.max(10 * SAMPLE_MS) is None


def test_records_count_once_the_target_acknowledged_them() -> None:
    metrics = MirrorMetrics()
    tracker = PartitionTracker(metrics, "A", "B", lambda t: f"A.{t}")
    batch = [msg("t", 0, o, b"1234", ts=1000) for o in range(10)] + [msg("t", 1, 0, ts=1500)]
    tracker.polled(batch, now_ms=1200)
    acked = {("t", 0): 4}
    tracker.acknowledged(lambda tp: acked.get(tp, -1), now_ms=1300)
    tracker.publish(1300)
    assert metrics.partitions[("A", "B", "A.t", 0)].records == 0  # the run is not all written
    acked[("t", 0)] = 9
    tracker.acknowledged(lambda tp: acked.get(tp, -1), now_ms=1400)
    assert metrics.partitions[("A", "B", "A.t", 0)].records == 0  # not published yet
    tracker.publish(1400)
    p0 = metrics.partitions[("A", "B", "A.t", 0)]
    assert (p0.records, p0.bytes) == (10, 40)
    assert (p0.latency.last, p0.latency.max(1400)) == (400, 400)
    assert p0.age.max(1400) == 200
    assert ("A", "B", "A.t", 1) not in metrics.partitions or (
        metrics.partitions[("A", "B", "A.t", 1)].records == 0
    )
    tracker.forget([("t", 1)])  # revoked: its next owner copies and counts it
    acked[("t", 1)] = 0
    tracker.acknowledged(lambda tp: acked.get(tp, -1), now_ms=1500)
    tracker.publish(1500)
    assert metrics.partitions[("A", "B", "A.t", 1)].records == 0
    tracker.polled([msg("t", 0, 10, b"12", ts=1500)], now_ms=1600)
    acked[("t", 0)] = 10
    tracker.acknowledged(lambda tp: acked.get(tp, -1), now_ms=1700)
    tracker.publish(1700)
    assert (p0.records, p0.bytes, p0.latency.last, p0.latency.max(1700)) == (11, 42, 200, 400)


def test_the_exporter_renders_mirror_maker_names_as_the_jmx_exporter() -> None:
    metrics = MirrorMetrics()
    tracker = PartitionTracker(metrics, "A", "B", lambda t: f"A.{t}")
    tracker.polled([msg("orders", 3, o, b"xy", ts=0) for o in range(4)], now_ms=50)
    tracker.acknowledged(lambda tp: 3, now_ms=80)
    tracker.publish(80)
    metrics.set_lags("A", "B", {("orders", 3): 12})
    metrics.checkpoint_written("A", "B", "app", ("A.orders", 3), 25, now_ms=80)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector(metrics, lambda: 100))
    text = generate_latest(registry).decode()
    labels = 'partition="3",source="A",target="B",topic="A.orders"'
    source = "kafka_connect_mirror_mirrorsourceconnector_"
    assert f"{source}record_count{{{labels}}} 4.0" in text
    assert f"{source}byte_count{{{labels}}} 8.0" in text
    assert f"{source}replication_latency_ms{{{labels}}} 80.0" in text
    assert f"{source}replication_latency_ms_max{{{labels}}} 80.0" in text
    assert f"{source}record_age_ms_avg{{{labels}}} 50.0" in text
    assert f"{source}record_rate{{{labels}}}" in text and f"{source}byte_rate{{{labels}}}" in text
    group = 'group="app",partition="3",source="A",target="B",topic="A.orders"'
    checkpoint = "kafka_connect_mirror_mirrorcheckpointconnector_"
    assert f"{checkpoint}checkpoint_latency_ms{{{group}}} 25.0" in text
    assert f"{checkpoint}checkpoint_age_ms{{{group}}} 20.0" in text
    lag_labels = 'client_id="connect-mm2-A->B",partition="3",source="A",target="B",topic="orders"'
    assert f"kafka_consumer_consumer_fetch_manager_metrics_records_lag{{{lag_labels}}} 12.0" in text
    metrics.drop_lags("A", "B", [("orders", 3)])
    assert "records_lag{" not in generate_latest(registry).decode()


def test_status_core() -> None:
    assert lag(100, 0, 60) == 40
    assert lag(100, 30, None) == 70  # never committed: the mirror starts at the beginning
    assert lag(100, 0, 100) == 0
    beats = [
        (Heartbeat("B", "A", 5000).record_key(), Heartbeat("B", "A", 5000).record_value()),
        (Heartbeat("C", "A", 7000).record_key(), Heartbeat("C", "A", 7000).record_value()),
        (Heartbeat("A", "B", 9000).record_key(), Heartbeat("A", "B", 9000).record_value()),
        (b"junk", b"junk"),
    ]
    assert heartbeat_age(beats, "A", 10_000) == 3000
    assert heartbeat_age(beats[2:], "A", 10_000) is None
    cps = [
        Checkpoint("app", "A.orders", 0, 5, 5),
        Checkpoint("app", "A.orders", 1, 5, 5),
        Checkpoint("etl", "A.orders", 0, 1, 1),
    ]
    records = [
        (c.record_key(), c.record_value(), ts) for c, ts in zip(cps, (100, 400, 200), strict=True)
    ]
    ages = [(g.group, g.partitions, g.checkpoint_age_ms) for g in checkpoint_ages(records, 1000)]
    assert ages == [("app", 2, 600), ("etl", 1, 800)]
    config = MirrorMakerConfig.from_properties(
        {
            "clusters": "A, B",
            "A.bootstrap.servers": "a:9092",
            "B.bootstrap.servers": "b:9092",
            "A->B.enabled": "true",
        }
    )
    rows = assemble(
        config.flow("A", "B"), {("orders", 0): (0, 10)}, {("orders", 0): 4}, {("A.orders", 0): 4}
    )
    assert [(r.remote_topic, r.position, r.lag, r.target_end) for r in rows] == [
        ("A.orders", 4, 6, 4)
    ]


def test_records_not_copied_back_in_a_cycle_are_not_counted() -> None:
    metrics = MirrorMetrics()
    tracker = PartitionTracker(metrics, "A", "B", lambda t: t)  # the identity policy
    batch = [msg("t", 0, o, b"1234", ts=1000) for o in range(6)] + [msg("t", 1, 0, b"1")]
    batch += [msg("t", 0, o, b"1234", ts=1000) for o in range(6, 9)]
    # three records of t-0 came from B (their provenance header says so): not copied
    tracker.polled(batch, 1100, {("t", 0): [3, 12]})
    tracker.acknowledged(lambda tp: 8 if tp == ("t", 0) else 0, 1200)
    tracker.publish(1200)
    p0 = metrics.partitions[("A", "B", "t", 0)]
    assert (p0.records, p0.bytes) == (6, 24)
    assert metrics.partitions[("A", "B", "t", 1)].records == 1


def test_status_reads_what_the_exporter_serves_and_merges_processes() -> None:
    metrics = MirrorMetrics()
    tracker = PartitionTracker(metrics, "A", "B", lambda t: f"A.{t}")
    tracker.polled([msg("orders", 3, o, b"xy", ts=0) for o in range(4)], now_ms=50)
    tracker.acknowledged(lambda tp: 3, now_ms=80)
    tracker.publish(80)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector(metrics, lambda: 1080))
    one = parse(generate_latest(registry).decode())
    (rates,) = one.values()
    assert list(one) == [("A", "B", "A.orders", 3)]
    assert rates.replication_latency_ms == 80.0  # the window's average: every copy took 80 ms
    assert rates.records_per_s > 0 and rates.bytes_per_s == rates.records_per_s * 2
    # a second process that gave the partition away: rates add up, the copier's latency stays
    fading = {("A", "B", "A.orders", 3): PartitionRates(900.0, 0.5, 1.0)}
    other = {("A", "B", "A.other", 0): PartitionRates(None, 0.0, 0.0)}
    merged = merge([one, fading, other])
    assert merged[("A", "B", "A.orders", 3)] == PartitionRates(
        80.0, rates.records_per_s + 0.5, rates.bytes_per_s + 1.0
    )
    assert merged[("A", "B", "A.other", 0)].replication_latency_ms is None
    status = FlowStatus("A->B", False, None, [
        PartitionStatus("orders", 3, "A.orders", 4, 4, 0, 4),
        PartitionStatus("orders", 4, "A.orders", 0, None, 0, 0),
    ])  # fmt: skip
    with_rates(status, "A", "B", merged)
    assert status.partitions[0].replication_latency_ms == 80.0
    assert (status.partitions[1].records_per_s, status.partitions[1].replication_latency_ms) == (
        0.0,
        None,
    )
    with pytest.raises(ValueError):
        parse("not metrics {")
