"""The decisions of MirrorMaker 2's source connector and task, sans-I/O: which records are
copied and as what, which remote topics and partitions to create, which topic configs and ACLs
follow the source (MirrorSourceConnector, MirrorSourceTask).

A record keeps its partition, key, value, headers and timestamp; only its topic is renamed by
the policy. Under the identity policy it also gains a provenance header, and a record that has
already visited the target is dropped (it would be a copy coming home).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gregor.mirror.filters import ConfigPropertyFilter
from gregor.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class SourceRecord:
    """A record as consumed from the source cluster."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True)
class TargetRecord:
    """The record to produce to the target, with where it came from (for offset syncs)."""

    topic: str
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    upstream_topic: str
    upstream_offset: int


def convert_record(
    record: SourceRecord, policy: DefaultReplicationPolicy, source_alias: str, target_alias: str
) -> TargetRecord | None:
    """The target's copy of a source record, None when it must not be copied (it came from
    the target, as its provenance headers show)."""
    headers = record.headers
    if isinstance(policy, IdentityReplicationPolicy):
        if policy.has_visited(headers, target_alias):
            return None
        provenance = policy.provenance_header(source_alias)
        if provenance is not None:
            headers = (*headers, provenance)
    return TargetRecord(
        policy.format_remote_topic(source_alias, record.topic),
        record.partition,
        record.timestamp,
        record.key,
        record.value,
        headers,
        record.topic,
        record.offset,
    )


@dataclass(frozen=True)
class TopicPlan:
    """What the target lacks: remote topics to create and topics to grow (partition counts)."""

    create: dict[str, int]
    grow: dict[str, int]


def plan_topics(
    source_partitions: Mapping[str, int],
    target_partitions: Mapping[str, int],
    policy: DefaultReplicationPolicy,
    source_alias: str,
) -> TopicPlan:
    """For the source topics being mirrored (name -> partition count) and the target's topics,
    the remote topics to create with the source's partition count, and those to grow to it.
    A target never shrinks: a remote topic with more partitions is left alone."""
    create: dict[str, int] = {}
    grow: dict[str, int] = {}
    for topic, count in source_partitions.items():
        remote = policy.format_remote_topic(source_alias, topic)
        existing = target_partitions.get(remote)
        if existing is None:
            create[remote] = count
        elif count > existing:
            grow[remote] = count
    return TopicPlan(create, grow)


@dataclass(frozen=True)
class ConfigEntry:
    """A topic config as DescribeConfigs reports it on the source."""

    name: str
    value: str | None
    is_default: bool = False
    read_only: bool = False
    sensitive: bool = False
    source: str = "DYNAMIC_TOPIC_CONFIG"  # Kafka's ConfigSource names


def target_configs(
    entries: Iterable[ConfigEntry],
    properties: ConfigPropertyFilter,
    incremental: bool,
    use_source_defaults: bool = False,
) -> list[tuple[str, str | None, str]]:
    """(name, value, "SET" or "DELETE") for the remote topic. A new topic (`incremental`
    false) takes the source's explicitly set configs; a periodic sync (`incremental` true) also
    DELETEs on the target what is a default on the source, so the target's default applies
    (unless `use.defaults.from=source`). Read-only, sensitive, static-broker and excluded
    (`config.properties.exclude`) configs never follow."""
    out: list[tuple[str, str | None, str]] = []
    for entry in entries:
        if not (incremental or not entry.is_default or use_source_defaults):
            continue
        if entry.read_only or entry.sensitive or entry.source == "STATIC_BROKER_CONFIG":
            continue
        if not properties.should_replicate_config_property(entry.name):
            continue
        delete = incremental and entry.is_default and not use_source_defaults
        out.append((entry.name, entry.value, "DELETE" if delete else "SET"))
    return out


@dataclass(frozen=True)
class TopicAcl:
    """A literal ACL on a topic (the only kind that is mirrored)."""

    topic: str
    principal: str
    host: str
    operation: str  # Kafka's AclOperation names: READ, WRITE, ALL, ...
    permission: str  # ALLOW or DENY


def target_acl(
    acl: TopicAcl, policy: DefaultReplicationPolicy, source_alias: str
) -> TopicAcl | None:
    """The ACL for the remote topic, None when it does not follow: nobody but the mirror
    writes a remote topic, so ALLOW WRITE stays behind and ALLOW ALL becomes ALLOW READ."""
    if acl.permission == "ALLOW" and acl.operation == "WRITE":
        return None
    operation = "READ" if acl.permission == "ALLOW" and acl.operation == "ALL" else acl.operation
    remote = policy.format_remote_topic(source_alias, acl.topic)
    return TopicAcl(remote, acl.principal, acl.host, operation, acl.permission)


def assign_round_robin(
    partitions: Sequence[tuple[str, int]], tasks_max: int
) -> list[list[tuple[str, int]]]:
    """Partitions dealt to at most `tasks_max` tasks in turn (MirrorSourceConnector's split);
    no task is empty."""
    assert tasks_max >= 1
    tasks: list[list[tuple[str, int]]] = [[] for _ in range(min(tasks_max, len(partitions)))]
    for i, tp in enumerate(partitions):
        tasks[i % len(tasks)].append(tp)
    return tasks
