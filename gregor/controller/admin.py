"""Admin operations on cluster metadata: create and delete topics, add partitions, change
configs. Rules and placement live here; handlers translate; the change is committed to the
metadata log by the controller (local.py), and the broker applies the new metadata to the
partitions it hosts.

Every operation validates completely before changing anything, and `validate_only` stops there.
Errors are KafkaErrors with Kafka's codes and messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.metadata import config_defs
from gregor.metadata.config_defs import ConfigError
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.store import TopicInfo, validate_topic_name
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.raft.storage_log import TOPIC as METADATA_TOPIC

if TYPE_CHECKING:
    from gregor.controller.local import LocalController

# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass
class TopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] | None = None
    configs: dict[str, str | None] | None = None


class Admin:
    def __init__(
        self,
        store: RaftMetadataStore,
        controller: LocalController,
        broker_ids: Sequence[int] | Callable[[], Sequence[int]],
        static_config: Mapping[str, str],
        node_id: int,
    ) -> None:
        self.store = store  # reads
        self.controller = controller  # writes
        # the brokers partitions may be placed on; a callable when they change (a quorum)
        self._broker_ids = broker_ids if callable(broker_ids) else list(broker_ids)
        self.static_config = static_config
        self.node_id = node_id
        # Set in a quorum: hands a creation to the active controller when this node is not it.
        self.forward_create: Callable[[TopicSpec], None] | None = None

    @property
    def broker_ids(self) -> list[int]:
        ids = self._broker_ids
        return list(ids() if callable(ids) else ids)

    @broker_ids.setter
    def broker_ids(self, ids: Sequence[int]) -> None:
        self._broker_ids = list(ids)

    def _raw(self, key: str) -> str | None:
        d = config_defs.BROKER_CONFIGS[key]
        return self.store.dynamic(self.node_id).get(key, self.static_config.get(key, d.default))

    def _default(self, key: str) -> int:
        return int(config_defs.BROKER_CONFIGS[key].parse(self._raw(key)))

    # -- topics -------------------------------------------------------------------------------

    def create_topic(self, spec: TopicSpec, validate_only: bool = False) -> TopicInfo:
        validate_topic_name(spec.name)
        if spec.name == METADATA_TOPIC:
            raise KafkaError(
                errors.INVALID_REQUEST, f"{METADATA_TOPIC} is the metadata log; no topic may take its name."
            )
        if spec.name in self.store.topics:
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
        if self.forward_create is not None and not validate_only and not self.store.is_active():
            self.forward_create(spec)
            raise KafkaError(
                errors.LEADER_NOT_AVAILABLE,
                f"topic {spec.name} is being created by the active controller",
            )
        configs = {k: v for k, v in (spec.configs or {}).items() if v is not None}
        try:
            config_defs.validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(errors.INVALID_CONFIG, str(exc)) from None
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                raise KafkaError(
                    errors.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            replicas = self._check_assignments(spec.assignments, 0)
        else:
            partitions = spec.num_partitions if spec.num_partitions != -1 else self._default("num.partitions")
            factor = (
                spec.replication_factor
                if spec.replication_factor != -1
                else self._default("default.replication.factor")
            )
            if partitions <= 0:
                raise KafkaError(
                    errors.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if factor <= 0:
                raise KafkaError(
                    errors.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            replicas = self._place(partitions, factor, 0)
        if validate_only:
            return TopicInfo(spec.name, _zero_uuid(), replicas, configs)
        return self.controller.create_topic(spec.name, replicas, configs)

    def _place(self, partitions: int, factor: int, first: int) -> list[list[int]]:
        return place_round_robin(self.broker_ids, partitions, factor, first)

    def _check_assignments(self, assignments: Mapping[int, list[int]], first: int) -> list[list[int]]:
        return check_assignments(assignments, first, self.broker_ids)

    def delete_topic(self, name: str) -> TopicInfo:
        if not self._default_bool("delete.topic.enable"):
            raise KafkaError(errors.BY_NAME["TOPIC_DELETION_DISABLED"].code, "Topic deletion is disabled.")
        return self.controller.delete_topic(name)

    def _default_bool(self, key: str) -> bool:
        return bool(config_defs.BROKER_CONFIGS[key].parse(self._raw(key)))

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        validate_only: bool = False,
    ) -> TopicInfo:
        info = self.store.topics.get(name)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        current = info.partitions
        if count < current:
            raise KafkaError(
                errors.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested {count}.",
            )
        if count == current:
            raise KafkaError(
                errors.INVALID_PARTITIONS, f"Topic already has {current} partitions."
            )
        added = count - current
        if assignments:
            if len(assignments) != added:
                raise KafkaError(
                    errors.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {added} but {len(assignments)} "
                    "assignments provided.",
                )
            new = self._check_assignments({current + i: a for i, a in enumerate(assignments)}, current)
            if len(new[0]) != len(info.replicas[0]):
                raise KafkaError(
                    errors.INVALID_REPLICA_ASSIGNMENT,
                    "Inconsistent replication factor between partitions, partition 0 has "
                    f"{len(info.replicas[0])} while partitions [{current}] have replication "
                    f"factors [{len(new[0])}], respectively.",
                )
        else:
            new = self._place(added, len(info.replicas[0]), current)
        if validate_only:
            return info
        return self.controller.add_partitions(name, new)

    # -- configs ------------------------------------------------------------------------------

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> None:
        """AlterConfigs: the topic's dynamic configs become exactly `configs`."""
        if name not in self.store.topics:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        new = {k: v for k, v in configs.items() if v is not None}
        self._validate_topic(new)
        if not validate_only:
            self.controller.set_topic_configs(name, new)

    def incremental_alter_topic_configs(
        self,
        name: str,
        ops: Sequence[tuple[str, int, str | None]],
        validate_only: bool = False,
    ) -> None:
        info = self.store.topics.get(name)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        new = apply_incremental(dict(info.configs), ops, self._effective_topic_list)
        self._validate_topic(new)
        if not validate_only:
            self.controller.set_topic_configs(name, new)

    def _effective_topic_list(self, key: str) -> list[str]:
        d = config_defs.TOPIC_CONFIGS.get(key)
        if d is None or d.type != config_defs.LIST or d.default is None:
            return []
        return [p for p in d.default.split(",") if p]

    def _validate_topic(self, configs: Mapping[str, str | None]) -> None:
        try:
            config_defs.validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(errors.INVALID_CONFIG, str(exc)) from None

    def alter_broker_configs(
        self,
        resource: str,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        incremental_ops: Sequence[tuple[str, int, str | None]] | None = None,
    ) -> None:
        """Dynamic configs of BROKER `resource`: "" for the cluster default, else a node id."""
        if incremental_ops is not None:
            new = apply_incremental(self.store.broker_configs_of(resource), incremental_ops, lambda k: [])
        else:
            new = {k: v for k, v in configs.items() if v is not None}
        for key, value in new.items():
            d = config_defs.BROKER_CONFIGS.get(key)
            if d is None:
                raise KafkaError(errors.INVALID_CONFIG, f"Unknown broker config name: {key}")
            if d.read_only:
                raise KafkaError(
                    errors.INVALID_CONFIG,
                    f"Cannot update these configs dynamically: [{key}]",
                )
            try:
                d.parse(value)
            except ConfigError as exc:
                raise KafkaError(errors.INVALID_CONFIG, str(exc)) from None
        if not validate_only:
            self.controller.set_broker_configs(resource, {k: v for k, v in new.items() if v is not None})


def place_round_robin(broker_ids: Sequence[int], partitions: int, factor: int, first: int) -> list[list[int]]:
    """Replicas of partitions first..first+partitions-1: round-robin over the sorted brokers,
    partition p on brokers[p], brokers[p+1], ... (its leader first)."""
    brokers = sorted(broker_ids)
    if factor > len(brokers):
        raise KafkaError(
            errors.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {factor} time(s): The target replication "
            f"factor of {factor} cannot be reached because only {len(brokers)} broker(s) "
            "are registered.",
        )
    n = len(brokers)
    return [[brokers[(p + r) % n] for r in range(factor)] for p in range(first, first + partitions)]


def check_assignments(
    assignments: Mapping[int, list[int]], first: int, broker_ids: Sequence[int]
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
        unknown = [b for b in reps if b not in broker_ids]
        if unknown:
            raise KafkaError(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {unknown[0]}, but no such "
                "broker is registered.",
            )
        out.append(reps)
    return out


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
            items = [p.strip() for p in base.split(",") if p.strip()] if base is not None else (
                list_default(key) if callable(list_default) else []
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


def _zero_uuid() -> uuid.UUID:
    return uuid.UUID(int=0)
