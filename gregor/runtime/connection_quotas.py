"""How many connections a broker's client listeners may hold, all told (Kafka's
ConnectionQuotas), sans I/O: the counts and the decisions; `server.py` accepts and closes.

    quotas = ConnectionQuotas(limits, inter_broker="INTERNAL")
    quotas.add_listener("EXTERNAL", wake)    # wake(): a slot may have freed, look again
    quotas.slot_available("EXTERNAL")        # accept the next connection?
    quotas.admit("EXTERNAL", ip)             # None: counted; else the per-IP limit it is over
    quotas.release("EXTERNAL", ip)           # a connection closed
    quotas.reconfigure(new_limits)           # dynamic configs: how many to close now

- `max.connections` is broker-wide: the connections of every client listener together. The
  inter-broker listener is exempt from it when there are other listeners (so clients cannot
  lock brokers out), but not from its own limit.
- `listener.name.<listener>.max.connections` caps one listener; unset, a listener's own limit
  is `max.connections` (Kafka reads the listener's configs with its prefix over the bare ones).
- `max.connections.per.ip` (and its overrides) counts an address's connections over every
  listener: one over it is closed as soon as it is accepted.
At a limit a listener stops accepting (new clients wait in the listen backlog, as behind
Kafka's blocked acceptor). `max.connections` lowered below the connections open: the least
recently active connections of listeners it binds are closed until the count fits; a lowered
listener limit closes none (its listener only stops accepting), as in Kafka.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gregor.metadata.config_defs import parse_connections_per_ip_overrides

log = logging.getLogger("gregor.server")

INT_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class ConnectionLimits:
    """`max.connections`, `max.connections.per.ip` and its overrides (host or IP -> count), and
    each listener's own `listener.name.<listener>.max.connections` (listener -> count) where
    set."""

    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    per_listener: Mapping[str, int] = field(default_factory=dict)


def listener_key(listener: str, key: str) -> str:
    """A listener's own setting of `key`: `listener.name.<listener in lower case>.<key>`."""
    return f"listener.name.{listener.lower()}.{key}"


def connection_limits(
    value: Callable[[str], Any],
    listeners: Iterable[str] = (),
    raw: Callable[[str], str | None] = lambda key: None,
) -> ConnectionLimits:
    """The limits as the broker's configs say now (`value`: a config key -> its typed value;
    `raw`: a listener-prefixed key -> its text, None if unset; `listeners`: their names)."""
    overrides = str(value("max.connections.per.ip.overrides") or "")
    per_listener = {}
    for name in listeners:
        found = raw(listener_key(name, "max.connections"))
        if found is not None and found.strip():
            per_listener[name] = int(found)
    return ConnectionLimits(
        int(value("max.connections")),
        int(value("max.connections.per.ip")),
        parse_connections_per_ip_overrides(overrides),
        per_listener,
    )


def address_key(host: str) -> str:
    """The form connections are counted under: an IPv4 address mapped into IPv6 is the IPv4."""
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """IP -> limit, from hosts or IPs (a host name counts for each of its addresses)."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            out[address_key(str(ipaddress.ip_address(host)))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s: %s", host, exc)
            continue
        for info in infos:
            out[address_key(str(info[4][0]))] = count
    return out


class ConnectionQuotas:
    def __init__(self, limits: ConnectionLimits, inter_broker: str | None = None) -> None:
        """`inter_broker`: the listener brokers talk over (exempt from `max.connections`
        while there are other listeners)."""
        self.limits = limits
        self.inter_broker = inter_broker
        self.total = 0
        self.listener_counts: dict[str, int] = {}
        self.per_ip: dict[str, int] = {}
        self._ip_limits = resolve_overrides(limits.per_ip_overrides)
        self._wakes: list[Callable[[], None]] = []

    def add_listener(self, name: str, wake: Callable[[], None]) -> None:
        """Count `name`'s connections; `wake` is called whenever a slot may have freed."""
        self.listener_counts.setdefault(name, 0)
        self._wakes.append(wake)

    def protected(self, listener: str) -> bool:
        """The inter-broker listener, when it is not the only one: outside max.connections."""
        return listener == self.inter_broker and len(self.listener_counts) > 1

    def listener_limit(self, listener: str) -> int:
        return self.limits.per_listener.get(listener, self.limits.max_connections)

    def slot_available(self, listener: str) -> bool:
        if self.listener_counts.get(listener, 0) >= self.listener_limit(listener):
            return False
        return self.protected(listener) or self.total < self.limits.max_connections

    def blocking_limit(self, listener: str) -> str:
        """Which limit keeps `listener` from accepting, for the log."""
        own = self.limits.per_listener.get(listener)
        if own is not None and self.listener_counts.get(listener, 0) >= own:
            return f"{listener_key(listener, 'max.connections')} ({own})"
        return f"max.connections ({self.limits.max_connections})"

    def admit(self, listener: str, ip: str) -> int | None:
        """Count a connection just accepted from `ip`; if its address is at its limit, count
        nothing and return that limit (the connection is to be closed)."""
        count = self.per_ip.get(ip, 0)
        limit = self._ip_limits.get(ip, self.limits.max_connections_per_ip)
        if count >= limit:
            return limit
        self.per_ip[ip] = count + 1
        self.total += 1
        self.listener_counts[listener] = self.listener_counts.get(listener, 0) + 1
        return None

    def release(self, listener: str, ip: str) -> None:
        """A connection counted by `admit` closed: a slot is free on every listener."""
        left = self.per_ip.get(ip, 0) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)
        self.total -= 1
        self.listener_counts[listener] -= 1
        self._wake()

    def reconfigure(self, limits: ConnectionLimits) -> int:
        """New limits: how many connections of the listeners `max.connections` binds
        (`closable`) to close now, the least recently active first."""
        self.limits = limits
        self._ip_limits = resolve_overrides(limits.per_ip_overrides)
        self._wake()
        return max(0, self.total - limits.max_connections)

    def closable(self, listener: str) -> bool:
        """Whether `listener`'s connections go when the broker is over max.connections."""
        return not self.protected(listener)

    def _wake(self) -> None:
        for wake in self._wakes:
            wake()
