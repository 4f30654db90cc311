"""What the transaction coordinator is asked and what it answers, in its own words (handlers
translate to and from the protocol messages)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gregor.coordinator.txn import codes

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """Write COMMIT or ABORT markers of a producer to these partitions (an effect of the shard;
    the runtime adds its coordinator epoch and hands it to the broker's marker writer)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: tuple[TopicPartition, ...]


@dataclass(slots=True)
class DescribedTransaction:
    """An error leaves the rest at 0 and "", as Kafka's response does."""

    error: int
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    partitions: list[tuple[str, list[int]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(slots=True)
class ListedTransactions:
    error: int = codes.NONE
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[ListedTransaction] = field(default_factory=list)
