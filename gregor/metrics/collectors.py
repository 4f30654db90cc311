"""The broker's Prometheus collectors: each reads the node's state when `/metrics` is scraped
(on the event loop, the only thread that changes that state), so nothing but the counters of
stats.py costs anything between scrapes. Names and labels are Kafka's (names.py); the list of
every metric is in this package's docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from gregor.coordinator.group.classic import GroupState
from gregor.metrics import names
from gregor.metrics.stats import (
    BrokerTopicStats,
    Histogram,
    RequestStats,
    TopicCounters,
    Window,
)
from gregor.protocol import api_keys

NO_LEADER = -1


@dataclass
class BrokerSources:
    """What the collectors read, wired by the composition root. `image` returns the metadata
    image, `raft` the node's RaftNode (None before it starts), `active_controller` whether
    this node is the active controller; `replicas` is the ReplicaManager, `logs` the
    LogManager, `groups` the GroupCoordinator."""

    node_id: int
    replicas: Any
    logs: Any
    groups: Any
    image: Callable[[], Any]
    raft: Callable[[], Any]
    active_controller: Callable[[], bool]
    # per client listener name: open connections; bytes (read, sent)
    connections: Callable[[], Mapping[str, int]]
    socket_bytes: Callable[[], Mapping[str, tuple[int, int]]] = dict
    # per client listener name: connections (served, closed) so far
    connection_totals: Callable[[], Mapping[str, tuple[int, int]]] = dict
    # per client listener name: connections (served, closed) per second lately
    connection_rates: Callable[[], Mapping[str, tuple[float, float]]] = dict
    # connections accepted per second over the quota window: per client listener name, per
    # address under an `ip` connection_creation_rate, over the listeners the broker-wide rate
    # binds (None: no listener yet)
    accept_rate: Callable[[], Mapping[str, float]] = dict
    ip_accept_rate: Callable[[], Mapping[str, float]] = dict
    broker_accept_rate: Callable[[], float | None] = lambda: None
    # per client listener name: the average accept delay over the connection creation rate, ms
    accept_throttle: Callable[[], Mapping[str, float]] = dict
    # per client listener name: the average delay before closing connections over an address's
    # connection_creation_rate, ms
    ip_accept_throttle: Callable[[], Mapping[str, float]] = dict
    # per client listener name: ns its acceptor held connections over a creation rate
    acceptor_blocked: Callable[[], Mapping[str, int]] = dict
    topic_stats: BrokerTopicStats = field(default_factory=BrokerTopicStats)
    requests: RequestStats = field(default_factory=RequestStats)
    commit_latency: Window = field(default_factory=Window)
    loop_lag: Window = field(default_factory=Window)
    fetch_sessions: Any = None  # the FetchSessionCache (KIP-227)


def _counter(name: str, text: str) -> Metric:
    return Metric(name[: -len("_total")], text, "counter")


class TopicCollector:
    """kafka_server_brokertopicmetrics_*_total{topic} and the all-topics series (no label)."""

    _HELP = {
        "messages_in": "Records appended by clients as leader",
        "bytes_in": "Record batch bytes appended by clients as leader",
        "bytes_out": "Record bytes sent to consumers (follower fetches excluded)",
        "failed_produce": "Produce partition requests that failed",
        "failed_fetch": "Fetch partition requests that failed",
        "total_produce": "Produce partition requests",
        "total_fetch": "Fetch partition requests (consumers and followers)",
    }

    def __init__(self, stats: BrokerTopicStats, image: Callable[[], Any]) -> None:
        self.stats = stats
        self.image = image

    def collect(self) -> Iterator[Metric]:
        known = self.image().topics_by_name
        for gone in [t for t in self.stats.topics if t not in known]:
            self.stats.remove(gone)  # deleted (or never made): counted in the all-topics sum
        every = self.stats.all_topics()
        topics = sorted(self.stats.topics.items())
        for attr, name in names.TOPIC_METERS.items():
            family = _counter(name, self._HELP[attr])
            family.samples.append(Sample(name, {}, getattr(every, attr)))
            for topic, counters in topics:
                family.samples.append(Sample(name, {"topic": topic}, getattr(counters, attr)))
            yield family


def _merged(histograms: list[Histogram]) -> Histogram:
    out = Histogram()
    for h in histograms:
        out = out.merged(h)
    return out


class RequestCollector:
    """kafka_network_requestmetrics_requests_total{request,version} and the time histograms
    {request} (ms)."""

    def __init__(self, stats: RequestStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            names.REQUESTS, "Requests received", labels=["request", "version"]
        )
        per_api: dict[str, list[Any]] = {}
        for (key, version), counters in sorted(self.stats.by_api.items()):
            entry = api_keys.BY_KEY.get(key)
            request = entry.name if entry is not None else str(key)
            requests.add_metric([request, str(version)], counters.count)
            per_api.setdefault(request, []).append(counters)
        yield requests
        helps = {
            "total": "Time from a request's arrival to its response's last byte sent, ms",
            "requestqueue": "Time from a request's arrival to its handler being called, ms",
            "local": "Time in the request's handler on the event loop, ms",
            "remote": "Time waiting for other replicas, the purgatory or another node, ms",
            "responsequeue": "Time a ready response waited for earlier ones to be sent, ms",
            "responsesend": "Time from a response's turn to its last byte sent, ms",
        }
        for part, name in names.REQUEST_TIMES.items():
            family = HistogramMetricFamily(name, helps[part], labels=["request"])
            for request, all_versions in sorted(per_api.items()):
                h = _merged([c.times()[part] for c in all_versions])
                family.add_metric([request], h.cumulative(), h.sum)
            yield family


class ReplicaCollector:
    """kafka_server_replicamanager_* and kafka_log_log_* of the partitions hosted here."""

    def __init__(self, sources: BrokerSources) -> None:
        self.s = sources

    def collect(self) -> Iterator[Metric]:
        rm = self.s.replicas
        partitions = list(rm.partitions.values())
        led = [p for p in partitions if p.is_leader]
        under = sum(1 for p in led if len(p.isr) < len(p.replicas))
        under_min = sum(1 for p in led if len(p.isr) < p.min_insync_replicas)
        offline = sum(1 for p in partitions if p.log.offline)
        gauges = {
            "UnderReplicatedPartitions": (under, "Led partitions whose ISR is smaller than their replicas"),
            "UnderMinIsrPartitionCount": (under_min, "Led partitions whose ISR is below min.insync.replicas"),
            "OfflineReplicaCount": (offline, "Replicas hosted here in an offline log dir"),
            "LeaderCount": (len(led), "Partitions led by this broker"),
            "PartitionCount": (len(partitions), "Partitions hosted by this broker"),
        }  # fmt: skip
        for name, (value, text) in gauges.items():
            yield GaugeMetricFamily(names.replica_manager(name), text, value=value)
        shrinks = CounterMetricFamily(
            names.replica_manager("IsrShrinks"), "ISR shrinks committed", value=rm.isr_shrinks
        )
        expands = CounterMetricFamily(
            names.replica_manager("IsrExpands"), "ISR expansions committed", value=rm.isr_expands
        )
        yield shrinks
        yield expands
        yield from self._logs(partitions)

    def _logs(self, partitions: list[Any]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(names.log("Size"), "Bytes of the log's segments", labels=labels)
        segments = GaugeMetricFamily(names.log("NumLogSegments"), "Segments", labels=labels)
        start = GaugeMetricFamily(names.log("LogStartOffset"), "Log start offset", labels=labels)
        end = GaugeMetricFamily(names.log("LogEndOffset"), "Log end offset", labels=labels)
        for p in sorted(partitions, key=lambda p: (p.topic, p.index)):
            log, key = p.log, [p.topic, str(p.index)]
            size.add_metric(key, log.size_in_bytes)
            segments.add_metric(key, len(log.segments))
            start.add_metric(key, log.log_start_offset)
            end.add_metric(key, log.log_end_offset)
        yield from (size, segments, start, end)


class ControllerCollector:
    """kafka_controller_kafkacontroller_* from this node's metadata image, and the Raft
    metrics of its KRaft node (kafka_server_raft_metrics_*)."""

    def __init__(self, sources: BrokerSources) -> None:
        self.s = sources

    def collect(self) -> Iterator[Metric]:
        image = self.s.image()
        topics = list(image.topics_by_id.values())
        regs = [reg for t in topics for reg in t.partitions.values()]
        brokers = list(image.brokers.values())
        gauges = {
            "ActiveControllerCount": (int(self.s.active_controller()), "1 on the active controller"),
            "OfflinePartitionsCount": (sum(1 for r in regs if r.leader == NO_LEADER), "Partitions without a leader"),
            "GlobalTopicCount": (len(topics), "Topics in the cluster"),
            "GlobalPartitionCount": (len(regs), "Partitions in the cluster"),
            "ActiveBrokerCount": (sum(1 for b in brokers if not b.fenced), "Registered unfenced brokers"),
            "FencedBrokerCount": (sum(1 for b in brokers if b.fenced), "Registered fenced brokers"),
        }  # fmt: skip
        for name, (value, text) in gauges.items():
            yield GaugeMetricFamily(names.controller(name), text, value=value)
        yield from self._raft()

    def _raft(self) -> Iterator[Metric]:
        node = self.s.raft()
        leader = node.leader_id if node is not None else None
        hw = node.high_watermark if node is not None else None
        values = {
            "current-leader": (-1 if leader is None else leader, "The metadata quorum's leader (-1: none known)"),
            "current-epoch": (node.epoch if node is not None else -1, "The quorum's epoch"),
            "high-watermark": (-1 if hw is None else hw, "The metadata log's high watermark (-1: not known)"),
            "log-end-offset": (node.log.end_offset if node is not None else -1, "The metadata log's end offset"),
        }  # fmt: skip
        latency = self.s.commit_latency
        for attr, window_value in (
            ("commit-latency-avg", latency.avg),
            ("commit-latency-max", latency.max),
        ):
            values[attr] = (
                float("nan") if window_value is None else window_value,
                "Metadata commit latency over the last 64 commits appended here, ms",
            )
        for attr, (value, text) in values.items():
            yield GaugeMetricFamily(names.raft(attr), text, value=value)


class GroupCollector:
    """Group coordinator metrics and consumer-group lag (as kafka-lag-exporter) for the groups
    this node coordinates, against the high watermark of partitions hosted here."""

    def __init__(self, sources: BrokerSources) -> None:
        self.s = sources

    def collect(self) -> Iterator[Metric]:
        groups = self.s.groups
        shards = groups.runtime.shards()
        by_state = dict.fromkeys((s.value for s in GroupState), 0)
        for shard in shards:
            for group in shard.groups.values():
                by_state[group.state.value] += 1
        count = GaugeMetricFamily(
            names.group_coordinator("group-count"), "Groups by state", labels=["protocol", "state"]
        )
        for state, n in by_state.items():
            count.add_metric(["classic", state], n)
        yield count
        stats = groups.adapter.stats
        yield GaugeMetricFamily(
            names.group_coordinator("classic-group-completed-rebalance-count"),
            "Rebalances completed with members (generations formed)",
            value=stats.rebalances,
        )
        yield GaugeMetricFamily(
            names.group_coordinator("offset-commit-count"),
            "Offsets committed (one per partition accepted)",
            value=stats.offset_commits,
        )
        yield from self._lag(shards)

    def _lag(self, shards: list[Any]) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        offset = GaugeMetricFamily(
            "kafka_consumergroup_group_offset", "Committed offset", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_group_lag",
            "High watermark minus the committed offset",
            labels=labels,
        )
        max_lag = GaugeMetricFamily(
            "kafka_consumergroup_group_max_lag", "Largest lag", labels=["group"]
        )
        sum_lag = GaugeMetricFamily(
            "kafka_consumergroup_group_sum_lag", "Sum of lags", labels=["group"]
        )
        replicas = self.s.replicas
        for shard in shards:
            for group_id, committed in sorted(shard.offsets.items()):
                lags = []
                for (topic, index), om in sorted(committed.items()):
                    key = [group_id, topic, str(index)]
                    offset.add_metric(key, om.offset)  # every partition: joinable in PromQL
                    p = replicas.get(topic, index)
                    if p is None:
                        continue  # not hosted here: its end is another broker's to say
                    value = max(0, p.log.high_watermark - om.offset)
                    lag.add_metric(key, value)
                    lags.append(value)
                if lags:
                    max_lag.add_metric([group_id], max(lags))
                    sum_lag.add_metric([group_id], sum(lags))
        yield from (offset, lag, max_lag, sum_lag)


class NetworkCollector:
    """kafka_server_socket_server_metrics_*{listener} and the event loop's lag."""

    def __init__(self, sources: BrokerSources) -> None:
        self.s = sources

    def collect(self) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            names.socket_server("connection-count"), "Open client connections", labels=["listener"]
        )
        for listener, n in self.s.connections().items():
            count.add_metric([listener], n)
        yield count
        throttle = GaugeMetricFamily(
            names.socket_server("connection-accept-throttle-time"),
            "Average delay (ms) of the connections accepted over a connection creation rate",
            labels=["listener"],
        )
        for listener, ms in self.s.accept_throttle().items():
            throttle.add_metric([listener], ms)
        yield throttle
        ip_throttle = GaugeMetricFamily(
            names.socket_server("ip-connection-accept-throttle-time"),
            "Average delay (ms) before closing connections over an address's creation rate",
            labels=["listener"],
        )
        for listener, ms in self.s.ip_accept_throttle().items():
            ip_throttle.add_metric([listener], ms)
        yield ip_throttle
        yield from self._accept_rates()
        blocked = CounterMetricFamily(
            names.meter("kafka.network", "Acceptor", "AcceptorBlockedPercent"),
            "Nanoseconds the listener held accepted connections back (creation rate)",
            labels=["listener"],
        )
        for listener, ns in self.s.acceptor_blocked().items():
            blocked.add_metric([listener], ns)
        yield blocked
        for source, attr, index, text in (
            (self.s.socket_bytes, "incoming-byte-total", 0, "Bytes read from client connections"),
            (self.s.socket_bytes, "outgoing-byte-total", 1, "Bytes sent on client connections"),
            (self.s.connection_totals, "connection-creation-total", 0, "Connections served"),
            (self.s.connection_totals, "connection-close-total", 1, "Connections closed"),
        ):
            family = CounterMetricFamily(names.socket_server(attr), text, labels=["listener"])
            for listener, counts in source().items():
                family.add_metric([listener], counts[index])
            yield family
        for attr, index, text in (
            ("connection-creation-rate", 0, "Connections served per second (last 30-60 s)"),
            ("connection-close-rate", 1, "Connections closed per second (last 30-60 s)"),
        ):
            gauge = GaugeMetricFamily(names.socket_server(attr), text, labels=["listener"])
            for listener, rates in self.s.connection_rates().items():
                gauge.add_metric([listener], rates[index])
            yield gauge
        lag = self.s.loop_lag
        yield GaugeMetricFamily(
            "gregor_event_loop_lag_seconds",
            "How late the event loop ran a timer, at the last probe (every 0.5 s)",
            value=(lag.last or 0.0) / 1000,
        )
        yield GaugeMetricFamily(
            "gregor_event_loop_lag_max_seconds",
            "The largest of the last 64 probes' lags",
            value=(lag.max or 0.0) / 1000,
        )

    def _accept_rates(self) -> Iterator[Metric]:
        """connection-accept-rate, one series per listener and one per address under an `ip`
        connection_creation_rate (Kafka tags the one `listener`, the other `ip`), and
        broker-connection-accept-rate: per second over the quota window."""
        name = names.socket_server("connection-accept-rate")
        family = Metric(name, "Connections accepted per second (quota window)", "gauge")
        for listener, rate in self.s.accept_rate().items():
            family.add_sample(name, {"listener": listener}, rate)
        for ip, rate in self.s.ip_accept_rate().items():
            family.add_sample(name, {"ip": ip}, rate)
        yield family
        broker = self.s.broker_accept_rate()
        if broker is not None:
            yield GaugeMetricFamily(
                names.socket_server("broker-connection-accept-rate"),
                "Connections accepted per second by the listeners max.connection.creation.rate"
                " binds (quota window)",
                value=broker,
            )


class FetchSessionCollector:
    """kafka_server_fetchsessioncache_*: Kafka's FetchSessionCache gauges and evictions."""

    def __init__(self, sources: BrokerSources) -> None:
        self.s = sources

    def collect(self) -> Iterator[Metric]:
        cache = self.s.fetch_sessions
        if cache is None:
            return
        kind = ("kafka.server", "FetchSessionCache")
        yield GaugeMetricFamily(
            names.gauge(*kind, "NumIncrementalFetchSessions"),
            "Incremental fetch sessions cached",
            value=len(cache),
        )
        yield GaugeMetricFamily(
            names.gauge(*kind, "NumIncrementalFetchPartitionsCached"),
            "Partitions of the cached incremental fetch sessions",
            value=cache.total_partitions(),
        )
        yield _counter_of(
            names.meter(*kind, "IncrementalFetchSessionEvictionsPerSec"),
            "Incremental fetch sessions evicted",
            cache.evictions,
        )


def _counter_of(name: str, text: str, value: int) -> Metric:
    return CounterMetricFamily(name[: -len("_total")], text, value=value)


def collectors(sources: BrokerSources, broker: bool = True) -> list[Any]:
    """Every collector of a broker node; of a controller-only node (`broker` False, no
    partitions, groups or client listener): the controller's, Raft's and its listener's."""
    if not broker:
        return [ControllerCollector(sources), NetworkCollector(sources)]
    return [
        TopicCollector(sources.topic_stats, sources.image),
        RequestCollector(sources.requests),
        ReplicaCollector(sources),
        ControllerCollector(sources),
        GroupCollector(sources),
        NetworkCollector(sources),
        FetchSessionCollector(sources),
    ]


__all__ = ["BrokerSources", "TopicCounters", "collectors"]
