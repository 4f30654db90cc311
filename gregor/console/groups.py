"""Consumer groups: the list, one group's members, assignment and lag per partition, and the
reset of an empty group's committed offsets (to the earliest, the latest, or one offset), as
`kafka-consumer-groups.sh --reset-offsets` does it: only while the group has no members."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from gregor.console.cluster import Cluster
from gregor.console.errors import BadInput, Conflict, NotFound, Unavailable, kafka_text

# Groups whose offsets one listing reads (one request each): the page says when there are more.
MAX_GROUPS = 200
RESETTABLE = frozenset({"EMPTY", "DEAD"})


@dataclass
class GroupRow:
    group_id: str
    state: str
    simple: bool
    lag: int | None = None


@dataclass
class OffsetRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str | None = None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(0, self.end - self.committed)


@dataclass
class MemberRow:
    member_id: str
    client_id: str
    host: str
    assignment: list[str]


@dataclass
class GroupDetail:
    group_id: str
    state: str
    coordinator: int | None
    assignor: str
    members: list[MemberRow]
    offsets: list[OffsetRow] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(o.lag or 0 for o in self.offsets)

    @property
    def resettable(self) -> bool:
        return self.state in RESETTABLE


def _state(group: Any) -> str:
    state = getattr(group, "state", None)
    return str(getattr(state, "name", state or "UNKNOWN"))


def list_groups(cluster: Cluster) -> list[GroupRow]:
    try:
        result = cluster.admin.list_consumer_groups(request_timeout=cluster.timeout_s).result()
    except KafkaException as exc:
        raise Unavailable(f"ListGroups failed: {kafka_text(exc)}") from None
    rows = [GroupRow(g.group_id, _state(g), bool(g.is_simple_consumer_group)) for g in result.valid]
    return sorted(rows, key=lambda r: r.group_id)


def committed(cluster: Cluster, group_id: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch of every partition it committed)."""
    request = [ConsumerGroupTopicPartitions(group_id)]
    try:
        future = cluster.admin.list_consumer_group_offsets(
            request, request_timeout=cluster.timeout_s
        )[group_id]
        answer = future.result()
    except KafkaException as exc:
        raise Unavailable(f"OffsetFetch of group {group_id!r} failed: {kafka_text(exc)}") from None
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in answer.topic_partitions or []
        if tp.offset >= 0 and tp.error is None
    }


def describe(cluster: Cluster, group_id: str) -> GroupDetail:
    try:
        d = cluster.admin.describe_consumer_groups([group_id], request_timeout=cluster.timeout_s)[
            group_id
        ].result()
    except KafkaException as exc:
        raise Unavailable(f"DescribeGroups failed: {kafka_text(exc)}") from None
    state = _state(d)
    members, owner = [], {}
    for m in d.members or []:
        tps = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        members.append(MemberRow(m.member_id, m.client_id, m.host, [f"{t}-{p}" for t, p in tps]))
        owner.update({tp: m.client_id or m.member_id for tp in tps})
    offsets = committed(cluster, group_id)
    if state == "DEAD" and not offsets and not members:
        raise NotFound(f"there is no group {group_id!r}")
    keys = sorted(set(offsets) | set(owner))
    ends = cluster.offsets(keys, OffsetSpec.latest()) if keys else {}
    coordinator = d.coordinator.id if getattr(d, "coordinator", None) is not None else None
    detail = GroupDetail(group_id, state, coordinator, d.partition_assignor or "", members)
    detail.offsets = [
        OffsetRow(t, p, offsets.get((t, p)), ends.get((t, p)), owner.get((t, p))) for t, p in keys
    ]
    return detail


def reset_targets(
    cluster: Cluster, detail: GroupDetail, topic: str | None, target: str, offset: int | None
) -> dict[tuple[str, int], int]:
    """The offset each of the group's partitions (those of `topic`, or all) is reset to."""
    keys = [(o.topic, o.partition) for o in detail.offsets if topic in (None, o.topic)]
    if not keys:
        raise BadInput(
            f"group {detail.group_id!r} has no committed offsets"
            + (f" in {topic!r}" if topic else "")
        )
    starts = cluster.offsets(keys, OffsetSpec.earliest())
    ends = cluster.offsets(keys, OffsetSpec.latest())
    if target == "earliest":
        return starts
    if target == "latest":
        return ends
    if target != "offset" or offset is None:
        raise BadInput("reset to earliest, latest, or offset with an offset")
    out = {}
    for k in keys:
        if not starts[k] <= offset <= ends[k]:
            raise BadInput(f"offset {offset} is outside {k[0]}-{k[1]} ({starts[k]}..{ends[k]})")
        out[k] = offset
    return out


def reset(
    cluster: Cluster, group_id: str, topic: str | None, target: str, offset: int | None
) -> dict[tuple[str, int], int]:
    """Commit the reset offsets of an empty group (AlterConsumerGroupOffsets); a group with
    members is a Conflict: its consumers would overwrite the reset at their next commit."""
    detail = describe(cluster, group_id)
    if not detail.resettable:
        raise Conflict(f"group {group_id!r} is {detail.state}: stop its consumers before a reset")
    targets = reset_targets(cluster, detail, topic, target, offset)
    tps = [TopicPartition(t, p, o) for (t, p), o in sorted(targets.items())]
    request = [ConsumerGroupTopicPartitions(group_id, tps)]
    try:
        cluster.admin.alter_consumer_group_offsets(request, request_timeout=cluster.timeout_s)[
            group_id
        ].result()
    except KafkaException as exc:
        raise Conflict(f"the reset was refused: {kafka_text(exc)}") from None
    return targets
