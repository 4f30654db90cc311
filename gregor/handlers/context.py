"""What a handler gets: the request's context and the broker's services.

Handlers only translate between the wire and the domain packages; everything they call is
reachable from `RequestContext.broker`, whose shape `BrokerServices` states (the broker package
provides the implementation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gregor.controller.admin import Admin
from gregor.controller.producer_ids import ProducerIdManager
from gregor.coordinator.group.pending import Pending
from gregor.coordinator.runtime import GroupCoordinator
from gregor.coordinator.txn.runtime import TransactionCoordinator
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.store import TopicInfo
from gregor.protocol.headers import RequestHeader
from gregor.replication.partition import ReplicaManager
from gregor.replication.purgatory import DelayedOperationPurgatory
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


class BrokerServices(Protocol):
    node_id: int
    host: str
    port: int
    static_config: Mapping[str, str]
    store: RaftMetadataStore
    admin: Admin
    replicas: ReplicaManager
    logs: LogManager
    producer_ids: ProducerIdManager
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    txn_verifier: TransactionVerifier
    purgatory: DelayedOperationPurgatory  # delayed produces, fetches and metadata writes

    @property
    def cluster_id(self) -> str: ...

    def now_ms(self) -> int: ...

    def config_value(self, key: str) -> Any:
        """A broker config, typed, after dynamic and static overrides."""

    def apply_metadata(self) -> None:
        """Bring hosted partitions in line with the metadata store after a change."""

    def maybe_auto_create(self, topic: str) -> TopicInfo | None:
        """Create `topic` with the defaults if auto.create.topics.enable allows; else None."""

    def describe_topic_config(self, topic: str) -> list[Any]: ...

    def cluster_brokers(self) -> list[tuple[int, str, int, str | None]]:
        """(node id, host, port, rack) of every broker clients may use: this one with one
        voter; every registered unfenced broker's advertised endpoint in a networked quorum."""

    def controller_id(self) -> int:
        """The node id of the active controller (-1 when there is none)."""


@dataclass
class RequestContext:
    broker: BrokerServices
    header: RequestHeader
    peer: str
    connection: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> int:
        return self.header.request_api_version
