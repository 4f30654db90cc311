"""Questions about the cluster, answered from the metadata image alone: which brokers clients may
use and where, where another broker serves brokers, whether a broker may be in an ISR, and which
node Metadata names as the controller.

Pure functions of the image (and of what the caller knows of itself): no store, no clock, no
I/O, so the broker, its drivers and the simulation ask the same questions the same way
(`ClusterView` over them logs, once, a broker left out for want of a listener).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from gregor.metadata.image import Endpoint, MetadataImage

log = logging.getLogger("gregor.cluster")

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


def _endpoint(listeners: tuple[Endpoint, ...], name: str | None) -> Endpoint | None:
    """The endpoint of listener `name`; None if there is none. `name` None (a request that came
    in on no client listener, e.g. the controller listener): PLAINTEXT, else the first."""
    if name is None:
        return next((e for e in listeners if e.name == DEFAULT_LISTENER), listeners[0])
    for e in listeners:  # (a replica fetcher asks before each Fetch)
        if e.name == name:
            return e
    return None


def client_brokers(
    image: MetadataImage, listener: str | None = None, *, include_fenced: bool = False
) -> list[BrokerNode]:
    """Every registered, unfenced broker at its endpoint on `listener`, in node id order; a
    broker without that listener is left out, as Kafka's getAliveBrokerNodes leaves it; the
    fenced ones too with `include_fenced` (DescribeCluster v2)."""
    out = []
    for broker_id, reg in sorted(image.brokers.items()):
        if (reg.fenced and not include_fenced) or not reg.listeners:
            continue
        endpoint = _endpoint(reg.listeners, listener)
        if endpoint is not None:
            out.append(BrokerNode(broker_id, endpoint.host, endpoint.port, reg.rack))
    return out


def fenced_broker_ids(image: MetadataImage) -> set[int]:
    """The registered brokers that are fenced: not heartbeating, or not yet caught up."""
    return {b for b, reg in image.brokers.items() if reg.fenced}


def lacking_listener(image: MetadataImage, listener: str) -> list[int]:
    """The registered, unfenced brokers that have no listener of that name."""
    return sorted(
        b
        for b, reg in image.brokers.items()
        if not reg.fenced and all(e.name != listener for e in reg.listeners)
    )


def broker_endpoint(
    image: MetadataImage, broker_id: int, listener: str | None = DEFAULT_LISTENER
) -> tuple[str, int] | None:
    """Where `broker_id` serves `listener` (as registered); None when it is not registered or
    has no such listener."""
    reg = image.brokers.get(broker_id)
    if reg is None or not reg.listeners:
        return None
    endpoint = _endpoint(reg.listeners, listener)
    return None if endpoint is None else (endpoint.host, endpoint.port)


def alive_broker_endpoint(
    image: MetadataImage, broker_id: int, listener: str | None
) -> tuple[str, int] | None:
    """`broker_endpoint` of an unfenced broker (Kafka's getAliveBrokerNode); None otherwise."""
    reg = image.brokers.get(broker_id)
    if reg is None or reg.fenced:
        return None
    return broker_endpoint(image, broker_id, listener)


def liveness(image: MetadataImage, broker_id: int) -> BrokerLiveness:
    reg = image.brokers.get(broker_id)
    if reg is None:
        return BrokerLiveness(-1, False)
    return BrokerLiveness(reg.epoch, not reg.fenced and not reg.in_controlled_shutdown)


def registered_epoch(image: MetadataImage, broker_id: int) -> int:
    """The broker epoch of `broker_id`'s registration; -1 when it has none."""
    reg = image.brokers.get(broker_id)
    return -1 if reg is None else reg.epoch


def controller_id(
    alive: list[int], asked: int, rng: random.Random, active: int | None = None
) -> int:
    """What Metadata and DescribeCluster name as the controller in a quorum: a live broker, as
    Kafka's KRaft brokers answer (clients cannot reach the controller listener; any broker
    forwards admin writes to the active controller). The active controller when it is itself
    a live broker clients of the listener reach (a combined node): its admin writes then need
    no forwarding hop. Else the broker asked when it is listed, since the client just reached
    it, else a random one. Kafka picks at random each time; a stable answer keeps an admin
    client from chasing a different broker on every metadata refresh, some of which another
    node's lagging view may not list yet."""
    if active is not None and active in alive:
        return active
    if asked in alive:
        return asked
    return rng.choice(alive) if alive else -1


class ImageSource(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    @property
    def leader_id(self) -> int | None:
        """The active controller as this node knows it; None while none is known."""
        ...


class ClusterView:
    """The cluster as this node tells clients and its own drivers about it: the functions above
    over the store's current image, with what the node knows of itself. A node that is the only
    voter of its own quorum lists itself alone (its registration may lag its listener).

    Answers to clients name each broker at its endpoint on the listener the request came in on
    (`listener`; None: the first of each broker's); brokers talk over the inter-broker one."""

    def __init__(
        self,
        store: ImageSource,
        node_id: int,
        *,
        quorum: bool,
        host: str = "",
        port: int = 0,
        rack: str | None = None,
        inter_broker_listener: str | None = None,
        rng: random.Random | None = None,
        endpoints: Sequence[Endpoint] = (),
    ) -> None:
        """`endpoints`: this node's advertised client listeners, the first the default; without
        them, one PLAINTEXT listener at host:port."""
        self.store = store
        self.node_id = node_id
        self.quorum = quorum
        self.endpoints = tuple(endpoints) or (Endpoint(DEFAULT_LISTENER, host, port, 0),)
        self.rack = rack
        self.inter_broker_listener = inter_broker_listener or DEFAULT_LISTENER
        self.rng = rng or random.Random()
        self._told_lacking: set[tuple[int, str]] = set()

    @property
    def host(self) -> str:
        return self.endpoints[0].host

    @property
    def port(self) -> int:
        return self.endpoints[0].port

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        """Where this node is advertised on `listener` (None: its first client listener)."""
        found = _endpoint(self.endpoints, listener)
        return None if found is None else (found.host, found.port)

    def brokers(
        self, listener: str | None = None, *, include_fenced: bool = False
    ) -> list[BrokerNode]:
        if not self.quorum:
            mine = self.endpoint(listener)
            return [] if mine is None else [BrokerNode(self.node_id, *mine, self.rack)]
        image = self.store.image
        if listener is not None:
            self._log_lacking(image, listener)
        return client_brokers(image, listener, include_fenced=include_fenced)

    def fenced_broker_ids(self) -> set[int]:
        return fenced_broker_ids(self.store.image) if self.quorum else set()

    def _log_lacking(self, image: MetadataImage, listener: str) -> None:
        """Once per broker and listener: a broker left out of answers for lack of `listener`."""
        for broker_id in lacking_listener(image, listener):
            if (broker_id, listener) not in self._told_lacking:
                self._told_lacking.add((broker_id, listener))
                log.warning(
                    "broker %d has no listener %s: left out of the brokers named to clients "
                    "of that listener",
                    broker_id,
                    listener,
                )

    def alive_broker_endpoint(self, broker_id: int, listener: str | None) -> tuple[str, int] | None:
        """Where an unfenced broker serves `listener`; None if fenced, unknown or without it."""
        if not self.quorum:
            return self.endpoint(listener) if broker_id == self.node_id else None
        return alive_broker_endpoint(self.store.image, broker_id, listener)

    def controller_id(self, listener: str | None = None) -> int:
        """A live broker clients of `listener` can reach (`controller_id` above)."""
        if not self.quorum:
            return self.node_id
        ids = [b.node_id for b in client_brokers(self.store.image, listener)]
        return controller_id(ids, self.node_id, self.rng, self.store.leader_id)

    def active_broker_ids(self) -> list[int]:
        if not self.quorum:
            return [self.node_id]
        return active_broker_ids(self.store.image)

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker serves brokers: its inter-broker listener, as registered."""
        return broker_endpoint(self.store.image, broker_id, self.inter_broker_listener)

    def liveness(self, broker_id: int) -> BrokerLiveness:
        return liveness(self.store.image, broker_id)
