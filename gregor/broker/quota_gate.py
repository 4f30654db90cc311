"""Client quota enforcement for Produce and Fetch, as Kafka's ClientQuotaManager does it.

The gate follows the metadata image's client quotas (a new QuotaState per quota key whenever
the image's quotas change; the sensors start afresh then) and records, per (user, client id):
a Produce request's size against `producer_byte_rate`, a consumer Fetch response's size against
`consumer_byte_rate` (a follower's fetch is replication, not a client's). A rate over its
bound gives a throttle time: the response carries it in `throttle_time_ms` and goes out at
once, and the connection reads nothing more for that time (KIP-219: the client, told, waits
too; an old client is held back by the mute alone). CreateTopics, CreatePartitions and
DeleteTopics share one `controller_mutation_rate` state (mutation_quota.py has their rules).

Cost when no quota is set: `state(key)` compares the image's quota mapping with the one it
was built from (identity) and finds no state for the key: two attribute reads and a dict get.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from gregor.protocol import api_keys
from gregor.security.principal import principal_of
from gregor.security.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    QuotaState,
    by_key,
)

QUOTA_OF_API = {
    api_keys.PRODUCE: PRODUCER_BYTE_RATE,
    api_keys.FETCH: CONSUMER_BYTE_RATE,
    # one rate for the three: partitions created or deleted per second
    api_keys.CREATE_TOPICS: CONTROLLER_MUTATION_RATE,
    api_keys.DELETE_TOPICS: CONTROLLER_MUTATION_RATE,
    api_keys.CREATE_PARTITIONS: CONTROLLER_MUTATION_RATE,
}
EXPIRE_EVERY_MS = 60_000


class QuotaStates:
    """The QuotaState of each of `keys` the image's client quotas set, built afresh when those
    quotas change (the sensors start again then), their idle entries expired once a minute."""

    def __init__(
        self,
        quotas_of: Callable[[], Mapping[Any, Any]],
        window_num: int,
        window_size_s: int,
        keys: Collection[str],
    ) -> None:
        self._quotas_of = quotas_of  # the image's client quotas, read on each request
        self._num = window_num
        self.window_ms = window_size_s * 1000
        self._keys = frozenset(keys)
        self._source: Mapping[Any, Any] | None = None
        self._states: dict[str, QuotaState] = {}
        self._next_expiry_ms = 0

    def get(self, key: str) -> QuotaState | None:
        """The state of quota `key`; None when no such quota is set."""
        quotas = self._quotas_of()
        if quotas is not self._source:
            self._source = quotas
            self._states = {
                key: QuotaState(bounds, self._num, self.window_ms)
                for key, bounds in by_key(quotas).items()
                if key in self._keys
            }
        return self._states.get(key)

    def expire_due(self, now_ms: int) -> None:
        if now_ms >= self._next_expiry_ms:
            for state in self._states.values():
                state.expire(now_ms)
            self._next_expiry_ms = now_ms + EXPIRE_EVERY_MS


class QuotaGate:
    def __init__(
        self, quotas_of: Callable[[], Mapping[Any, Any]], window_num: int, window_size_s: int
    ) -> None:
        keys = set(QUOTA_OF_API.values())
        self._states = QuotaStates(quotas_of, window_num, window_size_s, keys)

    def state(self, api_key: int) -> QuotaState | None:
        """The quota state that applies to requests of `api_key`; None when no quota is set."""
        key = QUOTA_OF_API.get(api_key)
        return None if key is None else self._states.get(key)

    def record(
        self,
        state: QuotaState,
        connection: Mapping[str, Any],
        client_id: str | None,
        size: int,
        now_ms: int,
    ) -> int:
        """Record `size` bytes for the connection's principal and `client_id`: the throttle
        time in ms (0: within the quota)."""
        self._states.expire_due(now_ms)
        user = principal_of(connection).name
        return state.record(user, client_id or "", size, now_ms)

    def user_of(self, connection: Mapping[str, Any]) -> str:
        return principal_of(connection).name


def is_follower_fetch(version: int, request: Any) -> bool:
    if version >= 15:
        replica_state = request.replica_state
        return replica_state is not None and replica_state.replica_id >= 0
    return request.replica_id >= 0
