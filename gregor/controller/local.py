"""The active controller of a one-voter quorum, run in the broker's own thread: every metadata
change is planned by QuorumController on the committed image and committed through the
RaftMetadataStore before the call returns.

    controller = LocalController(store, node_id, static_config)
    controller.start(listeners, log_dir_ids, legacy=MetadataStore.load(data_dir))
    info = controller.create_topic("orders", [[1], [1]], {"cleanup.policy": "compact"})

The write methods are the ones `Admin` and `ProducerIdManager` call (the pre-KRaft store had the
same): create_topic (TopicRecord, ConfigRecords, PartitionRecords), delete_topic
(RemoveTopicRecord), add_partitions (PartitionRecords), set_topic_configs and
set_broker_configs (a ConfigRecord per changed key, null value for a removed one),
allocate_producer_ids (ProducerIdsRecord). Admin has already validated with the messages
clients see; QuorumController checks again (a creation: only what the speculative image may
have changed since Admin looked), and a refusal is raised as its KafkaError.

`start` commits, at every start, one batch (atomic on disk; when the records pass
raft_store.MAX_BATCH_BYTES, as a large migration may, several framed as a metadata transaction,
applied all together or not at all: metadata/transactions.py). A transaction left open by a
crash is aborted first (AbortTransactionRecord), as every newly active controller does:

    FeatureLevelRecord metadata.version      only when the log has none yet (a new cluster),
    UserScramCredentialRecords               with the users of bootstrap.checkpoint, if any
    RegisterBrokerRecord                     this broker, a new incarnation; epoch = its offset
    PartitionChangeRecords + unfence         as QuorumController does for a re-registering
                                             broker, then its heartbeat: caught up, unfenced,
                                             leader again of what it led
    the migrated pre-KRaft store             when `legacy` is given (below)

Migration of a pre-KRaft data dir (`__cluster_metadata.json`): every topic with its id, replicas
and configs, the dynamic broker configs, and the producer-id high water mark become records in
that same batch; then the file is renamed `__cluster_metadata.json.migrated`. A topic already in
the log with the same id is skipped (a crash before the rename), so running it again writes
nothing twice; the same name under another id is refused (MigrationError). A crash between the batches of a large migration leaves none of it
applied (the transaction is aborted at the next start) and the file in place: it runs again.

Between starts the registration stays; no heartbeats or session timeouts run (one broker, in
this process). The broker's registration names the configured listener (port 0 if the OS is to
pick one: it is not known yet).

Networked (several voters; the store's `networked`): `start` is not called. Brokers register
and heartbeat over the controller listener (`register_broker`, `heartbeat`, answered once their
records are committed) and the controller's tick (node/active_controller.py) calls `tick` to
fence the silent ones; the first plan of a new leadership epoch on a log without
metadata.version writes the bootstrap records. A write only appends: `store.commit` returns
before the quorum commits, and the caller answers once `store.wait_committed(
store.last_appended, done)` calls back. So that the next write sees the ones still in
flight, the controller plans on a speculative image, the committed one plus every record it
appended since (Kafka's active controller does the same); it starts again from the committed
image whenever nothing is in flight, and whenever a new epoch of its leadership starts. Write
methods then return what they planned (a TopicInfo built from the records), not what the
store replayed. Any write on a node that is not the active controller raises NOT_CONTROLLER.
"""

from __future__ import annotations

import logging
import os
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gregor.controller import acls, client_quotas, scram_credentials
from gregor.controller.quorum_controller import (
    BrokerHeartbeat,
    BrokerRegistration,
    ControllerConfig,
    IsrChange,
    IsrChangeResult,
    Listener,
    QuorumController,
    TopicRequest,
    bootstrap_records,
)
from gregor.metadata import bootstrap
from gregor.metadata import records as r
from gregor.metadata.image import BROKER_RESOURCE, METADATA_VERSION, TOPIC_RESOURCE
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.store import MIGRATED_SUFFIX, MetadataStore, TopicInfo
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.uuids import random_uuid
from gregor.security.acls import AclBinding, AclFilter
from gregor.storage.checkpoints import fsync_dir

log = logging.getLogger("gregor.controller")


class MigrationError(RuntimeError):
    """A pre-KRaft store that cannot be written into the metadata log as it is."""


class _Plan:
    """Records planned one step after another on a scratch controller, each step seeing the
    ones before (their offsets are the ones they will have: one append, in order)."""

    def __init__(self, quorum: QuorumController, next_offset: int, epoch: int) -> None:
        self.quorum = quorum
        self.offset = next_offset
        self.epoch = epoch
        self.records: list[Any] = []

    def add(self, records: Sequence[Any]) -> None:
        self.quorum.replay([(rec, self.offset + i, self.epoch) for i, rec in enumerate(records)])
        self.records += records
        self.offset += len(records)


class LocalController:
    def __init__(
        self,
        store: RaftMetadataStore,
        node_id: int,
        static_config: Mapping[str, str],
        new_uuid: Callable[[], uuid.UUID] = random_uuid,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.config = ControllerConfig(static=dict(static_config))
        self.new_uuid = new_uuid
        # Where new topics' placement starts (Admin places with it too): one stream per node.
        self.rng = rng if rng is not None else random.Random()
        self.quorum = QuorumController(self.config, store.image, new_uuid, self.rng)
        self._spec_epoch = -1  # networked: the leader epoch the speculative image belongs to
        self._spec_image = store.image
        self._spec_offset = -1  # the last offset appended into the speculative image
        # Appended but not yet replayed into the speculative image: replayed when a plan needs
        # them, dropped when they commit first (the usual case: a creation commits before the
        # next request comes, and the committed image then has it).
        self._spec_pending: list[tuple[Sequence[Any], int, int]] = []

    def _planner(self) -> QuorumController:
        """The controller over the committed image (nothing is planned but not committed);
        networked, over the committed image plus what is appended but not yet committed."""
        store = self.store
        if not store.networked:
            store.abort_open_transaction()  # only one left by a crash can be open here
            self.quorum.image = store.image
            return self.quorum
        epoch = store.active_epoch()
        if epoch is None:
            raise KafkaError(
                errors.BY_NAME["NOT_CONTROLLER"].code,
                f"node {self.node_id} is not the active controller (leader {store.leader_id})",
            )
        if epoch != self._spec_epoch:
            self._spec_epoch = epoch
            self.quorum.last_contact_ms = {}  # sessions start again at a new controller
            self.quorum.next_balance_check_ms = None  # so does the leader balance interval
            self._reset_spec(store.image, store.applied)
            if store.abort_open_transaction():  # the last controller died inside one
                self._spec_offset = store.last_appended
            if METADATA_VERSION not in self._spec_image.features:  # a new log: bootstrap it
                self._commit(self._bootstrap_records())
        elif store.applied >= self._spec_offset:
            self._reset_spec(store.image, store.applied)
        self.quorum.image = self._speculative()
        return self.quorum

    def _reset_spec(self, image: Any, offset: int) -> None:
        self._spec_image, self._spec_offset = image, offset
        self._spec_pending = []

    def _speculative(self) -> Any:
        """The speculative image, with what was appended since a plan last needed it."""
        pending, self._spec_pending = self._spec_pending, []
        for records, first, epoch in pending:
            self._spec_image = self._spec_image.replay(
                (rec, first + i, epoch) for i, rec in enumerate(records)
            )
        return self._spec_image

    def _bootstrap_records(self) -> list[Any]:
        """What a new log starts with: metadata.version, and the users `storage format` put in
        bootstrap.checkpoint (read only then: a log once bootstrapped never needs the file)."""
        log_dir = self.store.log_dir
        return bootstrap_records() + (bootstrap.read(log_dir) if log_dir else [])

    def _commit(self, records: Sequence[Any], name: str | None = None) -> int:
        """Append (one voter: and commit) `records`, as a metadata transaction named `name`
        if they take several batches; networked, they go into the speculative image at the
        offsets they got, replayed once a plan needs them (`_speculative`)."""
        last = self.store.commit(records, name)
        if self.store.networked and records:
            self._spec_pending.append((records, self.store.records_offset, self._spec_epoch))
            self._spec_offset = last
        return last

    @property
    def next_offset(self) -> int:
        return self.store.next_offset

    # -- networked: the active controller's own duties ---------------------------------------

    def activate(self) -> None:
        """On a newly active controller: start planning on the committed image (writing the
        bootstrap records if the log has none: the first plan of an epoch does)."""
        self._planner()

    def register_broker(self, registration: BrokerRegistration, now_ms: int) -> tuple[int, int]:
        """(error code, broker epoch) and the records appended (wait for store.last_appended)."""
        quorum = self._planner()
        result = quorum.register_broker(registration, now_ms, self.store.next_offset)
        if result.response.error_code == errors.NONE and self.store.needs_transaction(
            result.records
        ):
            # The records go as a transaction, its Begin first: the broker epoch is one more.
            result = quorum.register_broker(registration, now_ms, self.store.next_offset + 1)
        if result.response.error_code == errors.NONE:
            self._commit(result.records, f"register broker {registration.broker_id}")
        return result.response.error_code, result.response.broker_epoch

    def heartbeat(self, beat: BrokerHeartbeat, now_ms: int) -> tuple[Any, bool]:
        """The HeartbeatResponse, and whether records were appended (then wait for them)."""
        quorum = self._planner()
        result = quorum.heartbeat(beat, now_ms)
        if result.records:
            self._commit(result.records)
        return result.response, bool(result.records)

    def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> tuple[list[IsrChangeResult] | int, bool]:
        """A partition leader's ISR changes (AlterPartition): the answer (one result per
        change, or a top-level error code) and whether records were appended (then wait for
        them before answering)."""
        result = self._planner().alter_partition(broker_id, broker_epoch, changes)
        if result.records:
            self._commit(result.records)
        return result.response, bool(result.records)

    def tick(self, now_ms: int) -> list[int]:
        """Fence the brokers whose session expired (appended; committed later)."""
        quorum = self._planner()
        result = quorum.tick(now_ms)
        if result.records:
            self._commit(result.records)
            log.info(
                "fenced broker(s) %s: no heartbeat for %d ms",
                result.response,
                self.config.broker_session_timeout_ms,
            )
        return result.response

    def balance_leaders(self, now_ms: int) -> list[tuple[str, int]]:
        """Automatic preferred leader election, when due (appended; committed later)."""
        result = self._planner().balance_leaders(now_ms)
        if result.records:
            self._commit(result.records, "preferred leader election")
            log.info(
                "leader imbalance: electing the preferred leaders of %s", _names(result.response)
            )
        return result.response

    # -- start ----------------------------------------------------------------------------------

    def start(
        self,
        listeners: Sequence[Listener],
        log_dir_ids: Sequence[uuid.UUID] = (),
        rack: str | None = None,
        legacy: MetadataStore | None = None,
        now_ms: int = 0,
    ) -> None:
        """Bootstrap (a new log), register and unfence this broker, migrate `legacy`: one batch
        (a metadata transaction when they take several)."""
        self.store.abort_open_transaction()  # left open by a crash: this node is the controller
        incarnation = self.new_uuid()
        plan, migrated = self._plan_start(
            self.store.next_offset, listeners, log_dir_ids, rack, legacy, incarnation, now_ms
        )
        if self.store.needs_transaction(plan.records):  # the Begin comes first: one offset on
            plan, migrated = self._plan_start(
                self.store.next_offset + 1,
                listeners,
                log_dir_ids,
                rack,
                legacy,
                incarnation,
                now_ms,
            )
        self.store.commit(
            plan.records, "broker start" if legacy is None else "broker start and migration"
        )
        if legacy is not None:
            _retire(legacy.path)
            log.info(
                "migrated %s into the KRaft metadata log: %d topic(s) written, dynamic broker "
                "configs and producer ids kept; the old file is now %s",
                legacy.path,
                migrated,
                legacy.path + MIGRATED_SUFFIX,
            )

    def _plan_start(
        self,
        first_offset: int,
        listeners: Sequence[Listener],
        log_dir_ids: Sequence[uuid.UUID],
        rack: str | None,
        legacy: MetadataStore | None,
        incarnation: uuid.UUID,
        now_ms: int,
    ) -> tuple[_Plan, int]:
        """The records `start` commits, the first at `first_offset`; how many topics migrated."""
        scratch = QuorumController(self.config, self.store.image, self.new_uuid, self.rng)
        plan = _Plan(scratch, first_offset, self.store.epoch)
        if METADATA_VERSION not in scratch.image.features:
            plan.add(self._bootstrap_records())
        reg = scratch.register_broker(
            BrokerRegistration(
                self.node_id, incarnation, tuple(listeners), rack, tuple(log_dir_ids)
            ),
            now_ms,
            plan.offset,
        )
        if reg.response.error_code != errors.NONE:
            raise KafkaError(reg.response.error_code, f"broker {self.node_id} cannot register")
        plan.add(reg.records)
        beat = scratch.heartbeat(
            BrokerHeartbeat(self.node_id, reg.response.broker_epoch, plan.offset), now_ms
        )
        if beat.response.error_code != errors.NONE or beat.response.is_fenced:
            raise KafkaError(beat.response.error_code, f"broker {self.node_id} stays fenced")
        plan.add(beat.records)
        migrated = self._plan_migration(plan, legacy) if legacy is not None else 0
        return plan, migrated

    def _plan_migration(self, plan: _Plan, legacy: MetadataStore) -> int:
        written = 0
        for info in legacy.topics.values():
            existing = plan.quorum.image.topic(info.name)
            if existing is not None:
                if existing.topic_id != info.topic_id:
                    raise MigrationError(
                        f"{legacy.path}: topic {info.name} has id {info.topic_id}, but the "
                        f"metadata log already has it with id {existing.topic_id}"
                    )
                continue  # migrated before a crash kept the old file's name
            request = TopicRequest(
                info.name,
                assignments=dict(enumerate(info.replicas)),
                configs=dict(info.configs),
                topic_id=info.topic_id,
            )
            result = plan.quorum.create_topics([request], bounded=False)
            outcome = result.response[0]
            if outcome.error_code != errors.NONE:
                raise MigrationError(
                    f"{legacy.path}: topic {info.name} cannot be migrated: "
                    f"{errors.name_of(outcome.error_code)}: {outcome.error_message}"
                )
            plan.add(result.records)
            written += 1
        resources = [(BROKER_RESOURCE, "", legacy.broker_configs)]
        resources += [
            (BROKER_RESOURCE, node, cfg) for node, cfg in sorted(legacy.node_configs.items())
        ]
        configs = plan.quorum.alter_configs(resources)
        for _rtype, name, code, message in configs.response:
            if code != errors.NONE:
                raise MigrationError(
                    f"{legacy.path}: dynamic configs of broker {name!r}: {message}"
                )
        plan.add(configs.records)
        if legacy.next_producer_id_block > plan.quorum.image.next_producer_id:
            reg = plan.quorum.image.brokers[self.node_id]
            plan.add(
                [
                    r.ProducerIdsRecord(
                        broker_id=self.node_id,
                        broker_epoch=reg.epoch,
                        next_producer_id=legacy.next_producer_id_block,
                    )
                ]
            )
        return written

    # -- the writes Admin and ProducerIdManager make ------------------------------------------------

    def create_topic(
        self, name: str, replicas: list[list[int]], configs: Mapping[str, str]
    ) -> TopicInfo:
        """Topic `name` with these replicas and configs, every rule of
        QuorumController.create_topics checked (the callers other than Admin; Admin, which has
        checked and placed the topic already, calls `create_placed`)."""
        request = TopicRequest(name, assignments=dict(enumerate(replicas)), configs=dict(configs))
        result = self._planner().create_topics([request])
        outcome = result.response[0]
        if outcome.error_code != errors.NONE:
            raise KafkaError(outcome.error_code, outcome.error_message or "")
        self._commit(result.records, f"create topic {name}")
        if self.store.networked:
            return TopicInfo(name, outcome.topic_id, [list(x) for x in replicas], dict(configs))
        return self.store.topics[name]

    def create_placed(self, plan: TopicInfo) -> TopicInfo:
        """The topic Admin checked and placed (its id still zero), created: networked, `plan`
        itself with its new id (it is the caller's no more); else the store's, once committed.
        QuorumController.create_placed_topic checks only what may have changed since Admin
        looked, and a refusal is raised as its KafkaError."""
        name = plan.name
        result = self._planner().create_placed_topic(name, plan.replicas, plan.configs)
        self._commit(result.records, f"create topic {name}")
        if self.store.networked:
            plan.topic_id = result.response
            return plan
        return self.store.topics[name]

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.store.topics.get(name)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        result = self._planner().delete_topics([name])
        code = result.response[name]
        if code != errors.NONE:
            raise KafkaError(code, f"Topic '{name}' cannot be deleted")
        self._commit(result.records)
        return info

    def add_partitions(self, name: str, new_replicas: list[list[int]]) -> TopicInfo:
        info = self.store.topics.get(name)
        if info is None:
            raise KafkaError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        count = info.partitions + len(new_replicas)
        result = self._planner().create_partitions(name, count, new_replicas)
        if result.response.error_code != errors.NONE:
            raise KafkaError(result.response.error_code, result.response.error_message or "")
        self._commit(result.records, f"add partitions to {name}")
        if self.store.networked:
            return TopicInfo(
                name,
                info.topic_id,
                info.replicas + [list(x) for x in new_replicas],
                dict(info.configs),
            )
        return self.store.topics[name]

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """The topic's dynamic configs become exactly `configs`."""
        self._set_configs(TOPIC_RESOURCE, name, configs)

    def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        """The dynamic configs of BROKER `resource` ("" for the cluster-wide default)."""
        self._set_configs(BROKER_RESOURCE, resource, configs)

    def _set_configs(self, resource_type: int, name: str, configs: Mapping[str, str]) -> None:
        result = self._planner().alter_configs([(resource_type, name, dict(configs))])
        _rtype, _name, code, message = result.response[0]
        if code != errors.NONE:
            raise KafkaError(code, message or "")
        self._commit(result.records)

    def alter_user_scram_credentials(
        self,
        deletions: Sequence[scram_credentials.Deletion],
        upsertions: Sequence[scram_credentials.Upsertion],
    ) -> list[scram_credentials.Result]:
        """AlterUserScramCredentials: the records of every accepted user in one commit."""
        records, results = scram_credentials.alter(self._planner().image, deletions, upsertions)
        if records:
            self._commit(records)
        return results

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """CreateAcls (controller/acls.py): None per binding stored (or already there), else
        its error; the new ACLs are appended in one commit (networked: wait for
        store.last_appended)."""
        result = acls.create_acls(self._planner().image, bindings, self.new_uuid)
        if result.records:
            self._commit(result.records, "create acls")
        return result.response

    def delete_acls(self, filters: Sequence[AclFilter]) -> list[list[AclBinding] | KafkaError]:
        """DeleteAcls: per filter the ACLs it removed, or its error; one commit."""
        result = acls.delete_acls(self._planner().image, filters)
        if result.records:
            self._commit(result.records, "delete acls")
        return result.response

    # -- client quotas ------------------------------------------------------------------------

    def alter_client_quotas(
        self, alterations: Sequence[client_quotas.Alteration], validate_only: bool
    ) -> list[client_quotas.Result]:
        """AlterClientQuotas: the records of every accepted entity in one commit (none when
        validate_only)."""
        records, results = client_quotas.alter(self._planner().image, alterations)
        if records and not validate_only:
            self._commit(records)
        return results

    # -- end of client quotas -----------------------------------------------------------------

    def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], int]:
        """ElectLeaders: an error code per partition (QuorumController.elect_leaders); the
        elections are appended in one commit (networked: wait for store.last_appended)."""
        result = self._planner().elect_leaders(election_type, partitions)
        if result.records:
            self._commit(result.records, "elect leaders")
        return result.response

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` producer ids; the first. Committed before it returns (one voter)."""
        quorum = self._planner()
        reg = quorum.image.brokers.get(self.node_id)
        epoch = -1 if reg is None else reg.epoch
        return self.allocate_producer_ids_for(self.node_id, epoch, count)

    def allocate_producer_ids_for(self, broker_id: int, broker_epoch: int, count: int) -> int:
        """A block of `count` ids for `broker_id` (AllocateProducerIds); the first. Networked:
        appended, the caller waits for the commit before handing it out."""
        result = self._planner().allocate_producer_ids(broker_id, broker_epoch, count)
        code, first, _count = result.response
        if code != errors.NONE:
            raise KafkaError(
                code, f"broker {broker_id} (epoch {broker_epoch}) cannot allocate producer ids"
            )
        self._commit(result.records)
        return first


def _names(partitions: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{topic}-{index}" for topic, index in partitions)


def _retire(path: str) -> None:
    """Rename the migrated JSON store out of the way, durably."""
    os.replace(path, path + MIGRATED_SUFFIX)
    fsync_dir(os.path.dirname(path) or ".")
