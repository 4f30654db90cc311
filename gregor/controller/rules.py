"""The rules of admin requests, as pure functions: Kafka's per-request limits, partition and
replication-factor counts checked in Kafka's order, replica placement and manual
assignments, and IncrementalAlterConfigs operations. Shared by the broker's admin front
(admin.py) and the controller (quorum_controller.py), and importing neither."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from gregor.metadata import config_defs
from gregor.metadata.store import TopicInfo
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: a CreateTopics asking for more
# partitions than this in all is refused before any topic is looked at (larger ones ran Kafka's
# controller out of memory; here one of 2**31-1 partitions took gigabytes and never answered).
MAX_PARTITIONS_PER_BATCH = 10_000
# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: the metadata records one admin request may
# write (a TopicRecord, its ConfigRecords and a PartitionRecord per partition, for CreateTopics).
MAX_RECORDS_PER_USER_OP = 10_000


def too_many_partitions() -> KafkaError:
    return KafkaError(
        errors.POLICY_VIOLATION, "Excessively large number of partitions per request."
    )


def too_many_records() -> KafkaError:
    return KafkaError(
        errors.POLICY_VIOLATION, "Unable to perform excessively large batch operation."
    )


class TopicDefaults:
    """What -1 means in a CreateTopics: the brokers' num.partitions and
    default.replication.factor, each read at most once per request, and only if a topic asks for
    it (`read` parses a broker config: what it reads is the same for the whole request)."""

    def __init__(self, read: Callable[[str], Any]) -> None:
        self._read = read
        self._values: dict[str, int] = {}

    def _get(self, key: str) -> int:
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = int(self._read(key))
        return value

    @property
    def partitions(self) -> int:
        return self._get("num.partitions")

    @property
    def replication_factor(self) -> int:
        return self._get("default.replication.factor")


def requested_partitions(specs: Iterable[Any], defaults: TopicDefaults) -> int:
    """The partitions a CreateTopics asks for, counted as Kafka's validateTotalNumberOfPartitions
    counts them: each topic's assignments, else its count (-1: the default); an invalid count
    adds nothing (the topic is refused on its own)."""
    total = 0
    for spec in specs:
        if spec.assignments:
            total += len(spec.assignments)
        elif spec.num_partitions == -1:
            total += defaults.partitions
        elif spec.num_partitions > 0:
            total += spec.num_partitions
    return total


def topic_records(planned: Iterable[TopicInfo | KafkaError]) -> int:
    """The records creating the `planned` topics writes (TopicRecord, ConfigRecords,
    PartitionRecords); a refused one (its error) writes none."""
    total = 0
    for t in planned:
        if isinstance(t, TopicInfo):
            total += 1 + len(t.configs) + len(t.replicas)
    return total


def check_counts(
    num_partitions: int, replication_factor: int, defaults: TopicDefaults
) -> tuple[int, int]:
    """(partitions, replication factor) of a topic created without assignments, -1 meaning the
    default; refused in Kafka's order: the replication factor first."""
    if replication_factor < -1 or replication_factor == 0:
        raise KafkaError(
            errors.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if num_partitions < -1 or num_partitions == 0:
        raise KafkaError(
            errors.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        )
    return (
        defaults.partitions if num_partitions == -1 else num_partitions,
        defaults.replication_factor if replication_factor == -1 else replication_factor,
    )


def check_manual_counts(num_partitions: int, replication_factor: int) -> None:
    """With manual assignments both counts must be left at -1 (Kafka's messages)."""
    if replication_factor != -1:
        raise KafkaError(
            errors.INVALID_REQUEST,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        )
    if num_partitions != -1:
        raise KafkaError(
            errors.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )


def check_partition_increase(
    name: str, current: int, count: int, assignments: Sequence[Any] | None
) -> int:
    """How many partitions a CreatePartitions to `count` adds to a topic of `current`."""
    if count == current:
        raise KafkaError(errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        raise KafkaError(
            errors.INVALID_PARTITIONS,
            f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
        )
    added = count - current
    if assignments and len(assignments) != added:
        raise KafkaError(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
            "assignment(s) were specified.",
        )
    return added


def place_new(
    broker_ids: Sequence[int], partitions: int, factor: int, rng: random.Random
) -> list[list[int]]:
    """Replicas of a new topic's partitions 0..partitions-1, Kafka's rack-unaware placement
    (AdminUtils) from a random start broker and a random follower shift drawn from `rng` (the
    controller's, seeded where it is built): always starting at the lowest id put the leader of
    every one-partition topic on one broker, and so all their hosting work on one node."""
    _check_factor(factor, len(broker_ids))
    start, shift = rng.randrange(len(broker_ids)), rng.randrange(len(broker_ids))
    return assign_replicas(broker_ids, partitions, factor, 0, start, shift)


def place_added(
    broker_ids: Sequence[int], partition0: Sequence[int], first: int, added: int
) -> list[list[int]]:
    """Replicas of partitions first..first+added-1 added to a topic whose partition 0 has
    `partition0`: the topic's leader pattern continued from partition 0's leader (the first
    broker with an id at least its own), the follower shift that start, as Kafka's AdminZkClient
    does (createNewPartitionsAssignment). So a topic grown from 1 to n partitions on n brokers
    has one leader on each. (Kafka's KRaft controller places added partitions afresh from a
    random point, which may put two of them on partition 0's leader and none elsewhere.)"""
    _check_factor(len(partition0), len(broker_ids))
    brokers = sorted(broker_ids)
    start = next((i for i, b in enumerate(brokers) if b >= partition0[0]), 0)
    return assign_replicas(brokers, added, len(partition0), first, start, start)


def assign_replicas(
    broker_ids: Sequence[int], partitions: int, factor: int, first: int, start: int, shift: int
) -> list[list[int]]:
    """Replicas of partitions first..first+partitions-1 over the sorted brokers (n of them):
    partition p is led by brokers[(p + start) % n], and its j-th follower sits 1 + (s + j) %
    (n - 1) places after the leader, s being `shift` plus one for each nonzero multiple of n
    from `first` to p. The distances are distinct and below n, so a partition's replicas are
    distinct; the leaders go round the brokers, and the shift moving every n partitions keeps
    followers from always trailing the same leader (on 3 brokers with RF 2: partitions 0-2
    have followers one place on, 3-5 two places on)."""
    brokers = sorted(broker_ids)
    n = len(brokers)
    _check_factor(factor, n)
    out = []
    for p in range(first, first + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        lead = (p + start) % n
        followers = [brokers[(lead + 1 + (shift + j) % (n - 1)) % n] for j in range(factor - 1)]
        out.append([brokers[lead], *followers])
    return out


def _check_factor(factor: int, brokers: int) -> None:
    if factor > brokers:
        raise KafkaError(
            errors.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {factor} time(s): The target replication "
            f"factor of {factor} cannot be reached because only {brokers} broker(s) "
            "are registered.",
        )


def check_assignments(
    assignments: Mapping[int, list[int]], first: int, broker_ids: Collection[int]
) -> list[list[int]]:
    """Manual assignments checked: consecutive indexes from `first`, one replication factor, no
    duplicate or unregistered brokers. The replicas, by partition index."""
    indexes = sorted(assignments)
    if indexes != list(range(first, first + len(indexes))):
        raise KafkaError(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"Partitions should be a consecutive 0-based integer sequence, given {indexes}",
        )
    sizes = {len(r) for r in assignments.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise KafkaError(
            errors.INVALID_REPLICA_ASSIGNMENT,
            "All partitions should have the same number of replicas",
        )
    out = []
    for i in indexes:
        reps = list(assignments[i])
        if len(set(reps)) != len(reps):
            raise KafkaError(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate brokers not allowed in replica assignment: {reps} for partition id {i}.",
            )
        check_registered(reps, broker_ids)
        out.append(reps)
    return out


def check_registered(replicas: Sequence[int], broker_ids: Collection[int]) -> None:
    for b in replicas:
        if b not in broker_ids:
            raise KafkaError(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {b}, but no such "
                "broker is registered.",
            )


def apply_incremental(
    current: dict[str, str],
    ops: Sequence[tuple[str, int, str | None]],
    list_default: object,
) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations to a config map."""
    seen = set()
    for key, op, value in ops:
        if key in seen:
            raise KafkaError(errors.INVALID_REQUEST, f"Error due to duplicate config keys: {key}")
        seen.add(key)
        if op == SET:
            if value is None:
                raise KafkaError(errors.INVALID_REQUEST, f"Null value not supported for: {key}")
            current[key] = value
        elif op == DELETE:
            current.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            d = config_defs.TOPIC_CONFIGS.get(key) or config_defs.BROKER_CONFIGS.get(key)
            if d is None or d.type != config_defs.LIST:
                raise KafkaError(
                    errors.INVALID_CONFIG,
                    f"Config value append/subtract is not allowed for config key: {key}",
                )
            base = current.get(key)
            items = (
                [p.strip() for p in base.split(",") if p.strip()]
                if base is not None
                else (list_default(key) if callable(list_default) else [])
            )
            given = [p.strip() for p in (value or "").split(",") if p.strip()]
            if op == APPEND:
                items += [g for g in given if g not in items]
            else:
                items = [i for i in items if i not in given]
            current[key] = ",".join(items)
        else:
            raise KafkaError(errors.INVALID_REQUEST, f"Unknown config operation {op} for {key}")
    return current
