"""The KRaft controller as a sans-I/O state machine: (image, request, now_ms) -> (records, response).

An operation reads `self.image` and returns a `ControllerResult`: the metadata records to
append and the response to send once they are committed. It never changes the image itself:
the driver appends the records (RaftNode.append) and calls `replay` for them, and only then is
the change visible (DESIGN principle 3). As Kafka's active controller does, the driver may
replay its own records as soon as it appends them, so the next operation sees them, and rebuild
from the committed image when it loses leadership. Broker liveness (the last heartbeat of each
broker) is the one thing not in the log: it is in memory, as in Kafka's BrokerHeartbeatManager,
and a new controller starts every broker's session at its first `tick`.

    register_broker(BrokerRegistration, now_ms, next_offset) -> broker epoch = next_offset, the
        offset its RegisterBrokerRecord will have; the broker starts fenced. A new incarnation
        replaces the old one (refused with DUPLICATE_BROKER_REGISTRATION while the old one's
        session is alive); partitions the old one led are re-elected first.
    heartbeat(BrokerHeartbeat, now_ms) -> unfence when the broker has caught up to its
        registration record; want_fence fences; want_shut_down enters controlled shutdown:
        leadership and ISR membership move away, and should_shut_down once it leads nothing.
    tick(now_ms) -> fence every unfenced broker silent for broker.session.timeout.ms.
    balance_leaders(now_ms) -> every leader.imbalance.check.interval.seconds, move leadership
        back to preferred replicas where a broker's share of lost leaderships is above
        leader.imbalance.per.broker.percentage (leader_balance.py; auto.leader.rebalance.enable).
    create_topics / delete_topics / create_partitions / alter_configs /
    incremental_alter_configs / allocate_producer_ids / alter_partition / elect_leaders.

Fencing and unfencing are written as BrokerRegistrationChangeRecord (fenced 1 / -1), what Kafka
4.x writes; the image also replays Fence/UnfenceBrokerRecord from older logs. Placement is
round-robin over the active brokers (rack-unaware) from a random start drawn from the injected
`rng` (rules.place_new; added partitions continue the topic's pattern), the leader is the first
replica and the ISR the active replicas. Leader election rules are in partition_change.py.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gregor.controller.leader_balance import preferred_elections
from gregor.controller.partition_change import change_record
from gregor.controller.rules import (
    MAX_PARTITIONS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    TopicDefaults,
    apply_incremental,
    check_assignments,
    check_counts,
    check_manual_counts,
    check_partition_increase,
    check_registered,
    place_added,
    place_new,
    requested_partitions,
    too_many_partitions,
    too_many_records,
)
from gregor.metadata import config_defs
from gregor.metadata import records as r
from gregor.metadata.config_defs import ConfigError
from gregor.metadata.image import (
    BROKER_RESOURCE,
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    EMPTY_IMAGE,
    METADATA_VERSION,
    NO_LEADER,
    TOPIC_RESOURCE,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from gregor.metadata.store import validate_topic_name
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.uuids import random_uuid
from gregor.raft.storage_log import TOPIC as METADATA_TOPIC

T = TypeVar("T")

# metadata.version 4.0-IV3, what `kafka-storage format` of Kafka 4.0 writes by default.
DEFAULT_METADATA_VERSION = 25
PRODUCER_ID_BLOCK_SIZE = 1000
NONE = errors.NONE


def _code(name: str) -> int:
    return errors.BY_NAME[name].code


MAX_COLLISION_VARIANTS_BITS = 10  # names with more '.' and '_' are compared with every topic


def colliding_topic(name: str, existing: Mapping[str, Any]) -> str | None:
    """An existing topic whose name differs from `name` only in '.' against '_' (Kafka refuses
    both: their metric names collide), or None. Only such names can collide, so the 2**k
    spellings of a name with k of those characters are looked up: the cost grows with the
    name, not with the number of topics (a name with none of them collides with nothing)."""
    if "." not in name and "_" not in name:
        return None
    positions = [i for i, c in enumerate(name) if c in "._"]
    if len(positions) > MAX_COLLISION_VARIANTS_BITS:
        key = name.replace(".", "_")
        return next((o for o in existing if o != name and o.replace(".", "_") == key), None)
    chars = list(name)
    for spelling in itertools.product("._", repeat=len(positions)):
        for i, c in zip(positions, spelling, strict=True):
            chars[i] = c
        candidate = "".join(chars)
        if candidate != name and candidate in existing:
            return candidate
    return None


def bootstrap_records(metadata_version: int = DEFAULT_METADATA_VERSION) -> list[Any]:
    """The records a new cluster's log starts with (`kafka-storage format`'s bootstrap)."""
    return [r.FeatureLevelRecord(name=METADATA_VERSION, feature_level=metadata_version)]


@dataclass
class ControllerResult(Generic[T]):
    records: list[Any]
    response: T


@dataclass(frozen=True)
class ControllerConfig:
    broker_session_timeout_ms: int = 9000
    static: Mapping[str, str] = field(default_factory=dict)  # server.properties


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    listeners: Sequence[Listener] = ()
    rack: str | None = None
    log_dirs: Sequence[uuid.UUID] = ()


@dataclass(frozen=True)
class RegistrationResponse:
    error_code: int
    broker_epoch: int = -1


@dataclass(frozen=True)
class BrokerHeartbeat:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False
    offline_log_dirs: Sequence[uuid.UUID] = ()  # KIP-858: its failed log dirs


@dataclass(frozen=True)
class HeartbeatResponse:
    error_code: int
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass
class TopicRequest:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] | None = None
    configs: dict[str, str | None] | None = None
    topic_id: uuid.UUID | None = None  # keep this id (a migrated topic); None: a new random one


@dataclass(frozen=True)
class TopicResult:
    name: str
    error_code: int = NONE
    error_message: str | None = None
    topic_id: uuid.UUID = uuid.UUID(int=0)
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True)
class IsrChange:
    """One partition of an AlterPartition request: the leader's view and the ISR it wants."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: Sequence[int]
    broker_epochs: Mapping[int, int] = field(default_factory=dict)  # KIP-903; -1 unknown
    leader_recovery_state: int = 0


@dataclass(frozen=True)
class IsrChangeResult:
    error_code: int
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


PREFERRED, UNCLEAN = 0, 1


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig | None = None,
        image: MetadataImage = EMPTY_IMAGE,
        new_uuid: Callable[[], uuid.UUID] = random_uuid,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or ControllerConfig()
        self.image = image
        # injected, the only randomness: topic ids, and where a new topic's placement starts
        self.new_uuid = new_uuid
        self.rng = rng if rng is not None else random.Random()
        self.last_contact_ms: dict[int, int] = {}
        self.next_balance_check_ms: int | None = None  # in memory, as broker sessions
        # Brokers whose every log dir failed (their heartbeats say so): never elected leader,
        # as a fenced broker. In memory, as broker sessions: each heartbeat says it again.
        self.dirs_offline: set[int] = set()

    def replay(self, records: Sequence[tuple[Any, int, int]]) -> None:
        """Apply (record, offset, epoch) triples: the only way the controller's state changes."""
        self.image = self.image.replay(records)

    # -- helpers ---------------------------------------------------------------------------

    def _active(self, broker_id: int) -> bool:
        reg = self.image.brokers.get(broker_id)
        return (
            reg is not None
            and not reg.fenced
            and not reg.in_controlled_shutdown
            and broker_id not in self.dirs_offline
        )

    def _raw(self, key: str) -> str | None:
        dynamic = self.image.config(BROKER_RESOURCE, "")
        return dynamic.get(
            key, self.config.static.get(key, config_defs.BROKER_CONFIGS[key].default)
        )

    def _broker_default(self, key: str) -> Any:
        return config_defs.BROKER_CONFIGS[key].parse(self._raw(key))

    def _unclean(self, topic: TopicImage) -> bool:
        value = self.image.config(TOPIC_RESOURCE, topic.name).get("unclean.leader.election.enable")
        if value is None:
            return bool(self._broker_default("unclean.leader.election.enable"))
        return value.strip().lower() == "true"

    def _moves_off(
        self, broker_id: int, shutting_down: bool, offline_dirs: frozenset[uuid.UUID] | None = None
    ) -> list[Any]:
        """Partition changes taking `broker_id` out of every ISR (and so leadership); with
        `offline_dirs`, only of the partitions whose replica there is in one of them."""
        out = []

        def active(b: int) -> bool:
            return b != broker_id and self._active(b)

        for topic in self.image.topics_by_id.values():
            unclean = self._unclean(topic)
            for index, part in sorted(topic.partitions.items()):
                if broker_id not in part.isr and part.leader != broker_id:
                    continue
                if offline_dirs is not None and not self._in_dirs(broker_id, part, offline_dirs):
                    continue
                isr = [b for b in part.isr if b != broker_id]
                rec = change_record(
                    topic.topic_id, index, part, isr, active, unclean and not shutting_down
                )
                if rec is not None:
                    out.append(rec)
        return out

    def _in_dirs(self, broker_id: int, part: Any, dirs: frozenset[uuid.UUID]) -> bool:
        """Whether the replica of `part` on `broker_id` lives in one of `dirs`. A replica with
        no directory assigned (gregor assigns none) is in one of them when they are all the
        broker's dirs."""
        try:
            where = part.directories[part.replicas.index(broker_id)]
        except (ValueError, IndexError):
            where = DIRECTORY_UNASSIGNED
        if where in dirs:
            return True
        if where in (DIRECTORY_UNASSIGNED, DIRECTORY_MIGRATING):
            reg = self.image.brokers.get(broker_id)
            return reg is None or set(reg.log_dirs) <= dirs
        return False

    def _elect_leaderless(self, broker_id: int) -> list[Any]:
        """Partitions without a leader whose ISR has `broker_id`, led by it once it is back."""
        out = []
        for topic in self.image.topics_by_id.values():
            for index, part in sorted(topic.partitions.items()):
                if part.leader == NO_LEADER and broker_id in part.isr:
                    out.append(
                        r.PartitionChangeRecord(
                            partition_id=index, topic_id=topic.topic_id, leader=broker_id
                        )
                    )
        return out

    def _leads_any(self, broker_id: int) -> bool:
        return any(
            p.leader == broker_id
            for t in self.image.topics_by_id.values()
            for p in t.partitions.values()
        )

    # -- brokers ---------------------------------------------------------------------------

    def register_broker(
        self, req: BrokerRegistration, now_ms: int, next_offset: int
    ) -> ControllerResult[RegistrationResponse]:
        existing = self.image.brokers.get(req.broker_id)
        records: list[Any] = []
        if existing is not None and existing.incarnation_id != req.incarnation_id:
            last = self.last_contact_ms.get(req.broker_id)
            alive = last is not None and now_ms - last < self.config.broker_session_timeout_ms
            if alive and not existing.fenced:
                return ControllerResult(
                    [], RegistrationResponse(_code("DUPLICATE_BROKER_REGISTRATION"))
                )
        if existing is not None:
            records += self._moves_off(req.broker_id, shutting_down=False)
        mv = self.image.features.get(METADATA_VERSION, DEFAULT_METADATA_VERSION)
        records.append(
            r.RegisterBrokerRecord(
                broker_id=req.broker_id,
                incarnation_id=req.incarnation_id,
                broker_epoch=next_offset + len(records),
                end_points=[
                    r.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in req.listeners
                ],
                features=[
                    r.BrokerFeature(
                        name=METADATA_VERSION, min_supported_version=mv, max_supported_version=mv
                    )
                ],
                rack=req.rack,
                fenced=True,
                log_dirs=list(req.log_dirs),
            )
        )
        self.last_contact_ms[req.broker_id] = now_ms
        return ControllerResult(records, RegistrationResponse(NONE, records[-1].broker_epoch))

    def heartbeat(self, req: BrokerHeartbeat, now_ms: int) -> ControllerResult[HeartbeatResponse]:
        reg = self.image.brokers.get(req.broker_id)
        if reg is None:
            return ControllerResult([], HeartbeatResponse(_code("BROKER_ID_NOT_REGISTERED")))
        if reg.epoch != req.broker_epoch:
            return ControllerResult([], HeartbeatResponse(_code("STALE_BROKER_EPOCH")))
        self.last_contact_ms[req.broker_id] = now_ms
        caught_up = req.current_metadata_offset >= reg.epoch
        records: list[Any] = []
        fenced = reg.fenced
        change = r.BrokerRegistrationChangeRecord
        if req.want_shut_down and not reg.in_controlled_shutdown:
            records += self._moves_off(req.broker_id, shutting_down=True)
            records.append(
                change(broker_id=req.broker_id, broker_epoch=reg.epoch, in_controlled_shutdown=1)
            )
        elif req.want_fence or req.want_shut_down:
            if not fenced:
                records += self._moves_off(req.broker_id, shutting_down=False)
                records.append(change(broker_id=req.broker_id, broker_epoch=reg.epoch, fenced=1))
                fenced = True
        elif req.offline_log_dirs:
            records += self._offline_dirs(req.broker_id, reg, frozenset(req.offline_log_dirs))
        elif fenced and caught_up:
            records.append(change(broker_id=req.broker_id, broker_epoch=reg.epoch, fenced=-1))
            records += self._elect_leaderless(req.broker_id)
            fenced = False
        if not req.offline_log_dirs and req.broker_id in self.dirs_offline:
            self.dirs_offline.discard(req.broker_id)
        shutting_down = req.want_shut_down or reg.in_controlled_shutdown
        should_shut_down = shutting_down and (
            fenced or not self._leads_any(req.broker_id) and reg.in_controlled_shutdown
        )
        return ControllerResult(
            records, HeartbeatResponse(NONE, caught_up, fenced, should_shut_down)
        )

    def _offline_dirs(self, broker_id: int, reg: Any, dirs: frozenset[uuid.UUID]) -> list[Any]:
        """A heartbeat naming failed log dirs (KIP-858): the broker leaves the ISR and the
        leadership of every partition it holds there (nothing once it has); a broker with
        every dir failed is not elected again until a heartbeat says otherwise."""
        if not reg.log_dirs or set(reg.log_dirs) <= dirs:
            self.dirs_offline.add(broker_id)
        else:
            self.dirs_offline.discard(broker_id)
        return self._moves_off(broker_id, shutting_down=False, offline_dirs=dirs)

    def tick(self, now_ms: int) -> ControllerResult[list[int]]:
        """Fence the brokers whose session expired; the response lists them."""
        expired = []
        for broker_id, reg in sorted(self.image.brokers.items()):
            last = self.last_contact_ms.setdefault(broker_id, now_ms)
            if not reg.fenced and now_ms - last >= self.config.broker_session_timeout_ms:
                expired.append(broker_id)
        return self._fence_one_by_one(expired)

    def _fence_one_by_one(self, broker_ids: list[int]) -> ControllerResult[list[int]]:
        image, records = self.image, []  # each fencing planned on the image after the last
        try:
            offset = image.offset
            for broker_id in broker_ids:
                reg = self.image.brokers[broker_id]
                step = self._moves_off(broker_id, shutting_down=False)
                step.append(
                    r.BrokerRegistrationChangeRecord(
                        broker_id=broker_id, broker_epoch=reg.epoch, fenced=1
                    )
                )
                records += step
                self.image = self.image.replay(
                    (rec, offset + i + 1, image.epoch) for i, rec in enumerate(step)
                )
                offset += len(step)
        finally:
            self.image = image
        return ControllerResult(records, broker_ids)

    # -- topics ----------------------------------------------------------------------------

    def create_topics(
        self, topics: Sequence[TopicRequest], validate_only: bool = False, bounded: bool = True
    ) -> ControllerResult[list[TopicResult]]:
        """As Kafka's ReplicationControlManager.createTopics: more than MAX_PARTITIONS_PER_BATCH
        partitions asked for in all, or more than MAX_RECORDS_PER_USER_OP records to write,
        refuses every topic with POLICY_VIOLATION. `bounded` False: not a client's request
        (a migrated topic), no such limits."""
        defaults = TopicDefaults(self._broker_default)
        if bounded and requested_partitions(topics, defaults) > MAX_PARTITIONS_PER_BATCH:
            return self._refuse_topics(topics, too_many_partitions())
        records: list[Any] = []
        results = []
        times: dict[str, int] = {}  # each name's count in the request (a dict: not O(topics**2))
        for t in topics:
            times[t.name] = times.get(t.name, 0) + 1
        for t in topics:
            if times[t.name] > 1:
                results.append(TopicResult(t.name, errors.INVALID_REQUEST, "Duplicate topic name."))
                continue
            try:
                topic_records, result = self._create_topic(t, defaults)
            except KafkaError as exc:
                results.append(TopicResult(t.name, exc.code, exc.message))
                continue
            results.append(result)
            records += topic_records
            if bounded and len(records) > MAX_RECORDS_PER_USER_OP:
                return self._refuse_topics(topics, too_many_records())
        return ControllerResult([] if validate_only else records, results)

    @staticmethod
    def _refuse_topics(
        topics: Sequence[TopicRequest], error: KafkaError
    ) -> ControllerResult[list[TopicResult]]:
        return ControllerResult(
            [], [TopicResult(t.name, error.code, error.message) for t in topics]
        )

    def _create_topic(
        self, t: TopicRequest, defaults: TopicDefaults
    ) -> tuple[list[Any], TopicResult]:
        validate_topic_name(t.name)
        if t.name == METADATA_TOPIC:
            raise KafkaError(
                errors.INVALID_REQUEST,
                f"{METADATA_TOPIC} is the metadata log; no topic may take its name.",
            )
        self._check_name_free(t.name)
        configs = {k: v for k, v in (t.configs or {}).items() if v is not None}
        try:
            config_defs.validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(errors.INVALID_CONFIG, str(exc)) from None
        if t.assignments:
            check_manual_counts(t.num_partitions, t.replication_factor)
            replicas = check_assignments(t.assignments, 0, self.image.brokers)
        else:
            partitions, factor = check_counts(t.num_partitions, t.replication_factor, defaults)
            replicas = place_new(self.image.unfenced_brokers(), partitions, factor, self.rng)
        records, topic_id = self._topic_records(t.name, t.topic_id, replicas, configs)
        return records, TopicResult(t.name, NONE, None, topic_id, len(replicas), len(replicas[0]))

    def create_placed_topic(
        self, name: str, replicas: list[list[int]], configs: Mapping[str, str]
    ) -> ControllerResult[uuid.UUID]:
        """One topic that the admin front (admin.py) has checked and placed, by the rules of
        `create_topics`, on the committed image: only what may have changed on this image since
        is checked again (the name now taken, or colliding, by a topic created meanwhile; the
        replicas' brokers unregistered or fenced), so the request is validated and placed
        once on the active controller's path. The response is the new topic's id; a refusal
        raises its KafkaError, with the code and message `create_topics` gives."""
        self._check_name_free(name)
        return ControllerResult(*self._topic_records(name, None, replicas, configs))

    def _check_name_free(self, name: str) -> None:
        """TOPIC_ALREADY_EXISTS, or INVALID_TOPIC_EXCEPTION for a name colliding with a topic's
        (only '.' and '_' differ)."""
        if name in self.image.topics_by_name:
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        other = colliding_topic(name, self.image.topics_by_name)
        if other is not None:
            raise KafkaError(
                errors.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {other}",
            )

    def _topic_records(
        self,
        name: str,
        topic_id: uuid.UUID | None,
        replicas: list[list[int]],
        configs: Mapping[str, str],
    ) -> tuple[list[Any], uuid.UUID]:
        """The records creating topic `name` as placed (a new random id when `topic_id` is
        None): TopicRecord, ConfigRecords by key, PartitionRecords."""
        if topic_id is None:
            topic_id = self.new_uuid()
        if topic_id in self.image.topics_by_id or topic_id.int == 0:
            raise KafkaError(errors.INVALID_REQUEST, f"Topic id {topic_id} is taken.")
        records: list[Any] = [r.TopicRecord(name=name, topic_id=topic_id)]
        if configs:
            records += [
                r.ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v)
                for k, v in sorted(configs.items())
            ]
        records += self._partition_records(topic_id, 0, replicas)
        return records, topic_id

    def _partition_records(
        self, topic_id: uuid.UUID, first: int, replicas: list[list[int]]
    ) -> list[Any]:
        out = []
        for i, reps in enumerate(replicas, first):
            isr = [b for b in reps if self._active(b)]
            if len(isr) < len(reps):  # placed on another image (create_placed_topic)
                check_registered(reps, self.image.brokers)
            if not isr:
                raise KafkaError(
                    errors.INVALID_REPLICA_ASSIGNMENT,
                    f"All brokers specified in the manual partition assignment for partition {i} "
                    "are fenced or in controlled shutdown.",
                )
            out.append(
                r.PartitionRecord(
                    partition_id=i,
                    topic_id=topic_id,
                    replicas=reps,
                    isr=isr,
                    leader=isr[0],
                    leader_epoch=0,
                    partition_epoch=0,
                    directories=[DIRECTORY_UNASSIGNED] * len(reps),
                )
            )
        return out

    def delete_topics(self, names: Sequence[str]) -> ControllerResult[dict[str, int]]:
        if not self._broker_default("delete.topic.enable"):
            return ControllerResult([], {n: _code("TOPIC_DELETION_DISABLED") for n in names})
        records, result = [], {}
        for name in names:
            topic = self.image.topic(name)
            if topic is None:
                result[name] = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            records.append(r.RemoveTopicRecord(topic_id=topic.topic_id))
            result[name] = NONE
        return ControllerResult(records, result)

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        validate_only: bool = False,
    ) -> ControllerResult[TopicResult]:
        try:
            records = self._create_partitions(name, count, assignments)
        except KafkaError as exc:
            return ControllerResult([], TopicResult(name, exc.code, exc.message))
        return ControllerResult([] if validate_only else records, TopicResult(name))

    def _create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None
    ) -> list[Any]:
        topic = self.image.topic(name)
        if topic is None:
            raise KafkaError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        current = len(topic.partitions)
        added = check_partition_increase(name, current, count, assignments)
        if added > MAX_RECORDS_PER_USER_OP:
            raise too_many_records()
        factor = len(topic.partitions[0].replicas)
        if assignments:
            new = check_assignments(
                {current + i: a for i, a in enumerate(assignments)},
                current,
                list(self.image.brokers),
            )
            if len(new[0]) != factor:
                raise KafkaError(
                    errors.INVALID_REPLICA_ASSIGNMENT,
                    f"Inconsistent replication factor between partitions, partition 0 has {factor} "
                    f"while partitions [{current}] have replication factors [{len(new[0])}], respectively.",
                )
        else:
            new = place_added(
                self.image.unfenced_brokers(), topic.partitions[0].replicas, current, added
            )
        return self._partition_records(topic.topic_id, current, new)

    # -- configs ---------------------------------------------------------------------------

    def incremental_alter_configs(
        self,
        resources: Sequence[tuple[int, str, Sequence[tuple[str, int, str | None]]]],
        validate_only: bool = False,
    ) -> ControllerResult[list[tuple[int, str, int, str | None]]]:
        """Each resource (type, name, [(key, op, value)]) -> (type, name, error, message)."""

        def new_configs(rtype: int, name: str, ops: Any) -> dict[str, str]:
            current = dict(self.image.config(rtype, name))
            return apply_incremental(
                current, ops, _topic_list_default if rtype == TOPIC_RESOURCE else None
            )

        return self._alter(resources, new_configs, validate_only)

    def alter_configs(
        self,
        resources: Sequence[tuple[int, str, Mapping[str, str | None]]],
        validate_only: bool = False,
    ) -> ControllerResult[list[tuple[int, str, int, str | None]]]:
        """Each resource's dynamic configs become exactly the given ones."""

        def new_configs(rtype: int, name: str, configs: Any) -> dict[str, str]:
            return {k: v for k, v in configs.items() if v is not None}

        return self._alter(resources, new_configs, validate_only)

    def _alter(
        self,
        resources: Sequence[tuple[int, str, Any]],
        new_configs: Callable[[int, str, Any], dict[str, str]],
        validate_only: bool,
    ) -> ControllerResult[list[tuple[int, str, int, str | None]]]:
        records: list[Any] = []
        results: list[tuple[int, str, int, str | None]] = []
        for rtype, name, change in resources:
            try:
                self._check_resource(rtype, name)
                new = new_configs(rtype, name, change)
                self._validate(rtype, new)
            except KafkaError as exc:
                results.append((rtype, name, exc.code, exc.message))
                continue
            results.append((rtype, name, NONE, None))
            old = self.image.config(rtype, name)
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key) and not validate_only:
                    records.append(
                        r.ConfigRecord(
                            resource_type=rtype, resource_name=name, name=key, value=new.get(key)
                        )
                    )
        return ControllerResult(records, results)

    def _check_resource(self, rtype: int, name: str) -> None:
        if rtype == TOPIC_RESOURCE:
            if name not in self.image.topics_by_name:
                raise KafkaError(
                    errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist"
                )
        elif rtype == BROKER_RESOURCE:
            if name and not name.isdigit():
                raise KafkaError(errors.INVALID_REQUEST, f"Invalid broker name {name}")
        else:
            raise KafkaError(errors.INVALID_REQUEST, f"Unsupported resource type {rtype}")

    def _validate(self, rtype: int, configs: Mapping[str, str]) -> None:
        try:
            if rtype == TOPIC_RESOURCE:
                config_defs.validate_topic_configs(configs)
                return
            for key, value in configs.items():
                d = config_defs.BROKER_CONFIGS.get(key) or config_defs.listener_config(key)
                if d is None and config_defs.is_dynamic_listener_ssl(key):
                    continue  # the broker loads it, and keeps its old stores on failure
                if d is None:
                    raise KafkaError(errors.INVALID_CONFIG, f"Unknown broker config name: {key}")
                if d.read_only:
                    raise KafkaError(
                        errors.INVALID_CONFIG, f"Cannot update these configs dynamically: [{key}]"
                    )
                d.parse(value)
        except ConfigError as exc:
            raise KafkaError(errors.INVALID_CONFIG, str(exc)) from None

    # -- producer ids ----------------------------------------------------------------------

    def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> ControllerResult[tuple[int, int, int]]:
        """(error, first id, count): a block of `block_size` ids (Kafka's blocks are 1000)."""
        reg = self.image.brokers.get(broker_id)
        if reg is None or reg.epoch != broker_epoch:
            return ControllerResult([], (_code("STALE_BROKER_EPOCH"), -1, 0))
        first = self.image.next_producer_id
        rec = r.ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=first + block_size
        )
        return ControllerResult([rec], (NONE, first, block_size))

    # -- partitions ------------------------------------------------------------------------

    def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> ControllerResult[list[IsrChangeResult] | int]:
        """ISR changes from a partition leader; the response is a top-level error code (a stale
        broker epoch) or one result per change."""
        reg = self.image.brokers.get(broker_id)
        if reg is None or reg.epoch != broker_epoch:
            return ControllerResult([], _code("STALE_BROKER_EPOCH"))
        records: list[Any] = []
        results: list[IsrChangeResult] = []
        for c in changes:
            topic = self.image.topics_by_id.get(c.topic_id)
            part = None if topic is None else topic.partitions.get(c.partition)
            if topic is None:
                results.append(IsrChangeResult(_code("UNKNOWN_TOPIC_ID")))
                continue
            if part is None:
                results.append(IsrChangeResult(errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            error = self._check_isr_change(broker_id, part, c)
            if error != NONE:
                results.append(IsrChangeResult(error))
                continue
            new_isr = tuple(c.new_isr)
            if new_isr == part.isr:
                results.append(
                    IsrChangeResult(
                        NONE, part.leader, part.leader_epoch, part.partition_epoch, part.isr
                    )
                )
                continue
            records.append(
                r.PartitionChangeRecord(
                    partition_id=c.partition,
                    topic_id=c.topic_id,
                    isr=list(new_isr),
                    leader_recovery_state=c.leader_recovery_state
                    if c.leader_recovery_state != part.leader_recovery_state
                    else -1,
                )
            )
            results.append(
                IsrChangeResult(
                    NONE, part.leader, part.leader_epoch, part.partition_epoch + 1, new_isr
                )
            )
        return ControllerResult(records, results)

    def _check_isr_change(self, broker_id: int, part: PartitionRegistration, c: IsrChange) -> int:
        if c.leader_epoch > part.leader_epoch or c.partition_epoch > part.partition_epoch:
            return _code("NOT_CONTROLLER")
        if c.leader_epoch < part.leader_epoch:
            return _code("FENCED_LEADER_EPOCH")
        if broker_id != part.leader:
            return errors.INVALID_REQUEST
        if c.partition_epoch < part.partition_epoch:
            return _code("INVALID_UPDATE_VERSION")
        if (
            not c.new_isr
            or len(set(c.new_isr)) != len(c.new_isr)
            or any(b not in part.replicas for b in c.new_isr)
        ):
            return errors.INVALID_REQUEST
        if part.leader not in c.new_isr:
            return errors.INVALID_REQUEST
        if c.leader_recovery_state == 1 and (len(c.new_isr) > 1 or part.leader_recovery_state == 0):
            return errors.INVALID_REQUEST
        for b in c.new_isr:
            reg = self.image.brokers.get(b)
            epoch = c.broker_epochs.get(b, -1)
            if (
                reg is None
                or reg.fenced
                or reg.in_controlled_shutdown
                or (epoch != -1 and epoch != reg.epoch)
            ):
                return _code("INELIGIBLE_REPLICA")
        return NONE

    def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None = None
    ) -> ControllerResult[dict[tuple[str, int], int]]:
        """ElectLeaders, as Kafka's ReplicationControlManager.electLeaders: an error code per
        partition (None: every partition of every topic), in request order.

        PREFERRED: ELECTION_NOT_NEEDED when the first replica leads; else it is elected when it
        is active and in the ISR (NONE), else PREFERRED_LEADER_NOT_AVAILABLE. UNCLEAN:
        ELECTION_NOT_NEEDED when the partition has a leader; else the first active ISR member,
        or failing that the first active replica (the ISR becomes just it), or
        ELIGIBLE_LEADERS_NOT_AVAILABLE. Unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION.
        A partition named twice gets one election and the same code twice."""
        if election_type not in (PREFERRED, UNCLEAN):
            raise KafkaError(errors.INVALID_REQUEST, f"Unknown election type {election_type}")
        if partitions is None:
            partitions = [
                (t.name, i)
                for t in sorted(self.image.topics_by_id.values(), key=lambda t: t.name)
                for i in sorted(t.partitions)
            ]
        records: list[Any] = []
        result: dict[tuple[str, int], int] = {}
        for name, index in partitions:
            if (name, index) not in result:
                result[(name, index)] = self._elect_one(election_type, name, index, records)
        return ControllerResult(records, result)

    def _elect_one(self, election_type: int, name: str, index: int, records: list[Any]) -> int:
        topic = self.image.topic(name)
        part = None if topic is None else topic.partitions.get(index)
        if topic is None or part is None:
            return errors.UNKNOWN_TOPIC_OR_PARTITION
        if election_type == PREFERRED:
            preferred = part.preferred_leader
            if part.leader == preferred:
                return _code("ELECTION_NOT_NEEDED")
            if preferred not in part.isr or not self._active(preferred):
                return _code("PREFERRED_LEADER_NOT_AVAILABLE")
            records.append(
                r.PartitionChangeRecord(
                    partition_id=index, topic_id=topic.topic_id, leader=preferred
                )
            )
            return NONE
        if part.leader != NO_LEADER:
            return _code("ELECTION_NOT_NEEDED")
        rec = change_record(topic.topic_id, index, part, part.isr, self._active, unclean=True)
        if rec is None:
            return _code("ELIGIBLE_LEADERS_NOT_AVAILABLE")
        records.append(rec)
        return NONE

    def balance_leaders(self, now_ms: int) -> ControllerResult[list[tuple[str, int]]]:
        """Automatic preferred leader election (`auto.leader.rebalance.enable`): every
        `leader.imbalance.check.interval.seconds`, counted from this controller's first call,
        the elections `leader_balance.preferred_elections` decides on, in one commit. The
        response names the partitions whose preferred replica is elected."""
        if not self._broker_default("auto.leader.rebalance.enable"):
            return ControllerResult([], [])
        interval_ms = 1000 * int(self._broker_default("leader.imbalance.check.interval.seconds"))
        due = self.next_balance_check_ms
        if due is None or now_ms < due:
            if due is None:
                self.next_balance_check_ms = now_ms + interval_ms
            return ControllerResult([], [])
        self.next_balance_check_ms = now_ms + interval_ms
        percentage = int(self._broker_default("leader.imbalance.per.broker.percentage"))
        chosen = preferred_elections(self.image, self._active, percentage)
        records: list[Any] = [
            r.PartitionChangeRecord(partition_id=c.partition, topic_id=c.topic_id, leader=c.leader)
            for c in chosen
        ]
        return ControllerResult(records, [(c.topic, c.partition) for c in chosen])


def _topic_list_default(key: str) -> list[str]:
    d = config_defs.TOPIC_CONFIGS.get(key)
    if d is None or d.type != config_defs.LIST or d.default is None:
        return []
    return [p for p in d.default.split(",") if p]
