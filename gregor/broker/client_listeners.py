"""A broker's client listeners: one per entry of `listeners` that is not a controller listener,
each with its own security (listener_security.py: TLS context, SASL gate, principal), its own
port and its own `Server`, all in front of the one dispatcher.

    listeners = ClientListeners(config)     # sockets of port-0 listeners bound here
    listeners.endpoints()                   # advertised (name, host, port, protocol), registered
    await listeners.start(dispatch, value, raw)  # serve
    listeners.reconfigure(limits, dynamic)  # connection limits, TLS stores (dynamic configs)
    await listeners.stop(grace_s)

A port-0 listener is bound at construction, so that the registration names the port clients
will use; an advertised port 0 is the bound port. Every connection's state names the listener
it came in on (LISTENER_NAME), so that answers name brokers at their endpoints on it.

The listeners share one count of connections (runtime/connection_quotas.py): `max.connections`
is the broker's, the inter-broker listener exempt from it while there are others;
`listener.name.<listener>.max.connections` is one listener's; so are
`max.connection.creation.rate` and `listener.name.<listener>.max.connection.creation.rate`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gregor.broker.config import BrokerConfig, ClientListenerSpec
from gregor.broker.listener_security import ListenerSecurity, listener_security
from gregor.handlers.context import LISTENER_NAME
from gregor.metadata.image import Endpoint
from gregor.runtime.connection import Dispatcher
from gregor.runtime.connection_quotas import ConnectionLimits, ConnectionQuotas, connection_limits
from gregor.runtime.server import (
    Server,
    bind,
    configured_server,
    now_ms,
    rate_window,
    reconfigure_servers,
)
from gregor.security.listener_config import SECURITY_PROTOCOL_IDS, ListenerConfig

# The node's console prefers a listener it needs no credentials for, then one where each
# browser user signs in with their own (console_driver.py).
_CONSOLE_RANK = {"PLAINTEXT": 0, "SASL_PLAINTEXT": 1, "SASL_SSL": 2, "SSL": 3}


@dataclass
class ClientListener:
    spec: ClientListenerSpec
    security: ListenerSecurity
    sock: socket.socket | None  # bound early (port 0), else bound when the server starts
    port: int  # the port it binds (the picked one for port 0)
    server: Server | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def endpoint(self) -> Endpoint:
        """Where it is advertised, as registered."""
        spec = self.spec
        protocol = SECURITY_PROTOCOL_IDS[spec.protocol]
        return Endpoint(
            spec.name, spec.advertised_host, spec.advertised_port or self.port, protocol
        )


class ClientListeners:
    def __init__(self, config: BrokerConfig) -> None:
        """Each listener's security (a bad setting stops the start here, ConfigError), and the
        sockets of the port-0 ones, bound."""
        self.listeners: list[ClientListener] = []
        self.quotas: ConnectionQuotas | None = None  # once serving
        try:
            for spec in config.client_listeners():
                security = listener_security(spec.config)
                sock = bind(spec.host, spec.port) if spec.port == 0 else None
                port = sock.getsockname()[1] if sock is not None else spec.port
                self.listeners.append(ClientListener(spec, security, sock, port))
            # the listener brokers talk over: exempt from the broker-wide max.connections
            self.inter_broker = (
                config.inter_broker_listener_config().name if self.listeners else None
            )
        except BaseException:
            self.close_sockets()
            raise

    def close_sockets(self) -> None:
        """The sockets bound early and not served (a start that failed)."""
        for listener in self.listeners:
            if listener.sock is not None and listener.server is None:
                listener.sock.close()

    @property
    def first(self) -> ClientListener:
        return self.listeners[0]

    def names(self) -> list[str]:
        return [listener.name for listener in self.listeners]

    def endpoints(self) -> list[Endpoint]:
        return [listener.endpoint() for listener in self.listeners]

    def bind_node(self, scram_credential: Callable[..., object], now_ms: Callable[[], int]) -> None:
        for listener in self.listeners:
            listener.security.bind_node(scram_credential, now_ms)

    async def start(
        self,
        dispatch: Dispatcher,
        value: Callable[[str], Any],
        outer: Callable[[Dispatcher], Dispatcher] = lambda d: d,
        raw: Callable[[str], str | None] = lambda key: None,
    ) -> None:
        """Serve every listener, each behind its own security (and `outer` around that: the
        request metrics), with the limits the configs set (`value`: key -> typed; `raw`: a
        listener's own key, `listener.name.<listener>.max.connections`, -> its text)."""
        limits = connection_limits(value, self.names(), raw)
        quotas = self.quotas = ConnectionQuotas(limits, self.inter_broker, rate_window(value))
        for listener in self.listeners:
            security = listener.security
            listener.server = configured_server(
                outer(security.wrap(dispatch)),
                listener.spec.host,
                listener.port,
                value,
                listener.sock,
                tls=security.tls,
                on_secure=security.on_secure,
                attributes={LISTENER_NAME: listener.name},
                quotas=quotas,
                listener=listener.name,
            )
            await listener.server.start()
            listener.port = listener.server.port

    def reconfigure(self, limits: ConnectionLimits, dynamic: Mapping[str, str]) -> None:
        """New connection limits for the listeners, and new TLS stores where a listener's
        dynamic `listener.name.<it>.ssl.*` configs changed."""
        servers = [li.server for li in self.listeners if li.server is not None]
        if self.quotas is not None:
            reconfigure_servers(self.quotas, servers, limits)
        for listener in self.listeners:
            if listener.server is None:
                continue
            tls = listener.security.reload_tls(dynamic)
            if tls is not None:
                listener.server.tls = tls

    def for_console(self) -> tuple[str, ListenerConfig]:
        """(host:port, security) of the listener the node's own console uses: PLAINTEXT if
        there is one, else SASL_PLAINTEXT, SASL_SSL, SSL (the first of a kind)."""
        chosen = min(self.listeners, key=lambda li: _CONSOLE_RANK[li.spec.protocol])
        endpoint = chosen.endpoint()
        return f"{endpoint.host}:{endpoint.port}", chosen.spec.config

    def connections(self) -> dict[str, int]:
        """Open connections per listener name."""
        return {li.name: len(li.server.connections) for li in self.listeners if li.server}

    def accept_throttle_ms(self) -> dict[str, float]:
        """Per listener name: the average of its accept delays over the creation rate lately."""
        if self.quotas is None:
            return {}
        return self.quotas.throttle_time_ms(now_ms())

    def ip_accept_throttle_ms(self) -> dict[str, float]:
        """Per listener name: the average delay before closing connections over an address's
        connection_creation_rate lately."""
        if self.quotas is None:
            return {}
        return self.quotas.ip_throttle_time_ms(now_ms())

    def accept_rates(self) -> dict[str, float]:
        """Per listener name: connections it accepted per second over the quota window."""
        return {} if self.quotas is None else self.quotas.accept_rates(now_ms())

    def ip_accept_rates(self) -> dict[str, float]:
        """Per address under a connection_creation_rate: its connections counted per second."""
        return {} if self.quotas is None else self.quotas.ip_accept_rates(now_ms())

    def broker_accept_rate(self) -> float | None:
        """Connections accepted per second by the listeners max.connection.creation.rate binds."""
        return None if self.quotas is None else self.quotas.broker_accept_rate(now_ms())

    def acceptor_blocked_ns(self) -> dict[str, int]:
        """Per listener name: the time it held connections over a creation rate, all told."""
        return {li.name: li.server.blocked_ns for li in self.listeners if li.server}

    def connection_totals(self) -> dict[str, tuple[int, int]]:
        """Connections (served, closed) so far per listener name."""
        return {li.name: li.server.connection_totals() for li in self.listeners if li.server}

    def connection_rates(self) -> dict[str, tuple[float, float]]:
        """Connections (served, closed) per second lately per listener name."""
        return {li.name: li.server.connection_rates() for li in self.listeners if li.server}

    def socket_bytes(self) -> dict[str, tuple[int, int]]:
        """Bytes (read, sent) per listener name."""
        return {li.name: li.server.socket_bytes() for li in self.listeners if li.server}

    async def stop(self, grace_s: float) -> None:
        """Stop accepting on every listener at once, then let in-flight requests finish."""
        servers = [li.server for li in self.listeners if li.server is not None]
        for server in servers:
            server.stop_accepting()
        await asyncio.gather(*(server.stop(grace_s) for server in servers))
