"""Questions about the cluster, answered from the metadata image alone: which brokers clients may
use and where, where another broker serves brokers, whether a broker may be in an ISR, and which
node Metadata names as the controller.

Pure functions of the image (and of what the caller knows of itself): no store, no clock, no
I/O, so the broker, its drivers and the simulation ask the same questions the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from gregor.metadata.image import Endpoint, MetadataImage

DEFAULT_LISTENER = "PLAINTEXT"


class BrokerNode(NamedTuple):
    """A broker as Metadata and DescribeCluster list it."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class BrokerLiveness:
    """What the metadata says of a broker, for ISR decisions."""

    epoch: int  # its registration's broker epoch; -1 when not known
    eligible: bool  # registered, unfenced and not in controlled shutdown


def active_broker_ids(image: MetadataImage) -> list[int]:
    """The brokers new partitions may be placed on: registered and unfenced."""
    return sorted(b for b, reg in image.brokers.items() if not reg.fenced)


def _endpoint(listeners: tuple[Endpoint, ...] | list[Endpoint], name: str) -> Endpoint:
    return next((e for e in listeners if e.name == name), listeners[0])


def client_brokers(
    image: MetadataImage, listener: str = DEFAULT_LISTENER, *, include_fenced: bool = False
) -> list[BrokerNode]:
    """Every registered, unfenced broker with a listener, at its endpoint on `listener` (its
    first listener when it has none of that name), in node id order; the fenced ones too with
    `include_fenced` (DescribeCluster v2)."""
    out = []
    for broker_id, reg in sorted(image.brokers.items()):
        if (reg.fenced and not include_fenced) or not reg.listeners:
            continue
        endpoint = _endpoint(reg.listeners, listener)
        out.append(BrokerNode(broker_id, endpoint.host, endpoint.port, reg.rack))
    return out


def fenced_broker_ids(image: MetadataImage) -> set[int]:
    """The registered brokers that are fenced: not heartbeating, or not yet caught up."""
    return {b for b, reg in image.brokers.items() if reg.fenced}


def broker_endpoint(
    image: MetadataImage, broker_id: int, listener: str = DEFAULT_LISTENER
) -> tuple[str, int] | None:
    """Where `broker_id` serves other brokers (its `listener`, as registered); None when it is
    not registered or names no listener."""
    reg = image.brokers.get(broker_id)
    if reg is None or not reg.listeners:
        return None
    endpoint = _endpoint(reg.listeners, listener)
    return endpoint.host, endpoint.port


def liveness(image: MetadataImage, broker_id: int) -> BrokerLiveness:
    reg = image.brokers.get(broker_id)
    if reg is None:
        return BrokerLiveness(-1, False)
    return BrokerLiveness(reg.epoch, not reg.fenced and not reg.in_controlled_shutdown)


def registered_epoch(image: MetadataImage, broker_id: int) -> int:
    """The broker epoch of `broker_id`'s registration; -1 when it has none."""
    reg = image.brokers.get(broker_id)
    return -1 if reg is None else reg.epoch


def controller_id(alive: list[int], asked: int, rng: random.Random) -> int:
    """What Metadata and DescribeCluster name as the controller in a quorum: a live broker, as
    Kafka's KRaft brokers answer (clients cannot reach the controller listener; any broker
    forwards admin writes to the active controller). The broker asked when it is listed, since
    the client just reached it, else a random one. Kafka picks at random each time; a stable
    answer keeps an admin client from chasing a different broker on every metadata refresh,
    some of which another node's lagging view may not list yet."""
    if asked in alive:
        return asked
    return rng.choice(alive) if alive else -1


class ImageSource(Protocol):
    @property
    def image(self) -> MetadataImage: ...


class ClusterView:
    """The cluster as this node tells clients and its own drivers about it: the functions above
    over the store's current image, with what the node knows of itself. A node that is the only
    voter of its own quorum lists itself alone (its registration may lag its listener)."""

    def __init__(
        self,
        store: ImageSource,
        node_id: int,
        *,
        quorum: bool,
        host: str,
        port: int,
        rack: str | None = None,
        inter_broker_listener: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.quorum = quorum
        self.host, self.port = host, port  # advertised; the port is set once bound
        self.rack = rack
        self.inter_broker_listener = inter_broker_listener or DEFAULT_LISTENER
        self.rng = rng or random.Random()

    def brokers(self, *, include_fenced: bool = False) -> list[BrokerNode]:
        if not self.quorum:
            return [BrokerNode(self.node_id, self.host, self.port, self.rack)]
        return client_brokers(self.store.image, include_fenced=include_fenced)

    def fenced_broker_ids(self) -> set[int]:
        return fenced_broker_ids(self.store.image) if self.quorum else set()

    def controller_id(self) -> int:
        if not self.quorum:
            return self.node_id
        return controller_id([b.node_id for b in self.brokers()], self.node_id, self.rng)

    def active_broker_ids(self) -> list[int]:
        if not self.quorum:
            return [self.node_id]
        return active_broker_ids(self.store.image)

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return broker_endpoint(self.store.image, broker_id, self.inter_broker_listener)

    def liveness(self, broker_id: int) -> BrokerLiveness:
        return liveness(self.store.image, broker_id)
