"""Requests of the data-plane simulation's clients to the coordinators (coordinator_host.py).

OffsetCommit and TxnOffsetCommit go as the group coordinator's own requests, and the answers are
the coordinators' own results (`PartitionErrors`, `OffsetFetchResult`, `ProducerIdAndEpoch`,
an error code); these records carry what Kafka's FindCoordinator, OffsetFetch, InitProducerId,
AddPartitionsToTxn and EndTxn carry that the simulation uses. Markers travel between brokers
as the protocol's WriteTxnMarkersRequest/Response, as the marker channel builds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP = 0
TRANSACTION = 1


@dataclass(frozen=True, slots=True)
class FindCoordinator:
    key: str
    key_type: int  # GROUP or TRANSACTION


@dataclass(frozen=True, slots=True)
class CoordinatorFound:
    error_code: int
    node_id: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class OffsetsRead:
    """An OffsetFetch answer (`OffsetFetchResult`), and whether the answering broker led the
    partition in the committed metadata's leader epoch when it answered: the simulation's
    knowledge, not the client's. A broker cut off from the controller still believes it leads
    and answers from what it has, as Kafka's does (a stale leader serves reads; no leases)."""

    result: Any
    current: bool


@dataclass(frozen=True, slots=True)
class InitProducerId:
    transactional_id: str
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class EndTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
