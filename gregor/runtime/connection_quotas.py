"""How many connections a broker's client listeners may hold, and how fast they may open
them, all told (Kafka's ConnectionQuotas), sans I/O: the counts, the rates and the decisions;
`server.py` accepts, waits and closes.

    quotas = ConnectionQuotas(limits, inter_broker="INTERNAL", window=(11, 1000))
    quotas.add_listener("EXTERNAL", wake)    # wake(): a slot may have freed, look again
    quotas.slot_available("EXTERNAL")        # accept the next connection?
    quotas.creation_delay_ms("EXTERNAL", now_ms)  # 0: serve it now; else after that many ms
    quotas.ip_quotas_of = lambda: image.client_quotas   # the `ip` entities' rates
    quotas.ip_throttle_ms("EXTERNAL", ip, now_ms)  # 0: count it; else close it after that
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
- `max.connection.creation.rate` (broker-wide, the inter-broker listener exempt as from
  `max.connections`) and `listener.name.<listener>.max.connection.creation.rate` (unset: the
  broker-wide value, as for `max.connections`) bound the connections accepted per second,
  measured over `quota.window.num` samples of `quota.window.size.seconds` as Kafka's other
  quotas. A connection over a rate is not refused: it is served after the delay that brings
  the rate back (at most one sample), and the listener accepts nothing meanwhile, as Kafka's
  acceptor blocks (KIP-612). Each listener keeps the average of those delays
  (`connection-accept-throttle-time`).
- `connection_creation_rate` of the `ip` client quota entities (an address's own, else the
  default one's; AlterClientQuotas, KIP-612) bounds an address's new connections per second:
  one over it is not counted anywhere (taken back from the broker's and the listener's
  rates) and is closed after the delay the rate names, as Kafka does
  (`ip-connection-accept-throttle-time`).
- The rates measured are reported as Kafka names them: `connection-accept-rate` per listener
  and per address under a `connection_creation_rate`, `broker-connection-accept-rate` over the
  listeners the broker-wide rate binds.
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
from gregor.security.quotas import IP, Entity, Rate, throttle_time_ms

log = logging.getLogger("gregor.server")

CONNECTION_CREATION_RATE = "connection_creation_rate"  # the `ip` client quota entity's key

INT_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class ConnectionLimits:
    """`max.connections`, `max.connections.per.ip` and its overrides (host or IP -> count),
    each listener's own `listener.name.<listener>.max.connections` (listener -> count) where
    set; `max.connection.creation.rate` and each listener's own where set (per second)."""

    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    per_listener: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = INT_MAX
    per_listener_rate: Mapping[str, int] = field(default_factory=dict)


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
    names = list(listeners)
    return ConnectionLimits(
        int(value("max.connections")),
        int(value("max.connections.per.ip")),
        parse_connections_per_ip_overrides(overrides),
        _per_listener(names, "max.connections", raw),
        int(value("max.connection.creation.rate")),
        _per_listener(names, "max.connection.creation.rate", raw),
    )


def _per_listener(
    listeners: Iterable[str], key: str, raw: Callable[[str], str | None]
) -> dict[str, int]:
    """listener -> its own `key` (`listener.name.<listener>.<key>`), where set."""
    out = {}
    for name in listeners:
        found = raw(listener_key(name, key))
        if found is not None and found.strip():
            out[name] = int(found)
    return out


def ip_rate_limits(quotas: Mapping[Entity, Mapping[str, float]]) -> dict[str | None, int]:
    """address (None: the default entity) -> its `connection_creation_rate`, from the client
    quotas."""
    out: dict[str | None, int] = {}
    for entity, values in quotas.items():
        if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
            continue
        name = entity[0][1]
        if name is not None:
            try:
                name = canonical_ip(name)
            except ValueError:
                continue
        out[name] = int(values[CONNECTION_CREATION_RATE])
    return out


def address_key(host: str) -> str:
    """The form connections are counted under: an IPv4 address mapped into IPv6 is the IPv4."""
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host


def canonical_ip(text: str) -> str:
    """An IP address as connections are counted under it (ValueError if it is none): an IPv4
    address mapped into IPv6 is the IPv4."""
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """IP -> limit, from hosts or IPs (a host name counts for each of its addresses)."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            out[canonical_ip(host)] = count
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


class ThrottleAverage:
    """The average of the non-zero accept delays of a listener over the last two samples of
    30 s (Kafka's Avg sensor under its default metric window)."""

    SAMPLE_MS = 30_000

    def __init__(self) -> None:
        self._samples: list[tuple[int, float, int]] = []  # (start ms, sum, count), newest last

    def record(self, delay_ms: int, now_ms: int) -> None:
        self._purge(now_ms)
        if self._samples and now_ms - self._samples[-1][0] < self.SAMPLE_MS:
            start, total, count = self._samples[-1]
            self._samples[-1] = (start, total + delay_ms, count + 1)
        else:
            self._samples.append((now_ms, float(delay_ms), 1))

    def value(self, now_ms: int) -> float:
        self._purge(now_ms)
        count = sum(s[2] for s in self._samples)
        return sum(s[1] for s in self._samples) / count if count else 0.0

    def _purge(self, now_ms: int) -> None:
        horizon = 2 * self.SAMPLE_MS
        self._samples = [s for s in self._samples if now_ms - s[0] < horizon][-2:]


class ConnectionQuotas:
    def __init__(
        self,
        limits: ConnectionLimits,
        inter_broker: str | None = None,
        window: tuple[int, int] = (11, 1000),
    ) -> None:
        """`inter_broker`: the listener brokers talk over (exempt from `max.connections` and
        `max.connection.creation.rate` while there are other listeners); `window`: the rates'
        (`quota.window.num`, `quota.window.size.seconds` in ms)."""
        self.limits = limits
        self.inter_broker = inter_broker
        self.window_num, self.window_ms = window
        self._broker_rate = Rate(self.window_num, self.window_ms)
        self._listener_rates: dict[str, Rate] = {}
        self.throttle_time: dict[str, ThrottleAverage] = {}
        self.ip_throttle_time: dict[str, ThrottleAverage] = {}
        # the client quotas (entity -> key -> value), whose `ip` entities bound addresses' rates
        self.ip_quotas_of: Callable[[], Mapping[Entity, Mapping[str, float]]] = dict
        self._ip_quotas_seen: Mapping[Entity, Mapping[str, float]] | None = None
        self._ip_rate_limits: dict[str | None, int] = {}  # address (None: default) -> rate
        self._ip_rates: dict[str, Rate] = {}
        self.total = 0
        self.listener_counts: dict[str, int] = {}
        self.per_ip: dict[str, int] = {}
        self._ip_limits = resolve_overrides(limits.per_ip_overrides)
        self._wakes: list[Callable[[], None]] = []

    def add_listener(self, name: str, wake: Callable[[], None]) -> None:
        """Count `name`'s connections; `wake` is called whenever a slot may have freed."""
        self.listener_counts.setdefault(name, 0)
        self._listener_rates.setdefault(name, Rate(self.window_num, self.window_ms))
        self.throttle_time.setdefault(name, ThrottleAverage())
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

    def listener_rate_limit(self, listener: str) -> int:
        return self.limits.per_listener_rate.get(listener, self.limits.max_connection_creation_rate)

    def creation_delay_ms(self, listener: str, now_ms: int) -> int:
        """Record a connection accepted on `listener` at `now_ms`: 0 to serve it now, else
        how long to hold it (and the listener) first, the longer of the broker's and the
        listener's delays, at most one sample (Kafka's boundedThrottleTime)."""
        delay = 0
        if not self.protected(listener):
            delay = _record(self._broker_rate, self.limits.max_connection_creation_rate, now_ms)
        rate = self._listener_rates.setdefault(listener, Rate(self.window_num, self.window_ms))
        delay = max(delay, _record(rate, self.listener_rate_limit(listener), now_ms))
        delay = min(delay, self.window_ms)
        if delay > 0:
            self.throttle_time.setdefault(listener, ThrottleAverage()).record(delay, now_ms)
        return delay

    def throttle_time_ms(self, now_ms: int) -> dict[str, float]:
        """listener -> the average of its non-zero accept delays lately (ms)."""
        return {name: avg.value(now_ms) for name, avg in self.throttle_time.items()}

    def ip_throttle_time_ms(self, now_ms: int) -> dict[str, float]:
        """listener -> the average delay before closing connections over an address's rate."""
        return {name: avg.value(now_ms) for name, avg in self.ip_throttle_time.items()}

    def accept_rates(self, now_ms: int) -> dict[str, float]:
        """listener -> connections it accepted per second over the quota window, those over an
        address's rate excepted (Kafka's `connection-accept-rate{listener}`)."""
        return {name: rate.measure(now_ms) for name, rate in self._listener_rates.items()}

    def broker_accept_rate(self, now_ms: int) -> float:
        """The same over every listener the broker-wide rate binds (Kafka's
        `broker-connection-accept-rate`)."""
        return self._broker_rate.measure(now_ms)

    def ip_accept_rates(self, now_ms: int) -> dict[str, float]:
        """address -> its connections counted per second, for the addresses under a
        `connection_creation_rate` (Kafka's `connection-accept-rate{ip}`)."""
        return {ip: rate.measure(now_ms) for ip, rate in self._ip_rates.items()}

    def ip_throttle_ms(self, listener: str, ip: str, now_ms: int) -> int:
        """A connection from `ip` on `listener`, past `creation_delay_ms`: 0 to count it, else
        it is over its address's `connection_creation_rate`: recorded nowhere, to be closed
        after the delay returned (Kafka's ConnectionThrottledException)."""
        limits = self._ip_limits_now(now_ms)
        limit = limits.get(ip, limits.get(None))
        if limit is None:
            return 0
        rate = self._ip_rates.get(ip)
        if rate is None:
            rate = self._ip_rates[ip] = Rate(self.window_num, self.window_ms)
        delay = min(_record(rate, limit, now_ms), self.window_ms)
        if delay <= 0:
            return 0
        rate.record(-1.0, now_ms)
        if not self.protected(listener):
            self._broker_rate.record(-1.0, now_ms)
        listener_rate = self._listener_rates.get(listener)
        if listener_rate is not None:
            listener_rate.record(-1.0, now_ms)
        self.ip_throttle_time.setdefault(listener, ThrottleAverage()).record(delay, now_ms)
        return delay

    def _ip_limits_now(self, now_ms: int) -> dict[str | None, int]:
        """The `ip` entities' connection_creation_rate, read again when the quotas changed."""
        quotas = self.ip_quotas_of()
        if quotas is not self._ip_quotas_seen:
            self._ip_quotas_seen = quotas
            self._ip_rate_limits = ip_rate_limits(quotas)
            wanted = set(self._ip_rate_limits)
            if None not in wanted:  # no default: only the addresses named keep a rate
                self._ip_rates = {k: v for k, v in self._ip_rates.items() if k in wanted}
        if len(self._ip_rates) > 4096:
            self._forget_idle_ip_rates(now_ms)
        return self._ip_rate_limits

    def _forget_idle_ip_rates(self, now_ms: int) -> None:
        """Addresses with no connection for the whole window: their rate is 0 anyway."""
        horizon = self.window_num * self.window_ms
        self._ip_rates = {
            ip: r
            for ip, r in self._ip_rates.items()
            if any(now_ms - s.last_ms < horizon for s in r.samples)
        }

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


def _record(rate: Rate, limit: int, now_ms: int) -> int:
    """One connection more on `rate`: the delay that brings it back within `limit` (0 if
    within)."""
    rate.record(1.0, now_ms)
    if limit >= INT_MAX:
        return 0
    if limit <= 0:  # no connection at all: the longest delay (capped by the caller)
        return INT_MAX
    observed = rate.measure(now_ms)
    if observed <= limit:
        return 0
    return throttle_time_ms(observed, limit, rate.window_size_ms(now_ms))
