"""Builds a broker's sans-I/O cores toward the controller and the other brokers, each with the
driver that runs it, from the few pieces each needs (never the broker itself):

    core (what it decides)                    driver (what it owns)
    replication/isr_sender.IsrChangeSender    CoreDriver over a controller channel
    replication/fetcher_session.ReplicaFetchers  CoreDriver over a client to the leaders
    security/replication_quotas.ReplicationQuota the leader's and the fetchers' throttles
    node/lifecycle.BrokerLifecycleCore        runtime/lifecycle.BrokerLifecycle (a channel)
    node/forwarding.ForwardingCore            runtime/forwarding.Forwarder (a channel)
    coordinator/txn/markers.MarkerChannel     CoreDriver over the inter-broker links
    coordinator/txn/verifier.TxnVerifier      CoreDriver over the inter-broker links
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gregor.broker.cluster_member import ClusterMember
from gregor.broker.config import BrokerConfig
from gregor.broker.controller_apis import FORWARDED
from gregor.coordinator.txn.markers import LocalWriter, MarkerChannel
from gregor.coordinator.txn.verifier import TxnVerifier, VerifyingCoordinator
from gregor.metadata.cluster import ClusterView
from gregor.metadata.config_view import ConfigSource
from gregor.metadata.image import Endpoint, MetadataImage
from gregor.metadata.meta_properties import MetaProperties
from gregor.node.forwarding import ForwardingCore
from gregor.node.lifecycle import BrokerLifecycleCore, LifecycleConfig
from gregor.replication.fetcher_session import ReplicaFetchers
from gregor.replication.follower import FetcherConfig
from gregor.replication.hosting import PartitionHosting
from gregor.replication.isr_sender import IsrChangeSender
from gregor.replication.partition import ReplicaManager
from gregor.runtime.client import ClientSecurity, NetworkClient
from gregor.runtime.drivers import CoreDriver, controller_send, links_send, node_send
from gregor.runtime.forwarding import CHANNEL_TIMEOUT_MS, Forwarder
from gregor.runtime.inter_broker import InterBroker
from gregor.runtime.lifecycle import BrokerLifecycle, shut_down_this_process
from gregor.security.replication_quotas import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuota,
)
from gregor.storage.log_manager import LogManager

Clock = Callable[[], int]
ConfigValue = Callable[[str], Any]


@dataclass
class QuorumParts:
    """What a broker in a quorum runs toward the others (all None on a node of its own
    quorum, but the forwarder, which then forwards nothing)."""

    forwarder: Forwarder
    fetchers: CoreDriver | None = None
    isr_sender: CoreDriver | None = None
    links: InterBroker | None = None


def quorum_parts(
    member: ClusterMember | None,
    config: BrokerConfig,
    value: ConfigValue,
    meta: Mapping[str, MetaProperties],
    logs: LogManager,
    cluster: ClusterView,
    replicas: ReplicaManager,
    hosting: PartitionHosting,
    broker_epoch: Callable[[], int],
    clock: Clock,
) -> QuorumParts:
    """In a quorum: the broker's lifecycle, follower partitions fetching from their leaders,
    leaders sending their ISR changes to the active controller, admin writes forwarded there,
    and links to the other brokers for transaction markers and checks."""
    if member is None:
        return QuorumParts(forwarder(None, cluster.host, clock))
    member.lifecycle = broker_lifecycle(
        member, config, value, meta, logs, lambda: cluster.endpoints, clock
    )
    to_brokers = member.security.to_brokers if member.security is not None else None
    fetchers = replica_fetchers(
        member.node_id, value, replicas, broker_epoch, cluster.broker_endpoint, clock, to_brokers
    )
    sender = isr_sender(member, clock)
    replicas.on_isr_update = sender.core.submit
    hosting.on_followers = fetchers.core.apply
    client = NetworkClient(client_id=f"broker-{member.node_id}", security=to_brokers)
    links = InterBroker(
        member.node_id, lambda: member.store.image, client, listener=cluster.inter_broker_listener
    )
    return QuorumParts(forwarder(member, cluster.host, clock), fetchers, sender, links)


def isr_sender(member: ClusterMember, clock: Clock) -> CoreDriver:
    """The AlterPartition sender (started once the node has joined its quorum)."""
    node_id = member.node_id
    core = IsrChangeSender(node_id, lambda: member.broker_epoch)
    channel = member.controller_channel(f"broker-{node_id}-alter-partition")
    return CoreDriver(
        core, controller_send(channel), clock, name="alter-partition", close=channel.close
    )


def replica_fetchers(
    node_id: int,
    value: ConfigValue,
    replicas: ReplicaManager,
    broker_epoch: Callable[[], int],
    endpoint_of: Callable[[int], tuple[str, int] | None],
    clock: Clock,
    security: ClientSecurity | None = None,
) -> CoreDriver:
    """The replica fetchers, running: they fetch once partitions are applied to them."""
    config = FetcherConfig(
        replica_id=node_id,
        max_wait_ms=int(value("replica.fetch.wait.max.ms")),
        min_bytes=int(value("replica.fetch.min.bytes")),
        max_bytes=int(value("replica.fetch.response.max.bytes")),
        partition_max_bytes=int(value("replica.fetch.max.bytes")),
        backoff_ms=int(value("replica.fetch.backoff.ms")),
    )
    core = ReplicaFetchers(
        config,
        partition_of=replicas.get,
        broker_epoch=broker_epoch,
        endpoint_of=endpoint_of,
        socket_timeout_ms=int(value("replica.socket.timeout.ms")),
        quota=replicas.follower_quota,
        stamp=replicas.stamp,
    )
    client = NetworkClient(
        client_id=f"replica-fetcher-{node_id}",
        connect_timeout_ms=2000,
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=1000,
        security=security,
    )
    driver = CoreDriver(core, node_send(client), clock, name="replica-fetchers", close=client.close)
    driver.start()
    return driver


def replication_quotas(
    replicas: ReplicaManager,
    node_id: int,
    value: ConfigValue,
    store: ConfigSource,
) -> None:
    """The leader and follower replication throttles on the replica manager: their rates from
    the dynamic broker configs, their replicas from the topics' configs, both read when used."""
    num = int(value("replication.quota.window.num"))
    window_ms = int(value("replication.quota.window.size.seconds")) * 1000

    def configs_of(topic: str) -> Mapping[str, str] | None:
        info = store.topics.get(topic)
        return info.configs if info is not None else None

    replicas.leader_quota = ReplicationQuota(
        node_id, LEADER_REPLICAS, lambda: int(value(LEADER_RATE)), configs_of, num, window_ms
    )
    replicas.follower_quota = ReplicationQuota(
        node_id, FOLLOWER_REPLICAS, lambda: int(value(FOLLOWER_RATE)), configs_of, num, window_ms
    )


def broker_lifecycle(
    member: ClusterMember,
    config: BrokerConfig,
    value: ConfigValue,
    meta: Mapping[str, MetaProperties],
    logs: LogManager,
    advertised: Callable[[], Sequence[Endpoint]],
    clock: Clock,
) -> BrokerLifecycle:
    """Registration, heartbeats, leaving and producer-id blocks toward the active controller."""
    dir_ids = {os.path.abspath(d): m.directory_id for d, m in meta.items()}

    def offline_dirs() -> dict[str, uuid.UUID | None]:
        return {d: dir_ids.get(os.path.abspath(d)) for d in sorted(logs.offline_dirs)}

    channel = member.controller_channel(f"broker-{member.node_id}")
    lifecycle_config = LifecycleConfig(
        node_id=member.node_id,
        heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
        dir_failure_timeout_ms=int(value("log.dir.failure.timeout.ms")),
        rack=config.get_str("broker.rack"),
        log_dir_ids=tuple(m.directory_id for m in meta.values() if m.directory_id is not None),
        incarnation_id=uuid.uuid4(),
    )
    core = BrokerLifecycleCore(
        lifecycle_config,
        member.store,
        controller_id=channel.controller_id,
        advertised=advertised,
        offline_dirs=offline_dirs,
        on_fatal=shut_down_this_process,
    )
    lifecycle = BrokerLifecycle(
        core,
        channel,
        clock,
        controlled_shutdown=lambda: bool(value("controlled.shutdown.enable")),
    )
    logs.dir_failure_listeners.append(lifecycle.on_dir_failure)
    return lifecycle


def forwarder(member: ClusterMember | None, host: str, clock: Clock) -> Forwarder:
    """Forwarding to the active controller (none on a node of its own quorum)."""
    if member is None:
        return Forwarder(None, None, clock)
    store = member.store
    core = ForwardingCore(
        FORWARDED, is_active=store.is_active, node_name=f"broker-{member.node_id}", host=host
    )
    channel = member.controller_channel(
        f"broker-{member.node_id}-forwarding", request_timeout_ms=CHANNEL_TIMEOUT_MS
    )
    return Forwarder(core, channel, clock)


def marker_sender(
    node_id: int,
    image: Callable[[], MetadataImage],
    write_local: LocalWriter,
    links: InterBroker | None,
    clock: Clock,
) -> MarkerChannel:
    """The transaction coordinator's marker writer; its sends run on `links` (closing them
    ends the sends in flight: their markers answer NETWORK_EXCEPTION)."""
    if links is None:
        return MarkerChannel(node_id, image, write_local, None)
    core = MarkerChannel(node_id, image, write_local, links.reachable)
    CoreDriver(core, links_send(links), clock, name="txn-markers", spawn=links.spawn).start()
    return core


def txn_verifier(
    node_id: int,
    transactions: VerifyingCoordinator,
    image: Callable[[], MetadataImage],
    links: InterBroker | None,
    clock: Clock,
) -> TxnVerifier:
    """The produce path's transaction check; its AddPartitionsToTxn requests run on `links`
    (closing them ends the requests in flight: their batches answer NOT_ENOUGH_REPLICAS)."""
    if links is None:
        return TxnVerifier(node_id, transactions, image, None)
    core = TxnVerifier(node_id, transactions, image, links.reachable)
    CoreDriver(core, links_send(links), clock, name="txn-verifier", spawn=links.spawn).start()
    return core
