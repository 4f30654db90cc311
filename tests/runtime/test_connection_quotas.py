"""The connection counts of a node's client listeners (runtime/connection_quotas.py), as
Kafka's ConnectionQuotas keeps them: max.connections over every listener, the inter-broker
listener exempt from it while there are others, each listener's own limit, each address's."""

from __future__ import annotations

from typing import Any

import pytest

from gregor.runtime.connection_quotas import (
    ConnectionLimits,
    ConnectionQuotas,
    connection_limits,
    ip_rate_limits,
)

pytestmark = pytest.mark.unit


def quotas(limits: ConnectionLimits, *listeners: str, inter_broker: str = "INTERNAL") -> Any:
    q = ConnectionQuotas(limits, inter_broker)
    woken: list[str] = []
    for name in listeners:
        q.add_listener(name, lambda name=name: woken.append(name))
    q.woken = woken  # type: ignore[attr-defined]
    return q


def open_n(q: ConnectionQuotas, listener: str, n: int, ip: str = "10.0.0.1") -> None:
    for _ in range(n):
        assert q.slot_available(listener)
        assert q.admit(listener, ip) is None


def test_max_connections_counts_every_listener() -> None:
    q = quotas(ConnectionLimits(max_connections=3), "CLIENT", "OTHER", "INTERNAL")
    open_n(q, "CLIENT", 2)
    open_n(q, "OTHER", 1)
    assert not q.slot_available("CLIENT") and not q.slot_available("OTHER")
    assert q.blocking_limit("CLIENT") == "max.connections (3)"
    q.release("OTHER", "10.0.0.1")
    assert q.slot_available("CLIENT")
    assert q.woken == ["CLIENT", "OTHER", "INTERNAL"]  # each listener looks again


def test_the_inter_broker_listener_is_exempt_but_keeps_its_own_limit() -> None:
    q = quotas(ConnectionLimits(max_connections=3), "CLIENT", "INTERNAL")
    open_n(q, "INTERNAL", 2)
    open_n(q, "CLIENT", 1)
    assert not q.slot_available("CLIENT")  # INTERNAL's connections count toward it
    open_n(q, "INTERNAL", 1)  # over the broker's 3, still admitted
    assert q.total == 4
    assert not q.slot_available("INTERNAL")  # its own limit: max.connections too
    alone = quotas(ConnectionLimits(max_connections=1), "INTERNAL")
    open_n(alone, "INTERNAL", 1)
    assert not alone.slot_available("INTERNAL")  # the only listener: not exempt


def test_a_listeners_own_limit() -> None:
    limits = ConnectionLimits(max_connections=10, per_listener={"CLIENT": 2})
    q = quotas(limits, "CLIENT", "INTERNAL")
    open_n(q, "CLIENT", 2)
    assert not q.slot_available("CLIENT")
    assert q.blocking_limit("CLIENT") == "listener.name.client.max.connections (2)"
    open_n(q, "INTERNAL", 5)
    limits = ConnectionLimits(max_connections=10, per_listener={"INTERNAL": 20})
    assert q.reconfigure(limits) == 0
    assert q.slot_available("CLIENT")


def test_an_address_is_counted_over_every_listener() -> None:
    q = quotas(ConnectionLimits(max_connections_per_ip=2), "CLIENT", "INTERNAL")
    open_n(q, "CLIENT", 1)
    open_n(q, "INTERNAL", 1)
    assert q.admit("CLIENT", "10.0.0.1") == 2  # over: nothing counted
    assert (q.total, q.listener_counts["CLIENT"]) == (2, 1)
    assert q.admit("CLIENT", "10.0.0.2") is None


def test_lowered_max_connections_closes_from_the_listeners_it_binds() -> None:
    q = quotas(ConnectionLimits(), "CLIENT", "INTERNAL")
    open_n(q, "CLIENT", 3)
    open_n(q, "INTERNAL", 2)
    assert q.reconfigure(ConnectionLimits(max_connections=2)) == 3
    assert q.closable("CLIENT") and not q.closable("INTERNAL")
    # a listener's own limit lowered closes nothing: it stops accepting
    assert q.reconfigure(ConnectionLimits(per_listener={"CLIENT": 1})) == 0
    assert not q.slot_available("CLIENT")


def test_limits_from_the_configs() -> None:
    values = {
        "max.connections": 5,
        "max.connections.per.ip": 4,
        "max.connections.per.ip.overrides": "127.0.0.2:9",
        "max.connection.creation.rate": (1 << 31) - 1,
    }
    raw = {"listener.name.client.max.connections": "2"}
    limits = connection_limits(values.__getitem__, ["CLIENT", "INTERNAL"], raw.get)
    assert limits == ConnectionLimits(5, 4, {"127.0.0.2": 9}, {"CLIENT": 2})


def test_connections_over_the_creation_rate_are_delayed_not_refused() -> None:
    """max.connection.creation.rate 2 over 2 samples of 1 s: the window holds 2 connections;
    the 3rd is served after the delay that brings the rate back, at most one sample."""
    limits = ConnectionLimits(max_connection_creation_rate=2)
    q = ConnectionQuotas(limits, "INTERNAL", window=(2, 1000))
    q.add_listener("CLIENT", lambda: None)
    q.add_listener("INTERNAL", lambda: None)
    assert [q.creation_delay_ms("CLIENT", 0) for _ in range(2)] == [0, 0]
    assert q.creation_delay_ms("CLIENT", 0) == 500  # 3 in 1 s: (3 - 2) / 2 * 1000
    assert q.creation_delay_ms("CLIENT", 0) == 1000  # 4 in 1 s: 1000, the cap
    assert q.creation_delay_ms("CLIENT", 0) == 1000  # 5 in 1 s: 1500 capped to 1000
    assert q.throttle_time_ms(0) == {"CLIENT": 2500 / 3, "INTERNAL": 0.0}
    assert q.creation_delay_ms("CLIENT", 5000) == 0  # the window has moved on


def test_the_inter_broker_listener_is_exempt_from_the_broker_rate_not_its_own() -> None:
    limits = ConnectionLimits(max_connection_creation_rate=2, per_listener_rate={"CLIENT": 100})
    q = ConnectionQuotas(limits, "INTERNAL", window=(2, 1000))
    q.add_listener("CLIENT", lambda: None)
    q.add_listener("INTERNAL", lambda: None)
    q.reconfigure(
        ConnectionLimits(max_connection_creation_rate=2, per_listener_rate={"INTERNAL": 100})
    )
    # INTERNAL's connections do not count toward, nor wait for, the broker-wide rate
    assert [q.creation_delay_ms("INTERNAL", 0) for _ in range(10)] == [0] * 10
    assert [q.creation_delay_ms("CLIENT", 0) for _ in range(3)] == [0, 0, 500]
    # unset, a listener's own rate is the broker-wide one (as max.connections): it binds INTERNAL
    q.reconfigure(ConnectionLimits(max_connection_creation_rate=2))
    assert q.creation_delay_ms("INTERNAL", 0) > 0


def test_a_listeners_own_creation_rate() -> None:
    q = ConnectionQuotas(ConnectionLimits(per_listener_rate={"CLIENT": 1}), window=(2, 1000))
    q.add_listener("CLIENT", lambda: None)
    q.add_listener("OTHER", lambda: None)
    assert [q.creation_delay_ms("CLIENT", 0) for _ in range(2)] == [0, 1000]
    assert [q.creation_delay_ms("OTHER", 0) for _ in range(5)] == [0] * 5  # no limit there
    q.reconfigure(ConnectionLimits())  # removed: unlimited again
    assert q.creation_delay_ms("CLIENT", 0) == 0


def test_creation_rates_from_the_configs() -> None:
    values = {
        "max.connections": 5,
        "max.connections.per.ip": 4,
        "max.connections.per.ip.overrides": "",
        "max.connection.creation.rate": 7,
    }
    raw = {"listener.name.internal.max.connection.creation.rate": "3"}
    limits = connection_limits(values.__getitem__, ["CLIENT", "INTERNAL"], raw.get)
    assert limits.max_connection_creation_rate == 7
    assert limits.per_listener_rate == {"INTERNAL": 3}


def test_an_addresses_creation_rate_closes_what_is_over_and_counts_it_nowhere() -> None:
    """The `ip` client quota entities' connection_creation_rate (an address's own over the
    default): a connection over it gets the delay before it is closed, and is taken back from
    the address's, the broker's and the listener's rates."""
    q = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=3), window=(2, 1000))
    q.add_listener("CLIENT", lambda: None)
    quotas = {(("ip", "10.0.0.1"),): {"connection_creation_rate": 1.0}}
    q.ip_quotas_of = lambda: quotas
    assert q.creation_delay_ms("CLIENT", 0) == 0
    assert q.ip_throttle_ms("CLIENT", "10.0.0.1", 0) == 0
    assert q.creation_delay_ms("CLIENT", 0) == 0
    assert q.ip_throttle_ms("CLIENT", "10.0.0.1", 0) == 1000  # 2 in 1 s over 1: capped
    assert q.ip_throttle_time_ms(0) == {"CLIENT": 1000.0}
    # the one closed counted nowhere: the broker's rate of 3 still holds 2 more
    assert [q.creation_delay_ms("CLIENT", 0) for _ in range(2)] == [0, 0]
    assert q.ip_throttle_ms("CLIENT", "10.0.0.2", 0) == 0  # no default: not bound
    quotas = {**quotas, (("ip", None),): {"connection_creation_rate": 1.0}}
    assert [q.ip_throttle_ms("CLIENT", "10.0.0.2", 0) for _ in range(2)] == [0, 1000]


def test_ip_rate_limits_from_the_client_quotas() -> None:
    quotas = {
        (("ip", "::ffff:10.0.0.1"),): {"connection_creation_rate": 5.0},
        (("ip", None),): {"connection_creation_rate": 2.0},
        (("user", "alice"),): {"producer_byte_rate": 100.0},
    }
    assert ip_rate_limits(quotas) == {"10.0.0.1": 5, None: 2}


def test_accept_rates_per_listener_per_address_and_broker_wide() -> None:
    """Kafka's connection-accept-rate{listener}, {ip} and broker-connection-accept-rate: the
    connections recorded over the quota window (here 2 samples of 1 s: a window of at least
    1 s), the inter-broker listener outside the broker's, one closed over its address's rate
    taken back from all three."""
    q = ConnectionQuotas(ConnectionLimits(), "INTERNAL", window=(2, 1000))
    q.add_listener("CLIENT", lambda: None)
    q.add_listener("INTERNAL", lambda: None)
    q.ip_quotas_of = lambda: {(("ip", "10.0.0.1"),): {"connection_creation_rate": 2.0}}
    for _ in range(4):
        assert q.creation_delay_ms("CLIENT", 0) == 0
        q.ip_throttle_ms("CLIENT", "10.0.0.1", 0)  # the 3rd and 4th: over the address's 2
    assert q.creation_delay_ms("INTERNAL", 0) == 0
    assert q.accept_rates(0) == {"CLIENT": 2.0, "INTERNAL": 1.0}
    assert q.broker_accept_rate(0) == 2.0
    assert q.ip_accept_rates(0) == {"10.0.0.1": 2.0}
    # 1.5 s on, the same counts over a window of 1.5 s
    assert q.accept_rates(1500) == {"CLIENT": 2 / 1.5, "INTERNAL": 1 / 1.5}
    assert q.accept_rates(5000) == {"CLIENT": 0.0, "INTERNAL": 0.0}  # the window moved on
