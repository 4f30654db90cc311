"""Which topics, consumer groups and topic configs a flow mirrors (MirrorMaker 2's
`DefaultTopicFilter`, `DefaultGroupFilter`, `DefaultConfigPropertyFilter`).

A filter is an include list and an exclude list of regexes; a name passes when some include
pattern matches the whole name and no exclude pattern does. The patterns of a list are joined
with `|` and matched whole, as MirrorMaker does; an empty list matches nothing (so `topics=`
mirrors no topic). Patterns are Python regexes, which agree with Java's for the syntax used in
practice (`.*`, classes, alternation, escapes).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gregor.mirror.policy import DefaultReplicationPolicy

TOPICS_DEFAULT = (".*",)
TOPICS_EXCLUDE_DEFAULT = (r".*[\-\.]internal", r".*\.replica", r"__.*")
GROUPS_DEFAULT = (".*",)
GROUPS_EXCLUDE_DEFAULT = (r"console-consumer-.*", r"connect-.*", r"__.*")
CONFIG_PROPERTIES_EXCLUDE_DEFAULT = (
    r"follower\.replication\.throttled\.replicas",
    r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms",
    r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable",
    r"min\.insync\.replicas",
)


def compile_pattern_list(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern for a list, None for an empty list (which matches nothing). Raises re.error."""
    if not patterns:
        return None
    return re.compile("|".join(patterns))


def _matches(pattern: re.Pattern[str] | None, name: str) -> bool:
    return pattern is not None and pattern.fullmatch(name) is not None


@dataclass(frozen=True)
class NameFilter:
    """An include list and an exclude list; used for topics and for consumer groups."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include", compile_pattern_list(self.include))
        object.__setattr__(self, "_exclude", compile_pattern_list(self.exclude))

    def includes(self, name: str) -> bool:
        return _matches(self._include, name)  # type: ignore[attr-defined]

    def excludes(self, name: str) -> bool:
        return _matches(self._exclude, name)  # type: ignore[attr-defined]

    def accepts(self, name: str) -> bool:
        return self.includes(name) and not self.excludes(name)


def topic_filter(
    topics: Sequence[str] = TOPICS_DEFAULT, exclude: Sequence[str] = TOPICS_EXCLUDE_DEFAULT
) -> NameFilter:
    return NameFilter(tuple(topics), tuple(exclude))


def group_filter(
    groups: Sequence[str] = GROUPS_DEFAULT, exclude: Sequence[str] = GROUPS_EXCLUDE_DEFAULT
) -> NameFilter:
    return NameFilter(tuple(groups), tuple(exclude))


@dataclass(frozen=True)
class ConfigPropertyFilter:
    """Topic configs that are never copied to the target (`config.properties.exclude`)."""

    exclude: tuple[str, ...] = CONFIG_PROPERTIES_EXCLUDE_DEFAULT

    def __post_init__(self) -> None:
        object.__setattr__(self, "_exclude", compile_pattern_list(self.exclude))

    def should_replicate_config_property(self, name: str) -> bool:
        return not _matches(self._exclude, name)  # type: ignore[attr-defined]


def should_replicate_topic(
    topic: str,
    topics: NameFilter,
    policy: DefaultReplicationPolicy,
    target_cluster_alias: str,
    heartbeats_replication_enabled: bool = True,
) -> bool:
    """Whether a source topic is mirrored to the target, as MirrorSourceConnector decides:
    the filter accepts it (heartbeat topics pass anyway unless `heartbeats.replication.enabled`
    is false), it is not an internal topic, and it did not come from the target (no cycle)."""
    wanted = topics.accepts(topic) or (
        heartbeats_replication_enabled and policy.is_heartbeats_topic(topic)
    )
    return (
        wanted
        and not policy.is_internal_topic(topic)
        and not policy.is_cycle(topic, target_cluster_alias)
    )


def should_checkpoint_group(
    group: str, committed_topics: Sequence[str], groups: NameFilter, topics: NameFilter
) -> bool:
    """Whether a source group gets checkpoints: the group filter accepts it and it has committed
    offsets for at least one topic the topic filter accepts (MirrorCheckpointConnector)."""
    return groups.accepts(group) and any(topics.accepts(topic) for topic in committed_topics)


def why_not_replicated(
    topic: str,
    topics: NameFilter,
    policy: DefaultReplicationPolicy,
    target_cluster_alias: str,
    heartbeats_replication_enabled: bool = True,
) -> str | None:
    """The reason `should_replicate_topic` refuses a topic, None when it is mirrored."""
    if policy.is_internal_topic(topic):
        return "an internal topic"
    if policy.is_cycle(topic, target_cluster_alias):
        return f"it came from {target_cluster_alias} (a cycle)"
    if heartbeats_replication_enabled and policy.is_heartbeats_topic(topic):
        return None
    if not topics.includes(topic):
        return "not matched by topics"
    if topics.excludes(topic):
        return "matched by topics.exclude"
    return None
