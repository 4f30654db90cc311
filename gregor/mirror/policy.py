"""Replication policies: how a topic is named on the target cluster, and how a name tells where
a topic came from (MirrorMaker 2's `ReplicationPolicy`).

`DefaultReplicationPolicy` prefixes the source cluster's alias: `orders` mirrored from `A` is
`A.orders`, and `B.A.orders` is `A.orders` mirrored again from `B`. Reading a name back splits it
at the first separator, so a name alone says its source, its upstream topic and its original
topic, and a flow never copies a topic back to a cluster it came from (`is_cycle`).

`IdentityReplicationPolicy` keeps names unchanged (heartbeats excepted, which keep the prefix so
that replication stays observable). A name then says nothing about where a topic came from, so
loop prevention moves to the records: each hop appends a provenance header carrying the source
alias, and a record that has visited the target cluster is never copied there again. Apache
Kafka's MirrorMaker has no such header (it leaves loops to the operator); it is ours, and can be
turned off with `replication.policy.provenance.header.enabled=false` for one-way flows.

Pure functions of names and headers; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_SEPARATOR = "."
HEARTBEATS_TOPIC = "heartbeats"
PROVENANCE_HEADER = "gregor.mirror.provenance"

DEFAULT_POLICY_CLASS = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY_CLASS = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def _split(topic: str, separator: str) -> list[str]:
    """Split as Java's `String.split` does with a literal pattern: trailing empty parts dropped."""
    parts = topic.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class DefaultReplicationPolicy:
    """Remote topics are `<source alias><separator><topic>`."""

    class_name = DEFAULT_POLICY_CLASS

    def __init__(
        self, separator: str = DEFAULT_SEPARATOR, internal_topic_separator_enabled: bool = True
    ):
        if not separator:
            raise ValueError("the replication policy separator must not be empty")
        self.separator = separator
        # Kafka 3.0 and earlier always used "." in the internal topics' names; this keeps them.
        self.internal_separator = separator if internal_topic_separator_enabled else "."

    # Names of remote topics.

    def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
        return f"{source_cluster_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster this topic was mirrored from, None for a local topic."""
        parts = _split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream, None for a local topic."""
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator) :]

    def original_topic(self, topic: str) -> str:
        """The topic's name where it was first written, however many hops away."""
        seen = {topic}
        while True:
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic or upstream in seen:
                return topic
            seen.add(upstream)
            topic = upstream

    # MirrorMaker's own topics.

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        sep = self.internal_separator
        return f"mm2-offset-syncs{sep}{cluster_alias}{sep}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._checkpoints_suffix()}"

    def _checkpoints_suffix(self) -> str:
        sep = self.internal_separator
        return f"{sep}checkpoints{sep}internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._checkpoints_suffix())

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self.internal_separator}internal")

    def is_internal_topic(self, topic: str) -> bool:
        """MirrorMaker's topics, Kafka's (`__consumer_offsets`, `.`-prefixed) and Connect's."""
        kafka_internal = topic.startswith("__") or topic.startswith(".")
        connect_internal = topic.endswith("-internal") or topic.endswith(".internal")
        return self.is_mm2_internal_topic(topic) or kafka_internal or connect_internal

    # Loops.

    def is_cycle(self, topic: str, target_cluster_alias: str) -> bool:
        """True when the topic came from the target cluster at some hop, so mirroring it there
        would copy records back to where they were written (`B.A.orders` never goes to A)."""
        seen: set[str] = set()
        while True:
            source = self.topic_source(topic)
            if source is None:
                return False
            if source == target_cluster_alias:
                return True
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic or upstream in seen:
                return False
            seen.add(upstream)
            topic = upstream

    def prevents_record_loops(self) -> bool:
        """Whether flows in a loop (A->B->A) can run without copying records back forever."""
        return True


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Remote topics keep their names; `heartbeats` still becomes `A.heartbeats`."""

    class_name = IDENTITY_POLICY_CLASS

    def __init__(
        self,
        separator: str = DEFAULT_SEPARATOR,
        internal_topic_separator_enabled: bool = True,
        source_cluster_alias: str | None = None,
        provenance_header_enabled: bool = True,
    ):
        super().__init__(separator, internal_topic_separator_enabled)
        self.source_cluster_alias = source_cluster_alias
        self.provenance_header_enabled = provenance_header_enabled

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
        if self._looks_like_heartbeat(topic):
            return super().format_remote_topic(source_cluster_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().upstream_topic(topic)
        return topic

    def prevents_record_loops(self) -> bool:
        return self.provenance_header_enabled

    # Provenance headers.

    def provenance_header(self, source_cluster_alias: str) -> tuple[str, bytes] | None:
        """The header a mirrored record gains on this hop, None when headers are off."""
        if not self.provenance_header_enabled:
            return None
        return PROVENANCE_HEADER, source_cluster_alias.encode()

    def has_visited(self, headers: Iterable[tuple[str, bytes | None]], cluster_alias: str) -> bool:
        """True when a record was mirrored out of `cluster_alias` before, at any hop."""
        if not self.provenance_header_enabled:
            return False
        alias = cluster_alias.encode()
        return any(key == PROVENANCE_HEADER and value == alias for key, value in headers)


# What a cluster's topic names say about replication (MirrorClient), given its topic list.


def count_hops(topic: str, upstream_alias: str, policy: DefaultReplicationPolicy) -> int:
    """How many hops `topic` travelled from `upstream_alias` (`B.A.heartbeats` is 2 from A),
    -1 if it did not come from there."""
    seen: set[str] = set()
    hops = 0
    current: str | None = topic
    while current is not None:
        hops += 1
        source = policy.topic_source(current)
        if source is None or source in seen:
            return -1  # a local topic, or a loop a name-keeping policy cannot see through
        if source == upstream_alias:
            return hops
        seen.add(source)
        current = policy.upstream_topic(current)
    return -1


def replication_hops(
    topics: Iterable[str], upstream_alias: str, policy: DefaultReplicationPolicy
) -> int:
    """The fewest hops from `upstream_alias` along which heartbeats arrive, -1 if none do."""
    hops = [count_hops(t, upstream_alias, policy) for t in topics if policy.is_heartbeats_topic(t)]
    return min((h for h in hops if h != -1), default=-1)


def upstream_clusters(topics: Iterable[str], policy: DefaultReplicationPolicy) -> set[str]:
    """Every cluster, however many hops away, whose heartbeats reach this one."""
    out: set[str] = set()
    for topic in topics:
        if not policy.is_heartbeats_topic(topic):
            continue
        sources: set[str] = set()
        current: str | None = topic
        while current is not None and (source := policy.topic_source(current)) is not None:
            if source in sources:
                break
            sources.add(source)
            current = policy.upstream_topic(current)
        out |= sources
    return out


def remote_topics(
    topics: Iterable[str], policy: DefaultReplicationPolicy, source_alias: str | None = None
) -> set[str]:
    """The mirrored topics among `topics` (internal ones aside), or those mirrored directly
    from `source_alias`."""
    return {
        t
        for t in topics
        if not policy.is_internal_topic(t)
        and (source := policy.topic_source(t)) is not None
        and (source_alias is None or source == source_alias)
    }


ReplicationPolicy = DefaultReplicationPolicy

POLICY_CLASSES: dict[str, type[DefaultReplicationPolicy]] = {
    DEFAULT_POLICY_CLASS: DefaultReplicationPolicy,
    IDENTITY_POLICY_CLASS: IdentityReplicationPolicy,
}


def policy_class(name: str) -> type[DefaultReplicationPolicy]:
    """A policy by its Java class name, full (`org.apache...DefaultReplicationPolicy`) or short."""
    name = name.strip()
    for full, cls in POLICY_CLASSES.items():
        if name in (full, full.rsplit(".", 1)[1]):
            return cls
    known = ", ".join(full.rsplit(".", 1)[1] for full in POLICY_CLASSES)
    raise ValueError(f"unknown replication policy {name!r} (known: {known})")
