"""MetadataImage: the cluster metadata as of one offset of `__cluster_metadata`, built only by
replaying metadata records (DESIGN principle 3). The controller and every broker hold one.

An image is immutable (frozen dataclasses over read-only mappings). A `MetadataDelta` takes an
image, replays records in log order and `apply()`s to a new image; the old one is untouched, so
readers keep a consistent view while a batch is replayed. Replaying the same records from the
same image always gives an equal image.

What each record does (as Kafka's image classes):

    RegisterBrokerRecord         the broker's registration, replacing any earlier incarnation;
                                 its epoch is the record's BrokerEpoch
    UnregisterBrokerRecord       the broker is forgotten
    FenceBrokerRecord            fenced = true       } the epoch must be the registered one,
    UnfenceBrokerRecord          fenced = false      } else MetadataReplayError
    BrokerRegistrationChange     Fenced -1 unfence / 1 fence / 0 keep; InControlledShutdown
                                 1 sets it; LogDirs, when non-empty, replace the broker's
    TopicRecord                  a topic with no partitions yet
    PartitionRecord              a partition's registration, whole
    PartitionChangeRecord        merged: null fields keep their value; Leader -2 keeps the
                                 leader, any other value (even the same leader, or -1 for none)
                                 sets it and bumps the leader epoch; the partition epoch bumps
                                 on every change; LeaderRecoveryState -1 keeps it
    RemoveTopicRecord            the topic, its partitions and its configs are removed
    ConfigRecord                 sets the config of (resource type, name); a null value deletes
    ProducerIdsRecord            next_producer_id: the first id not yet handed out
    FeatureLevelRecord           a feature's finalized level; level 0 removes the feature
    AccessControlEntryRecord     an ACL, by its id (MetadataReplayError if the id is taken)
    RemoveAccessControlEntry     the ACL of that id is removed (MetadataReplayError if none)
    NoOpRecord                   nothing but the offset
    UserScramCredentialRecord    sets the credential of (user, mechanism)
    RemoveUserScramCredential    removes it; one that is not there is a MetadataReplayError
    ClientQuotaRecord            sets (or with `remove`, removes) one quota key of an entity;
                                 an entity left with no key is dropped
    Begin/End/AbortTransaction   nothing but the offset: which records a transaction lets
                                 through is transactions.py's business, before the image

Config resources are keyed by (resource type, name): TOPIC (2) by topic name, BROKER (4) by
broker id, or "" for the cluster-wide default.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from gregor.frozen import positional_constructor
from gregor.metadata import records as r
from gregor.metadata.change_map import ChangeMap
from gregor.security.acls import AclBinding
from gregor.security.quotas import Entity as QuotaEntity
from gregor.security.scram import MECHANISMS, ScramCredential

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
NO_LEADER = -1
NO_LEADER_CHANGE = -2
METADATA_VERSION = "metadata.version"
# Kafka's DirectoryId: a replica's directory not known yet, or written before KIP-858.
DIRECTORY_UNASSIGNED = uuid.UUID(int=0)
DIRECTORY_MIGRATING = uuid.UUID(int=2)

ConfigResource = tuple[int, str]
ScramKey = tuple[str, int]  # (user name, mechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512)


class MetadataReplayError(ValueError):
    """A record that does not fit the image it is replayed onto (a bug, or a damaged log)."""


def _copy(m: Mapping[Any, Any]) -> dict[Any, Any]:
    """A dict copy; of a dict (or a read-only view of one) without rehashing its keys."""
    if isinstance(m, dict | MappingProxyType):
        return m.copy()
    return dict(m)


_EMPTY: Mapping[Any, Any] = MappingProxyType({})
# The image's mappings that grow with the topics: a change copies only itself (change_map.py).
_CHANGE_MAPS = frozenset({"topics_by_id", "topics_by_name"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    listeners: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    features: tuple[tuple[str, int, int], ...] = ()  # (name, min, max) supported
    log_dirs: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    directories: tuple[uuid.UUID, ...] = ()

    @staticmethod
    def from_record(rec: Any) -> PartitionRegistration:
        replicas = tuple(rec.replicas)
        return _new_partition(
            replicas,
            tuple(rec.isr),
            rec.leader,
            rec.leader_epoch,
            rec.partition_epoch,
            rec.leader_recovery_state,
            tuple(rec.removing_replicas),
            tuple(rec.adding_replicas),
            _directories(tuple(rec.directories), len(replicas)),
        )

    def merge(self, change: Any) -> PartitionRegistration:
        """This partition after a PartitionChangeRecord (the rules in the module docstring)."""
        replicas = self.replicas if change.replicas is None else tuple(change.replicas)
        if change.directories is not None:
            directories = tuple(change.directories)
        elif change.replicas is None:
            directories = self.directories
        else:  # new replicas without their directories: not known, as a v0 record
            directories = ()
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return _new_partition(
            replicas,
            self.isr if change.isr is None else tuple(change.isr),
            leader,
            leader_epoch,
            self.partition_epoch + 1,
            (
                self.leader_recovery_state
                if change.leader_recovery_state == -1
                else change.leader_recovery_state
            ),
            (
                self.removing_replicas
                if change.removing_replicas is None
                else tuple(change.removing_replicas)
            ),
            self.adding_replicas
            if change.adding_replicas is None
            else tuple(change.adding_replicas),
            _directories(directories, len(replicas)),
        )

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER


# PartitionRegistration(every field, in order), without a frozen __init__'s setattr per field
_new_partition = positional_constructor(PartitionRegistration)


def _directories(dirs: tuple[uuid.UUID, ...], n: int) -> tuple[uuid.UUID, ...]:
    """Kafka's rule: a partition without directories (a v0 record) is "migrating"."""
    if len(dirs) == n:
        return dirs
    if not dirs:
        return (DIRECTORY_MIGRATING,) * n
    raise MetadataReplayError(f"{len(dirs)} directories for {n} replicas")


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1  # of the last record applied; -1 for the empty image
    epoch: int = -1  # the leader epoch that record was written in
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)
    topics_by_name: Mapping[str, uuid.UUID] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    next_producer_id: int = 0
    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    scram: Mapping[ScramKey, ScramCredential] = field(default_factory=lambda: _EMPTY)
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=lambda: _EMPTY)
    # Client quotas: entity -> quota key -> value (security/quotas.py names the entities).
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topics_by_name.get(name)
        return None if topic_id is None else self.topics_by_id[topic_id]

    def partition(self, name: str, index: int) -> PartitionRegistration | None:
        t = self.topic(name)
        return None if t is None else t.partitions.get(index)

    def config(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.configs.get((resource_type, name), _EMPTY)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The SCRAM credential of `user` for `mechanism` (SCRAM-SHA-256 or SCRAM-SHA-512)."""
        mech = MECHANISMS.get(mechanism)
        return None if mech is None else self.scram.get((user, mech.type))

    def unfenced_brokers(self) -> list[int]:
        return sorted(b for b, reg in self.brokers.items() if not reg.fenced)

    def is_active(self, broker_id: int) -> bool:
        """Registered and unfenced (a leader or ISR candidate)."""
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced

    def replay(self, records: Iterable[tuple[Any, int, int]]) -> MetadataImage:
        """This image after (record, offset, epoch) triples, in order."""
        delta = MetadataDelta(self)
        for rec, offset, epoch in records:
            delta.replay(rec, offset, epoch)
        return delta.apply()


EMPTY_IMAGE = MetadataImage()
# every field, in order, as positional_constructor makes them (frozen.py): replay's hot path
_new_topic = positional_constructor(TopicImage)
_new_image = positional_constructor(MetadataImage)


class MetadataDelta:
    """Records replayed onto an image; `apply()` (once) gives the new image.

    Each mapping is the image's own until the first write to it, which copies it (`_own`); the
    new image shares every mapping nothing wrote to. A change costs a copy of the mappings it
    touches (dict copies, which rehash nothing), not of the whole image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self.epoch = image.epoch
        self.brokers: Mapping[int, BrokerRegistration] = image.brokers
        self.topics_by_id: Mapping[uuid.UUID, TopicImage] = image.topics_by_id
        self.topics_by_name: Mapping[str, uuid.UUID] = image.topics_by_name
        self.configs: Mapping[ConfigResource, Mapping[str, str]] = image.configs
        self.next_producer_id = image.next_producer_id
        self.features: Mapping[str, int] = image.features
        self.scram: Mapping[ScramKey, ScramCredential] = image.scram
        self.acls: Mapping[uuid.UUID, AclBinding] = image.acls
        self.client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = image.client_quotas
        self.partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}
        # Topics created by this delta: their TopicImage already views their `partitions`
        # dict, so `apply` builds no second one.
        self._created: set[uuid.UUID] = set()
        self._owned: set[str] = set()

    def _own(self, name: str) -> Any:
        """The mapping `name`, made this delta's own (copied) before its first write; the
        topics fork a ChangeMap instead, which copies only what changed (change_map.py)."""
        mapping = getattr(self, name)
        if name not in self._owned:
            mapping = ChangeMap.fork_of(mapping) if name in _CHANGE_MAPS else _copy(mapping)
            setattr(self, name, mapping)
            self._owned.add(name)
        return mapping

    def replay(self, record: Any, offset: int, epoch: int) -> None:
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise MetadataReplayError(f"cannot replay {type(record).__name__}")
        handler(self, record)
        self.offset, self.epoch = offset, epoch

    def apply(self) -> MetadataImage:
        # a created topic's TopicImage views its partitions already: when every topic with
        # changed partitions was created here (a creation), there is nothing more to build
        if len(self.partitions) > len(self._created):
            created = self._created
            topics = self._own("topics_by_id")
            for topic_id, parts in self.partitions.items():
                if created and topic_id in created:
                    continue
                t = topics.get(topic_id)
                if t is not None:
                    topics[topic_id] = _new_topic(t.name, t.topic_id, MappingProxyType(parts))
        for name in self._owned:  # read-only from here: the image holds them
            mapping = getattr(self, name)
            setattr(
                self,
                name,
                mapping.freeze() if name in _CHANGE_MAPS else MappingProxyType(mapping),
            )
        self._owned.clear()  # so a later write copies again
        self.partitions, self._created = {}, set()
        return _new_image(
            self.offset,
            self.epoch,
            self.brokers,
            self.topics_by_id,
            self.topics_by_name,
            self.configs,
            self.next_producer_id,
            self.features,
            self.scram,
            self.acls,
            self.client_quotas,
        )

    # -- brokers -------------------------------------------------------------------------------

    def _broker(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        reg = self.brokers.get(broker_id)
        if reg is None:
            raise MetadataReplayError(f"{what}: broker {broker_id} is not registered")
        if reg.epoch != epoch:
            raise MetadataReplayError(
                f"{what}: broker {broker_id} has epoch {reg.epoch}, the record says {epoch}"
            )
        return reg

    def _register_broker(self, rec: Any) -> None:
        self._own("brokers")[rec.broker_id] = BrokerRegistration(
            broker_id=rec.broker_id,
            incarnation_id=rec.incarnation_id,
            epoch=rec.broker_epoch,
            listeners=tuple(
                Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points
            ),
            rack=rec.rack,
            fenced=rec.fenced,
            in_controlled_shutdown=rec.in_controlled_shutdown,
            features=tuple(
                (f.name, f.min_supported_version, f.max_supported_version) for f in rec.features
            ),
            log_dirs=tuple(rec.log_dirs),
        )

    def _unregister_broker(self, rec: Any) -> None:
        self._own("brokers").pop(rec.broker_id, None)

    def _fence(self, rec: Any) -> None:
        reg = self._broker(rec.id, rec.epoch, "FenceBrokerRecord")
        self._own("brokers")[rec.id] = replace(reg, fenced=True)

    def _unfence(self, rec: Any) -> None:
        reg = self._broker(rec.id, rec.epoch, "UnfenceBrokerRecord")
        self._own("brokers")[rec.id] = replace(reg, fenced=False)

    def _registration_change(self, rec: Any) -> None:
        reg = self._broker(rec.broker_id, rec.broker_epoch, "BrokerRegistrationChangeRecord")
        if rec.fenced not in (-1, 0, 1) or rec.in_controlled_shutdown not in (0, 1):
            raise MetadataReplayError(f"bad BrokerRegistrationChangeRecord {rec}")
        fenced = reg.fenced if rec.fenced == 0 else rec.fenced == 1
        shutdown = reg.in_controlled_shutdown or rec.in_controlled_shutdown == 1
        log_dirs = tuple(rec.log_dirs) if rec.log_dirs else reg.log_dirs
        self._own("brokers")[rec.broker_id] = replace(
            reg, fenced=fenced, in_controlled_shutdown=shutdown, log_dirs=log_dirs
        )

    # -- topics --------------------------------------------------------------------------------

    def _parts(self, topic_id: uuid.UUID, what: str) -> dict[int, PartitionRegistration]:
        parts = self.partitions.get(topic_id)
        if parts is None:
            t = self.topics_by_id.get(topic_id)
            if t is None:
                raise MetadataReplayError(f"{what}: no topic with id {topic_id}")
            parts = self.partitions[topic_id] = _copy(t.partitions)
        return parts

    def _topic(self, rec: Any) -> None:
        if rec.name in self.topics_by_name or rec.topic_id in self.topics_by_id:
            raise MetadataReplayError(f"TopicRecord: topic {rec.name} ({rec.topic_id}) exists")
        parts: dict[int, PartitionRegistration] = {}  # its PartitionRecords fill it
        self.partitions[rec.topic_id] = parts
        self._created.add(rec.topic_id)
        topic = _new_topic(rec.name, rec.topic_id, MappingProxyType(parts))
        self._own("topics_by_id").add(rec.topic_id, topic)
        self._own("topics_by_name").add(rec.name, rec.topic_id)

    def _partition(self, rec: Any) -> None:
        self._parts(rec.topic_id, "PartitionRecord")[rec.partition_id] = (
            PartitionRegistration.from_record(rec)
        )

    def _partition_change(self, rec: Any) -> None:
        parts = self._parts(rec.topic_id, "PartitionChangeRecord")
        current = parts.get(rec.partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord: no partition {rec.partition_id} of {rec.topic_id}"
            )
        parts[rec.partition_id] = current.merge(rec)

    def _remove_topic(self, rec: Any) -> None:
        if rec.topic_id not in self.topics_by_id:
            raise MetadataReplayError(f"RemoveTopicRecord: no topic with id {rec.topic_id}")
        t = self._own("topics_by_id").pop(rec.topic_id)
        self._own("topics_by_name").pop(t.name, None)
        self.partitions.pop(rec.topic_id, None)
        self._created.discard(rec.topic_id)  # so `_created` stays within `partitions`
        if (TOPIC_RESOURCE, t.name) in self.configs:
            self._own("configs").pop((TOPIC_RESOURCE, t.name))

    # -- the rest ------------------------------------------------------------------------------

    def _config(self, rec: Any) -> None:
        key = (rec.resource_type, rec.resource_name)
        current = dict(self.configs.get(key, _EMPTY))
        if rec.value is None:
            current.pop(rec.name, None)
        else:
            current[rec.name] = rec.value
        if current:
            self._own("configs")[key] = MappingProxyType(current)
        elif key in self.configs:
            self._own("configs").pop(key)

    def _producer_ids(self, rec: Any) -> None:
        if rec.next_producer_id < self.next_producer_id:
            raise MetadataReplayError(
                f"ProducerIdsRecord: next producer id {rec.next_producer_id} is below "
                f"{self.next_producer_id}"
            )
        self.next_producer_id = rec.next_producer_id

    def _feature_level(self, rec: Any) -> None:
        if rec.feature_level == 0:
            self._own("features").pop(rec.name, None)
        else:
            self._own("features")[rec.name] = rec.feature_level

    def _no_op(self, rec: Any) -> None:
        pass

    def _scram_credential(self, rec: Any) -> None:
        self._own("scram")[(rec.name, rec.mechanism)] = ScramCredential(
            salt=rec.salt,
            stored_key=rec.stored_key,
            server_key=rec.server_key,
            iterations=rec.iterations,
        )

    def _remove_scram_credential(self, rec: Any) -> None:
        if (rec.name, rec.mechanism) not in self.scram:
            raise MetadataReplayError(
                f"RemoveUserScramCredentialRecord: user {rec.name!r} has no credential of "
                f"mechanism {rec.mechanism}"
            )
        self._own("scram").pop((rec.name, rec.mechanism))

    # -- ACLs ----------------------------------------------------------------------------------

    def _acl(self, rec: Any) -> None:
        if rec.id in self.acls:
            raise MetadataReplayError(f"AccessControlEntryRecord: ACL {rec.id} exists already")
        self._own("acls")[rec.id] = AclBinding(
            rec.resource_type,
            rec.resource_name,
            rec.pattern_type,
            rec.principal,
            rec.host,
            rec.operation,
            rec.permission_type,
        )

    def _remove_acl(self, rec: Any) -> None:
        if rec.id not in self.acls:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord: no ACL {rec.id}")
        self._own("acls").pop(rec.id)

    # -- client quotas ------------------------------------------------------------------------

    def _client_quota(self, rec: Any) -> None:
        ent: QuotaEntity = tuple(sorted((e.entity_type, e.entity_name) for e in rec.entity))
        quotas = self._own("client_quotas")
        values = dict(quotas.get(ent, _EMPTY))
        if rec.remove:
            values.pop(rec.key, None)
        else:
            values[rec.key] = rec.value
        if values:
            quotas[ent] = MappingProxyType(values)
        else:
            quotas.pop(ent, None)


_HANDLERS: dict[type, Any] = {
    r.RegisterBrokerRecord: MetadataDelta._register_broker,
    r.UnregisterBrokerRecord: MetadataDelta._unregister_broker,
    r.FenceBrokerRecord: MetadataDelta._fence,
    r.UnfenceBrokerRecord: MetadataDelta._unfence,
    r.BrokerRegistrationChangeRecord: MetadataDelta._registration_change,
    r.TopicRecord: MetadataDelta._topic,
    r.PartitionRecord: MetadataDelta._partition,
    r.PartitionChangeRecord: MetadataDelta._partition_change,
    r.RemoveTopicRecord: MetadataDelta._remove_topic,
    r.ConfigRecord: MetadataDelta._config,
    r.ProducerIdsRecord: MetadataDelta._producer_ids,
    r.FeatureLevelRecord: MetadataDelta._feature_level,
    r.NoOpRecord: MetadataDelta._no_op,
    r.UserScramCredentialRecord: MetadataDelta._scram_credential,
    r.RemoveUserScramCredentialRecord: MetadataDelta._remove_scram_credential,
    r.ClientQuotaRecord: MetadataDelta._client_quota,
    r.BeginTransactionRecord: MetadataDelta._no_op,
    r.EndTransactionRecord: MetadataDelta._no_op,
    r.AbortTransactionRecord: MetadataDelta._no_op,
    r.AccessControlEntryRecord: MetadataDelta._acl,
    r.RemoveAccessControlEntryRecord: MetadataDelta._remove_acl,
}


def replay_bytes(image: MetadataImage, entries: Iterable[tuple[bytes, int, int]]) -> MetadataImage:
    """The image after framed records (bytes, offset, epoch), as Raft commits them."""
    return image.replay((r.decode(data), offset, epoch) for data, offset, epoch in entries)
