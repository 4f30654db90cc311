"""What running mirrors measure, for `gregor mirror status --metrics HOST:PORT,...`: the clusters
say where each partition stands (lag, positions), but replication latency and the copy rates
exist only in the processes doing the copying. Their `/metrics` text (gregor's exporter, or any
that uses MirrorMaker 2's names as the JMX exporter renders them) is read per remote
topic-partition:

    replication_latency_ms   `..._replication_latency_ms_avg` over the window (else the last)
    records_per_s            `..._record_rate`
    bytes_per_s              `..._byte_rate`

Several processes share a flow's partitions, and one that gave a partition away still reports
its fading rates for a window: rates are summed over the processes, and the latency is that of
the process copying the partition fastest. Sans I/O: the caller fetches the texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gregor.mirror.exporter import SOURCE

Key = tuple[str, str, str, int]  # (source alias, target alias, remote topic, partition)
_WANTED = {
    SOURCE + "replication_latency_ms_avg": "latency_avg",
    SOURCE + "replication_latency_ms": "latency_last",
    SOURCE + "record_rate": "records",
    SOURCE + "byte_rate": "bytes",
}


@dataclass(frozen=True)
class PartitionRates:
    replication_latency_ms: float | None
    records_per_s: float
    bytes_per_s: float


def parse(text: str) -> dict[Key, PartitionRates]:
    """One process's measurements per remote topic-partition (ValueError: not metrics text)."""
    found: dict[Key, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = _WANTED.get(sample.name)
            labels = sample.labels
            if field is None or not {"source", "target", "topic", "partition"} <= set(labels):
                continue
            key = (labels["source"], labels["target"], labels["topic"], int(labels["partition"]))
            found.setdefault(key, {})[field] = float(sample.value)
    out = {}
    for key, values in found.items():
        latency = values.get("latency_avg", values.get("latency_last"))
        out[key] = PartitionRates(latency, values.get("records", 0.0), values.get("bytes", 0.0))
    return out


def merge(processes: Iterable[Mapping[Key, PartitionRates]]) -> dict[Key, PartitionRates]:
    """The processes' measurements together: rates summed, the latency of the fastest copier
    of each partition among those reporting one."""
    by_key: dict[Key, list[PartitionRates]] = {}
    for rates in processes:
        for key, r in rates.items():
            by_key.setdefault(key, []).append(r)
    out = {}
    for key, reports in by_key.items():
        timed = [r for r in reports if r.replication_latency_ms is not None]
        fastest = max(timed, key=lambda r: r.records_per_s) if timed else None
        out[key] = PartitionRates(
            fastest.replication_latency_ms if fastest else None,
            sum(r.records_per_s for r in reports),
            sum(r.bytes_per_s for r in reports),
        )
    return out
