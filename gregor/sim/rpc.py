"""Requests and responses of the data-plane simulation, and the host they travel between.

What the broker's cores send travels as they make it: the protocol's BrokerRegistration,
BrokerHeartbeat, AllocateProducerIds, AlterPartition and Fetch requests and responses
(broker_host.py, core_driver.py); the rest are small records of what Kafka's Produce, Fetch
(consumer), Metadata and CreateTopics carry that the simulation uses, and the metadata log
a broker reads from a controller.

A `SimHost` is one node id on the simulated network: it sends requests with a timeout and a
callback (None when no answer came in time), and answers requests sent to it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gregor.sim.data_invariants import DataChecker
from gregor.sim.scenarios import ReplicationConfig


@dataclass(frozen=True, slots=True)
class Request:
    correlation_id: int
    body: Any


@dataclass(frozen=True, slots=True)
class Response:
    correlation_id: int
    body: Any


# -- to the controller ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NotController:
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class CreateTopics:
    topics: tuple[Any, ...]  # controller TopicRequest


@dataclass(frozen=True, slots=True)
class MetadataFetch:
    """A broker's read of the committed metadata log from `offset` (as an observer's Fetch)."""

    offset: int


@dataclass(frozen=True, slots=True)
class MetadataEntries:
    entries: tuple[tuple[Any, int, int], ...]  # (record, offset, epoch)
    high_watermark: int  # the next offset to be committed, as the answering node knows it
    from_leader: bool  # the answering node leads the quorum


# -- to a broker ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Produce:
    topic: str
    partition: int
    records: bytes  # one batch
    acks: int = -1


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: int
    base_offset: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerFetch:
    topic: str
    partition: int
    offset: int
    read_committed: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerRecords:
    error_code: int
    records: bytes = b""
    high_watermark: int = -1
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (producer id, first offset)


@dataclass(frozen=True, slots=True)
class WriteTxnMarker:
    """One partition of WriteTxnMarkers: end `producer_id`'s transaction there."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    committed: bool


@dataclass(frozen=True, slots=True)
class Metadata:
    """Which broker leads each partition, as the answering broker's image says."""


@dataclass(frozen=True, slots=True)
class MetadataResult:
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)


Callback = Callable[[Any], None]


class SimContext(Protocol):
    """What a host uses of the simulation it runs in (replication.py's Simulation)."""

    now: int
    rng: random.Random
    checker: DataChecker
    config: ReplicationConfig
    broker_ids: list[int]
    controller_ids: list[int]
    partitions: list[tuple[str, int]]
    clients_on: bool
    flush_interval_ms: int

    @property
    def wall_ms(self) -> int: ...

    def timer(self, host: SimHost, at: int, name: str, *args: Any) -> None: ...

    def send(self, host: SimHost, dst: int, message: Any) -> None: ...

    def record(self, *event: Any) -> None: ...

    def count(self, name: str, n: int = 1) -> None: ...


class HostClock:
    """A host's clock as the product's layers take it (`gregor.clock.Clock`): wall time with
    the host's own jumps, monotonic time the simulation's. Nothing sleeps in a simulation."""

    def __init__(self, host: SimHost) -> None:
        self.host = host

    def now_ms(self) -> int:
        return self.host.now_ms()

    def monotonic_ms(self) -> int:
        return int(self.host.sim.now)

    def monotonic_s(self) -> float:
        return self.host.sim.now / 1000.0

    def sleep(self, seconds: float) -> None:
        raise AssertionError("nothing sleeps in the simulation")


class SimHost:
    """A node id on the network: requests out (with a timeout), requests in, timers."""

    def __init__(self, sim: SimContext, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.incarnation = 0
        self.up = False
        self.clock_offset_ms = 0
        self.clock = HostClock(self)
        self._correlation = 0
        self._pending: dict[int, Callback] = {}

    def now_ms(self) -> int:
        """This host's clock: the simulated time plus its own jumps."""
        return self.sim.wall_ms + self.clock_offset_ms

    def request(self, dst: int, body: Any, on_answer: Callback, timeout_ms: int) -> None:
        self._correlation += 1
        corr = self._correlation
        self._pending[corr] = on_answer
        self.sim.send(self, dst, Request(corr, body))
        self.sim.timer(self, self.sim.now + timeout_ms, "timeout", corr)

    def answer(self, dst: int, correlation_id: int, body: Any) -> None:
        self.sim.send(self, dst, Response(correlation_id, body))

    def waiting_for(self, correlation_id: int) -> bool:
        return correlation_id in self._pending

    def stop(self) -> None:
        """Forget every request out: their answers and timeouts go to a dead incarnation."""
        self._pending.clear()

    def receive(self, src: int, message: Any) -> None:
        if isinstance(message, Response):
            callback = self._pending.pop(message.correlation_id, None)
            if callback is not None:
                callback(message.body)
        elif isinstance(message, Request):
            self.on_request(src, message.correlation_id, message.body)
        else:
            self.on_message(src, message)

    def on_timer(self, name: str, args: tuple[Any, ...]) -> None:
        if name == "timeout":
            callback = self._pending.pop(args[0], None)
            if callback is not None:
                callback(None)
        else:
            getattr(self, "timer_" + name)(*args)

    def live_timer(self, name: str, args: tuple[Any, ...]) -> bool:
        """False for a timer that would do nothing (not counted as an event)."""
        return True

    def on_request(self, src: int, correlation_id: int, body: Any) -> None:
        raise NotImplementedError

    def on_message(self, src: int, message: Any) -> None:
        raise NotImplementedError
