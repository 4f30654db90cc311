"""Admin operations on cluster metadata: create and delete topics, add partitions, change
configs. Rules and placement live here; handlers translate; the change is committed to the
metadata log by the controller (local.py), and the broker applies the new metadata to the
partitions it hosts.

Every operation validates completely before changing anything, and `validate_only` stops there.
Errors are KafkaErrors with Kafka's codes and messages. Requests are bounded as Kafka's
controller bounds them (MAX_PARTITIONS_PER_BATCH, MAX_RECORDS_PER_USER_OP), checked before any
per-partition work: a request for 2**31-1 partitions is refused in microseconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.controller import client_quotas, scram_credentials
from gregor.controller.rules import (
    MAX_PARTITIONS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    TopicDefaults,
    apply_incremental,
    check_assignments,
    check_counts,
    check_manual_counts,
    check_partition_increase,
    place_added,
    place_new,
    requested_partitions,
    too_many_partitions,
    too_many_records,
    topic_records,
)
from gregor.metadata import config_defs
from gregor.metadata.config_defs import ConfigError
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.store import TopicInfo, validate_topic_name
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.raft.storage_log import TOPIC as METADATA_TOPIC

if TYPE_CHECKING:
    from gregor.controller.local import LocalController

_NO_ID = uuid.UUID(int=0)  # a planned topic's id: the controller gives it one


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
        """One topic (auto-creation, internal topics): `create_topics` of just it."""
        outcome = self.create_topics([spec], validate_only)[0]
        if isinstance(outcome, KafkaError):
            raise outcome
        return outcome

    def create_topics(
        self, specs: Sequence[TopicSpec], validate_only: bool = False
    ) -> list[TopicInfo | KafkaError]:
        """CreateTopics: for each spec (names distinct) its TopicInfo, or the error refusing it.

        As Kafka's controller: a request asking for more than MAX_PARTITIONS_PER_BATCH
        partitions in all is refused whole before any topic is looked at; then every topic is
        checked (counts and replication factor before anything is placed); a request whose
        valid topics would write more than MAX_RECORDS_PER_USER_OP records is refused whole;
        only then is anything created. So a refused or validate-only request never builds
        per-partition state beyond those bounds."""
        defaults = TopicDefaults(self._default)
        if requested_partitions(specs, defaults) > MAX_PARTITIONS_PER_BATCH:
            return [too_many_partitions() for _ in specs]
        planned = [self._plan_topic(spec, validate_only, defaults) for spec in specs]
        if topic_records(planned) > MAX_RECORDS_PER_USER_OP:
            return [too_many_records() for _ in specs]
        if validate_only:
            return planned
        out: list[TopicInfo | KafkaError] = []
        for plan in planned:
            if isinstance(plan, TopicInfo):
                try:
                    plan = self.controller.create_placed(plan)
                except KafkaError as exc:
                    plan = exc
            out.append(plan)
        return out

    def _plan_topic(
        self, spec: TopicSpec, validate_only: bool, defaults: TopicDefaults
    ) -> TopicInfo | KafkaError:
        """The topic `spec` asks for, placed (its id still zero), or why it cannot be."""
        try:
            validate_topic_name(spec.name)
            if spec.name == METADATA_TOPIC:
                raise KafkaError(
                    errors.INVALID_REQUEST,
                    f"{METADATA_TOPIC} is the metadata log; no topic may take its name.",
                )
            if spec.name in self.store.topics:
                raise KafkaError(
                    errors.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists."
                )
            if self.forward_create is not None and not validate_only and not self.store.is_active():
                self.forward_create(spec)
                raise KafkaError(
                    errors.LEADER_NOT_AVAILABLE,
                    f"topic {spec.name} is being created by the active controller",
                )
            configs = (
                {k: v for k, v in spec.configs.items() if v is not None} if spec.configs else {}
            )
            if configs:
                self._validate_topic(configs)
            if spec.assignments:
                check_manual_counts(spec.num_partitions, spec.replication_factor)
                replicas = self._check_assignments(spec.assignments, 0)
            else:
                partitions, factor = check_counts(
                    spec.num_partitions, spec.replication_factor, defaults
                )
                replicas = place_new(self.broker_ids, partitions, factor, self.controller.rng)
        except KafkaError as exc:
            return exc
        return TopicInfo(spec.name, _NO_ID, replicas, configs)

    def _check_assignments(
        self, assignments: Mapping[int, list[int]], first: int
    ) -> list[list[int]]:
        return check_assignments(assignments, first, self.broker_ids)

    def delete_topic(self, name: str) -> TopicInfo:
        if not self._default_bool("delete.topic.enable"):
            raise KafkaError(
                errors.BY_NAME["TOPIC_DELETION_DISABLED"].code, "Topic deletion is disabled."
            )
        return self.controller.delete_topic(name)

    def _default_bool(self, key: str) -> bool:
        return bool(config_defs.BROKER_CONFIGS[key].parse(self._raw(key)))

    def create_partitions(
        self,
        topics: Sequence[tuple[str, int, list[list[int]] | None]],
        validate_only: bool = False,
    ) -> list[KafkaError | None]:
        """CreatePartitions: for each (name, count, assignments) None once its partitions are
        added (validate-only: once checked), or the error refusing it.

        Topics are taken in request order, as Kafka's controller takes them, and the request
        may write at most MAX_RECORDS_PER_USER_OP records (one per new partition): a topic that
        would take it past that is refused with POLICY_VIOLATION before anything is placed.
        (Kafka places that topic's partitions first, and fails it with UNKNOWN_SERVER_ERROR once
        its bounded record list overflows: POLICY_VIOLATION, what Kafka's controller answers an
        over-large CreateTopics, says what happened, and nothing is built first.)"""
        budget = MAX_RECORDS_PER_USER_OP
        out: list[KafkaError | None] = []
        for name, count, assignments in topics:
            try:
                new = self._plan_partitions(name, count, assignments, budget)
                budget -= len(new)
                if not validate_only:
                    self.controller.add_partitions(name, new)
            except KafkaError as exc:
                out.append(exc)
                continue
            out.append(None)
        return out

    def _plan_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, budget: int
    ) -> list[list[int]]:
        """The replicas of the partitions `name` gains going to `count` partitions."""
        info = self.store.topics.get(name)
        if info is None:
            raise KafkaError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        current = info.partitions
        added = check_partition_increase(name, current, count, assignments)
        if added > budget:
            raise too_many_records()
        if not assignments:
            return place_added(self.broker_ids, info.replicas[0], current, added)
        new = self._check_assignments({current + i: a for i, a in enumerate(assignments)}, current)
        if len(new[0]) != len(info.replicas[0]):
            raise KafkaError(
                errors.INVALID_REPLICA_ASSIGNMENT,
                "Inconsistent replication factor between partitions, partition 0 has "
                f"{len(info.replicas[0])} while partitions [{current}] have replication "
                f"factors [{len(new[0])}], respectively.",
            )
        return new

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
            new = apply_incremental(
                self.store.broker_configs_of(resource), incremental_ops, lambda k: []
            )
        else:
            new = {k: v for k, v in configs.items() if v is not None}
        for key, value in new.items():
            d = config_defs.BROKER_CONFIGS.get(key) or config_defs.listener_config(key)
            if d is None and config_defs.is_dynamic_listener_ssl(key):
                continue  # a file or PEM text: the broker loads it, and keeps the old on failure
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
            self.controller.set_broker_configs(
                resource, {k: v for k, v in new.items() if v is not None}
            )

    # -- SCRAM credentials ----------------------------------------------------------------------

    def alter_user_scram_credentials(
        self,
        deletions: Sequence[scram_credentials.Deletion],
        upsertions: Sequence[scram_credentials.Upsertion],
    ) -> list[scram_credentials.Result]:
        """AlterUserScramCredentials: (user, error code, message) for each user named."""
        return self.controller.alter_user_scram_credentials(deletions, upsertions)

    # -- client quotas ------------------------------------------------------------------------

    def alter_client_quotas(
        self, alterations: Sequence[client_quotas.Alteration], validate_only: bool
    ) -> list[client_quotas.Result]:
        """AlterClientQuotas: (entity, error code, message) for each entity named."""
        return self.controller.alter_client_quotas(alterations, validate_only)
