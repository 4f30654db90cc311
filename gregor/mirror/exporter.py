"""A mirror process's metrics over HTTP in Prometheus' text format (`gregor mirror --metrics
HOST:PORT`, path `/metrics`), named as the Prometheus JMX exporter renders MirrorMaker 2's
MBeans with lowercased names: `kafka.connect.mirror:type=MirrorSourceConnector,source=A,
target=B,topic=A.orders,partition=0` attribute `record-count` becomes
`kafka_connect_mirror_mirrorsourceconnector_record_count{source="A",target="B",
topic="A.orders",partition="0"}`. Like the exporter's, every value is a gauge.

Added to MirrorMaker's: `kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_age_ms`,
the time since this process last wrote a checkpoint of the group and partition (checkpoints
are written when a group's offset moves). The lag, which MirrorMaker leaves to its consumer's
metrics, has the consumer's name:
`kafka_consumer_consumer_fetch_manager_metrics_records_lag{client_id,topic,partition}` (the
source topic), with the flow's `source` and `target` added.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from gregor.mirror.metrics import MirrorMetrics, WindowedStat

SOURCE = "kafka_connect_mirror_mirrorsourceconnector_"
CHECKPOINT = "kafka_connect_mirror_mirrorcheckpointconnector_"
LAG = "kafka_consumer_consumer_fetch_manager_metrics_records_lag"
PARTITION_LABELS = ["source", "target", "topic", "partition"]
GROUP_LABELS = ["source", "target", "group", "topic", "partition"]

_SOURCE_HELP = {
    "record_count": "Number of source records replicated to the target cluster.",
    "record_rate": "Average number of source records replicated to the target cluster per second.",
    "byte_count": "Number of bytes replicated to the target cluster.",
    "byte_rate": "Average number of bytes replicated per second.",
    "record_age_ms": "The age of incoming source records when replicated to the target cluster.",
    "replication_latency_ms": "Time it takes records to replicate from source to target cluster.",
}


def _families(prefix: str, name: str, text: str, labels: list[str]) -> dict[str, Any]:
    return {name: GaugeMetricFamily(prefix + name, text, labels=labels)}


def _stat_families(prefix: str, name: str, text: str, labels: list[str]) -> dict[str, Any]:
    out = _families(prefix, name, text, labels)
    for kind in ("max", "min", "avg"):
        out[f"{name}_{kind}"] = GaugeMetricFamily(
            f"{prefix}{name}_{kind}", f"{kind} of: {text}", labels=labels
        )
    return out


def _add_stat(
    fams: dict[str, Any], name: str, stat: WindowedStat, labels: list[str], now_ms: int
) -> None:
    values = {
        name: stat.last,
        f"{name}_max": stat.max(now_ms),
        f"{name}_min": stat.min(now_ms),
        f"{name}_avg": stat.avg(now_ms),
    }
    for key, value in values.items():
        if value is not None:
            fams[key].add_metric(labels, float(value))


class MirrorCollector:
    """Reads a `MirrorMetrics` at each scrape."""

    def __init__(self, metrics: MirrorMetrics, now_ms: Any):
        self.metrics = metrics
        self.now_ms = now_ms

    def collect(self) -> Iterator[Any]:
        now = self.now_ms()
        fams: dict[str, Any] = {}
        for name, text in _SOURCE_HELP.items():
            make = _stat_families if name.endswith("_ms") else _families
            fams.update(make(SOURCE, name, text, PARTITION_LABELS))
        latency = "Time it takes consumer group offsets to replicate from source to target cluster."
        checkpoints = _stat_families(CHECKPOINT, "checkpoint_latency_ms", latency, GROUP_LABELS)
        age = GaugeMetricFamily(
            CHECKPOINT + "checkpoint_age_ms",
            "Time since this process last wrote a checkpoint of the group and partition.",
            labels=GROUP_LABELS,
        )
        lag = GaugeMetricFamily(
            LAG,
            "Records of the source partition not copied yet.",
            labels=["client_id", "source", "target", "topic", "partition"],
        )
        with self.metrics.lock:
            for (source, target, topic, partition), m in sorted(self.metrics.partitions.items()):
                labels = [source, target, topic, str(partition)]
                fams["record_count"].add_metric(labels, m.records)
                fams["byte_count"].add_metric(labels, m.bytes)
                fams["record_rate"].add_metric(labels, m.record_rate.rate(now))
                fams["byte_rate"].add_metric(labels, m.byte_rate.rate(now))
                _add_stat(fams, "record_age_ms", m.age, labels, now)
                _add_stat(fams, "replication_latency_ms", m.latency, labels, now)
            for key, stat in sorted(self.metrics.checkpoints.items()):
                source, target, group, topic, partition = key
                labels = [source, target, group, topic, str(partition)]
                _add_stat(checkpoints, "checkpoint_latency_ms", stat, labels, now)
                written = self.metrics.checkpoint_written_ms.get(key)
                if written is not None:
                    age.add_metric(labels, max(0, now - written))
            for (source, target, topic, partition), value in sorted(self.metrics.lags.items()):
                client = f"connect-mm2-{source}->{target}"
                lag.add_metric([client, source, target, topic, str(partition)], value)
        yield from fams.values()
        yield from checkpoints.values()
        yield age
        yield lag


def serve(metrics: MirrorMetrics, host: str, port: int, now_ms: Any) -> tuple[Any, str]:
    """Serve `/metrics` on host:port (0: any free port) in a daemon thread; returns the server
    and the address it is bound to."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector(metrics, now_ms))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound_host, bound_port = server.server_address[:2]
    return server, f"{bound_host!s}:{bound_port}"
