"""What a broker node is made of, built in order and nothing started: its client listeners (bound,
so the registration names the real ports), the metadata (metadata_node.py), the log manager, the
replica manager and the partitions it hosts (replication/hosting.py), the purgatory, the parts
toward the controller and the other brokers (cores.py), the admin, the coordinators, and the one
`Services` object handlers get (handlers/context.py).

    node = BrokerNode(config, clock)      # BrokerServer (broker.py) is one, and runs it

It decides nothing itself; `BrokerServer` adds the drivers that run it, and starts and stops it.
"""

from __future__ import annotations

from typing import Any

from gregor.broker import cores
from gregor.broker.auto_create import auto_creator
from gregor.broker.client_listeners import ClientListeners
from gregor.broker.config import BrokerConfig
from gregor.broker.metadata_node import open_metadata
from gregor.clock import Clock
from gregor.controller.admin import Admin
from gregor.controller.producer_ids import ProducerIdManager
from gregor.coordinator.runtime import GroupCoordinator
from gregor.coordinator.txn.runtime import TransactionCoordinator
from gregor.handlers.context import Services
from gregor.handlers.txn_markers import write_marker
from gregor.metadata.cluster import ClusterView, registered_epoch
from gregor.metadata.config_view import BrokerConfigView
from gregor.replication.fetch_sessions import FetchSessionCache
from gregor.replication.hosting import PartitionHosting
from gregor.replication.partition import ReplicaManager
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.runtime.log_io import (
    DeferredSyncs,
    DeferredWrites,
    flush_after_roll,
    remove_dir_in_background,
)
from gregor.security.authorizer import live_authorizer
from gregor.storage.log_manager import LogManager


class BrokerNode:
    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        membership = config.membership()  # a bad combination of roles is refused before anything
        if not membership.is_broker:
            raise ValueError("a controller-only node runs as a ControllerServer")
        self.config, self.node_id, self.clock = config, config.node_id, clock
        # Each client listener (client_listeners.py) with its TLS context and SASL settings (a bad
        # one stops the start here); port 0 bound now, so the registration names the real ports.
        self.listeners = ClientListeners(config)
        self.listen_host, self.listen_port = self.listeners.first.spec.host, self.listeners.first.port  # fmt: skip
        endpoints = self.listeners.endpoints()
        node = open_metadata(config, membership, clock, endpoints)
        self.store, self.controller, self.member = node.store, node.controller, node.member
        self.listeners.bind_node(self.store.scram_credential, clock.now_ms)
        self.meta_properties = node.meta_properties
        self.cluster = ClusterView(
            self.store, self.node_id, quorum=membership.networked, endpoints=endpoints,
            rack=config.get_str("broker.rack"),
            inter_broker_listener=config.inter_broker_listener_config().name,
        )  # fmt: skip
        self.config_view = BrokerConfigView(self.store, self.node_id, config.values)
        self.logs = LogManager(
            config.log_dirs, config_for=self.config_view.log_config_for, clock=clock
        )
        self.logs.roll_flusher = flush_after_roll
        self.logs.deferred_sync = self.epoch_syncs = DeferredSyncs()
        self.logs.write_later = DeferredWrites()
        self.logs.dir_remover = remove_dir_in_background
        self.replicas = ReplicaManager(
            self.node_id, self.logs, liveness=self.cluster.liveness,
            local_broker_epoch=self._broker_epoch,
            replica_lag_time_max_ms=int(self.config_value("replica.lag.time.max.ms")),
        )  # fmt: skip
        cores.replication_quotas(self.replicas, self.node_id, self.config_value, self.store)
        self.hosting = PartitionHosting(
            self.node_id, self.store, self.replicas, self.logs, self.config_view, clock
        )
        self.hosting.ready = self.member is None  # in a quorum: once the logs are open
        if self.member is not None:  # and once registered and caught up to the registration
            member, store = self.member, self.store
            self.hosting.registered = lambda: 0 <= member.broker_epoch <= store.image.offset
        # delayed produces, fetches and metadata writes, expired by the driver's timer
        self.purgatory = DelayedOperationPurgatory("broker")
        parts = cores.quorum_parts(
            self.member, config, self.config_value, self.meta_properties, self.logs, self.cluster,
            self.replicas, self.hosting, self._broker_epoch, self.now_ms,
        )  # fmt: skip
        self.forwarder, self.fetchers, self.isr_sender = (
            parts.forwarder,
            parts.fetchers,
            parts.isr_sender,
        )
        self.links = parts.links
        ids = self.cluster.active_broker_ids if self.member is not None else [self.node_id]
        self.admin = Admin(self.store, self.controller, ids, config.values, self.node_id)
        if self.member is not None:  # topics made off the controller: a CreateTopics sent there
            self.admin.forward_create = self.forwarder.create_topic_later
        self.services = self._build_services()
        if self.member is not None:
            self.member.serve_admin(self.services)

    def _build_services(self) -> Services:
        apply, value = self.hosting.apply, self.config_value
        # a cluster node gets its producer-id blocks from the active controller
        producer_ids = ProducerIdManager(self.member or self.controller)
        groups = GroupCoordinator(self.node_id, self.store, self.replicas, self.admin, value, apply)
        self.markers = cores.marker_sender(
            self.node_id, lambda: self.store.image, self._write_marker_here, self.links, self.now_ms
        )
        transactions = TransactionCoordinator(
            self.node_id, self.store, self.replicas, self.admin, value, apply,
            producer_ids.next_id, self.markers.write_markers,
        )  # fmt: skip
        self.hosting.on_applied += [groups.on_metadata, transactions.on_metadata]
        return Services(
            self.node_id, self.clock, self.config_view, self.store, self.cluster, self.admin,
            self.replicas, self.logs, producer_ids, groups, transactions,
            cores.txn_verifier(self.node_id, transactions, lambda: self.store.image, self.links,
                               self.now_ms), self.purgatory, apply,
            auto_creator(self.config_view, self.admin, apply),
            when_hosted=self.hosting.when_hosted,
            authorizer=live_authorizer(self.config.values, lambda: self.store.image.acls),
            fetch_sessions=FetchSessionCache(
                value("max.incremental.fetch.session.cache.slots"),
                value("min.incremental.fetch.session.eviction.ms"),
            ),
        )  # fmt: skip

    def _write_marker_here(self, topic: str, index: int, *marker: Any) -> int | Pending:
        """A marker to a partition hosted here (one in `__consumer_offsets` also settles the
        transaction's offset commits in that partition)."""
        groups = self.services.groups
        now = self.now_ms()
        return write_marker(self.replicas, groups, self.purgatory, now, topic, index, *marker)

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def config_value(self, key: str) -> Any:
        return self.config_view.value(key)

    def _broker_epoch(self) -> int:
        if self.member is not None:
            return self.member.broker_epoch
        return registered_epoch(self.store.image, self.node_id)
