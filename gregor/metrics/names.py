"""Kafka's metric names as Prometheus sees them through the JMX exporter's common rules
(`lowercaseOutputName: true`), so dashboards and alerts written for Kafka read gregor unchanged.

    kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t  Count
        -> kafka_server_brokertopicmetrics_messagesin_total{topic="t"}
    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions     Value
        -> kafka_server_replicamanager_underreplicatedpartitions
    kafka.server:type=raft-metrics  current-leader
        -> kafka_server_raft_metrics_current_leader

A meter's `Count` ends in `_total` with its `PerSec` dropped; a gauge's `Value` is the name
itself; a Kafka (non-Yammer) metric's attribute joins the type with `-` turned into `_`. The
MBean's other keys (topic, partition, request, version...) become labels.
"""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def _part(text: str) -> str:
    return _INVALID.sub("_", text).lower()


def meter(domain: str, type_: str, name: str) -> str:
    """A Yammer meter's Count: `kafka.server`, `BrokerTopicMetrics`, `BytesInPerSec` ->
    `kafka_server_brokertopicmetrics_bytesin_total`."""
    if name.endswith("PerSec"):
        name = name[: -len("PerSec")]
    return f"{_part(domain)}_{_part(type_)}_{_part(name)}_total"


def gauge(domain: str, type_: str, name: str) -> str:
    """A Yammer gauge's Value (or a histogram's base name): `kafka.controller`,
    `KafkaController`, `ActiveControllerCount` -> `kafka_controller_kafkacontroller_activecontrollercount`."""
    return f"{_part(domain)}_{_part(type_)}_{_part(name)}"


def attribute(domain: str, type_: str, attr: str) -> str:
    """A Kafka metric (an MBean attribute): `kafka.server`, `raft-metrics`, `current-leader` ->
    `kafka_server_raft_metrics_current_leader`."""
    return f"{_part(domain)}_{_part(type_)}_{_part(attr)}"


# The names gregor serves, built once (collectors.py).
TOPIC_METERS = {
    "messages_in": meter("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec"),
    "bytes_in": meter("kafka.server", "BrokerTopicMetrics", "BytesInPerSec"),
    "bytes_out": meter("kafka.server", "BrokerTopicMetrics", "BytesOutPerSec"),
    "failed_produce": meter("kafka.server", "BrokerTopicMetrics", "FailedProduceRequestsPerSec"),
    "failed_fetch": meter("kafka.server", "BrokerTopicMetrics", "FailedFetchRequestsPerSec"),
    "total_produce": meter("kafka.server", "BrokerTopicMetrics", "TotalProduceRequestsPerSec"),
    "total_fetch": meter("kafka.server", "BrokerTopicMetrics", "TotalFetchRequestsPerSec"),
}
REQUESTS = meter("kafka.network", "RequestMetrics", "RequestsPerSec")
REQUEST_TIMES = {
    part: gauge("kafka.network", "RequestMetrics", f"{name}TimeMs")
    for part, name in (
        ("total", "Total"),
        ("requestqueue", "RequestQueue"),
        ("local", "Local"),
        ("remote", "Remote"),
        ("responsequeue", "ResponseQueue"),
        ("responsesend", "ResponseSend"),
    )
}


def replica_manager(name: str) -> str:
    return gauge("kafka.server", "ReplicaManager", name)


def controller(name: str) -> str:
    return gauge("kafka.controller", "KafkaController", name)


def log(name: str) -> str:
    return gauge("kafka.log", "Log", name)


def raft(attr: str) -> str:
    return attribute("kafka.server", "raft-metrics", attr)


def group_coordinator(attr: str) -> str:
    return attribute("kafka.server", "group-coordinator-metrics", attr)


def socket_server(attr: str) -> str:
    return attribute("kafka.server", "socket-server-metrics", attr)
