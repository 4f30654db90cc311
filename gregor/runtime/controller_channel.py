"""Requests from a broker to the active controller, over the controller listener (Kafka's
NodeToControllerChannelManager).

    channel = ControllerChannel(store, driver.endpoint, client_id="broker-4")
    answer = await channel.send(api_keys.BROKER_HEARTBEAT, 1, request)
    await channel.close()

Which node is the active controller comes from the metadata store (the Raft leader this node
follows); where it listens from the Raft driver (`controller.quorum.voters`, or the endpoint a
leader's Fetch answer named when only `controller.quorum.bootstrap.servers` are configured).
With no leader known, or none with a known endpoint, `send` raises NoControllerError at once;
the caller retries. One connection per controller; its requests are answered in order, so a
caller whose requests may wait long (an admin write waits for its commit) keeps a channel of
its own rather than delaying another's heartbeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gregor.runtime.client import ClientError, ClientSecurity, NetworkClient


class NoControllerError(ClientError):
    """No active controller is known (an election, or its endpoint not learned yet)."""


class LeaderSource(Protocol):
    @property
    def leader_id(self) -> int | None: ...


class ControllerChannel:
    def __init__(
        self,
        store: LeaderSource,
        endpoint_of: Callable[[int], tuple[str, int] | None],
        *,
        client_id: str,
        request_timeout_ms: int = 5000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.store = store
        self.endpoint_of = endpoint_of
        self.client = NetworkClient(
            {},
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            connect_timeout_ms=2000,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=500,
            security=security,
        )

    def controller_id(self) -> int | None:
        """The active controller, if known and reachable (its endpoint is known)."""
        leader = self.store.leader_id
        if leader is None or self.endpoint_of(leader) is None:
            return None
        return leader

    async def send(
        self, api_key: int, version: int, body: Any, timeout_ms: int | None = None
    ) -> Any:
        """The decoded answer of the active controller; NoControllerError when none is known,
        another ClientError when the request got no answer."""
        leader = self.store.leader_id
        address = None if leader is None else self.endpoint_of(leader)
        if leader is None or address is None:
            raise NoControllerError(f"no active controller known (leader {leader})")
        self.client.set_endpoint(leader, *address)
        return await self.client.send(leader, api_key, version, body, timeout_ms)

    async def close(self) -> None:
        await self.client.close()
