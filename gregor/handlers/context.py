"""What a handler gets: the request's context and the broker's services.

Handlers only translate between the wire and the domain packages; everything they call is
reachable from `RequestContext.services`: the node's `Services`, never the broker itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gregor.clock import Clock
from gregor.controller.admin import Admin
from gregor.controller.producer_ids import ProducerIdManager
from gregor.coordinator.runtime import GroupCoordinator
from gregor.coordinator.txn.runtime import TransactionCoordinator
from gregor.handlers.metadata_partitions import PartitionArrays
from gregor.metadata.cluster import BrokerNode, ClusterView
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.store import TopicInfo
from gregor.metrics.stats import BrokerTopicStats
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.headers import RequestHeader
from gregor.replication.fetch_sessions import FetchSessionCache
from gregor.replication.partition import ReplicaManager
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.security.acls import CLUSTER, CLUSTER_NAME, TOPIC
from gregor.security.authorizer import LiveAuthorizer, all_operations
from gregor.security.principal import principal_of
from gregor.storage.log_manager import LogManager


class TransactionVerifier(Protocol):
    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        abortable_supported: bool = False,
    ) -> int | Pending:
        """May this producer's transactional batch open a transaction in the partition? The
        Produce error code (0: yes), or a Pending of it when the coordinator is elsewhere."""


@dataclass(frozen=True)
class Services:
    """Everything a handler (and a driver) may use of its node, built once by the composition
    root (broker/broker_node.py). A controller-only node builds one too, for the admin requests its
    controller listener serves; there the partition services are absent (None), and those
    handlers never use them."""

    node_id: int
    clock: Clock
    config: BrokerConfigView
    store: RaftMetadataStore
    cluster: ClusterView
    admin: Admin
    replicas: ReplicaManager
    logs: LogManager
    producer_ids: ProducerIdManager
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    txn_verifier: TransactionVerifier
    purgatory: DelayedOperationPurgatory  # delayed produces, fetches and metadata writes
    # Bring hosted partitions in line with the metadata store after a change.
    apply_metadata: Callable[[], None]
    # Create a topic with the defaults if auto.create.topics.enable allows; else None.
    maybe_auto_create: Callable[[str], TopicInfo | None]
    # when_hosted(topics, then): True if this node hosts every partition of `topics` it is a
    # replica of; else False, and then() once it does (replication/hosting.py). None: always.
    when_hosted: Callable[[Collection[str], Callable[[], None]], bool] | None = None
    # ACLs (authorizer.class.name); None: no authorizer, every request is allowed.
    authorizer: LiveAuthorizer | None = None
    # Kafka's BrokerTopicMetrics, counted by produce and fetch (gregor/metrics/)
    topic_stats: BrokerTopicStats = field(default_factory=BrokerTopicStats)
    # incremental fetch sessions (KIP-227), shared by every listener's Fetch
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    # Metadata's partition arrays, encoded and kept per topic (handlers/metadata_partitions.py)
    partition_arrays: PartitionArrays = field(default_factory=PartitionArrays)

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    @property
    def static_config(self) -> Mapping[str, str]:
        return self.config.static

    @property
    def host(self) -> str:
        return self.cluster.host

    @property
    def port(self) -> int:
        return self.cluster.port

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        """Where this broker is advertised on `listener` (None: its first client listener)."""
        return self.cluster.endpoint(listener)

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def config_value(self, key: str) -> Any:
        """A broker config, typed, after dynamic and static overrides."""
        return self.config.value(key)

    def cluster_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        """Every broker clients of `listener` may use: this one alone with one voter; every
        registered unfenced broker's advertised endpoint on it in a networked quorum (one
        without that listener is left out)."""
        return self.cluster.brokers(listener)

    def controller_id(self, listener: str | None = None) -> int:
        """The node id Metadata names as the controller (-1 when there is none), one that
        clients of `listener` can reach."""
        return self.cluster.controller_id(listener)


# The connection-state key of a forwarded request's client address (an Envelope's).
CLIENT_HOST = "client_host"
# The connection-state key of the client listener a connection came in on (its name).
LISTENER_NAME = "listener_name"


@dataclass
class RequestContext:
    services: Services
    header: RequestHeader
    peer: str
    connection: dict[str, Any] = field(default_factory=dict)
    # The request's api version (its header's): read many times by every handler.
    version: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.version = self.header.request_api_version

    # -- authorization: one call per check, free when no authorizer is configured -------------

    @property
    def listener_name(self) -> str | None:
        """The client listener this request came in on; None on no client listener (the
        controller listener): answers then name each broker's first listener."""
        name = self.connection.get(LISTENER_NAME)
        return None if name is None else str(name)

    @property
    def client_host(self) -> str:
        """The client's address without its port (an ACL's host); a forwarded request's is
        the one its Envelope names (CLIENT_HOST in the connection state)."""
        host = self.connection.get(CLIENT_HOST)
        if host is None:
            host = self.peer.rsplit(":", 1)[0].strip("[]")
        return str(host)

    def authorize(self, operation: int, resource_type: int, name: str) -> bool:
        """May this request's principal, from its host, do `operation` on the resource?"""
        authz = self.services.authorizer
        if authz is None:
            return True
        principal = str(principal_of(self.connection))
        return authz.authorize(principal, self.client_host, operation, resource_type, name)

    def check_topic(self, operation: int, name: str) -> None:
        """KafkaError TOPIC_AUTHORIZATION_FAILED unless `authorize(operation, TOPIC, name)`."""
        if not self.authorize(operation, TOPIC, name):
            raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, f"Topic {name} is not authorized.")

    def authorize_cluster(self, operation: int) -> bool:
        return self.authorize(operation, CLUSTER, CLUSTER_NAME)

    def authorized_operations(self, resource_type: int, name: str) -> int:
        """Kafka's `authorized_operations` bit field for the resource."""
        authz = self.services.authorizer
        if authz is None:
            return all_operations(resource_type)
        principal = str(principal_of(self.connection))
        return authz.current().authorized_operations(
            principal, self.client_host, resource_type, name
        )
