"""`request_percentage` client quotas (Kafka's ClientRequestQuotaManager), measured on gregor's
one event loop.

Kafka counts the time its request handler threads spend on each request of a (user, client id)
as a percentage of one thread over the quota window (`quota.window.num` samples of
`quota.window.size.seconds`), and a client above its `request_percentage` gets
`throttle_time_ms` in its response and a muted connection for that time, as the byte rates.
A gregor node serves every request on one event loop, so what is counted is the loop's time
handling the request: from the dispatch of its frame (decoding it included) until its handler
returns. Encoding and sending the response, and the later completion of a request that waits
(a Fetch waiting for min_bytes, a Produce for acks=all), are not counted. 100 is the whole loop.

The quota that binds, and who shares its measure, follow Kafka's precedence (security/quotas.py).
The throttle time is Kafka's formula, at most one sample (`quota.window.size.seconds`), as
Kafka bounds it. Exempt, as in Kafka: cluster actions (inter-broker and controller APIs: replica
Fetches, WriteTxnMarkers, AlterPartition, broker registration and heartbeats, Raft requests,
Envelope) and acks=0 Produce requests, which get no response.

Cost when no request_percentage is set anywhere: comparing the image's quota mapping with the
one last seen (identity) and a None check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gregor.broker.quota_gate import QuotaStates, is_follower_fetch
from gregor.protocol import api_keys
from gregor.security.principal import principal_of
from gregor.security.quotas import REQUEST_PERCENTAGE, QuotaState

# Kafka's cluster-action APIs among those a gregor node serves.
EXEMPT = frozenset(
    {
        api_keys.WRITE_TXN_MARKERS,
        api_keys.VOTE,
        api_keys.BEGIN_QUORUM_EPOCH,
        api_keys.END_QUORUM_EPOCH,
        api_keys.DESCRIBE_QUORUM,
        api_keys.ALTER_PARTITION,
        api_keys.ENVELOPE,
        api_keys.BROKER_REGISTRATION,
        api_keys.BROKER_HEARTBEAT,
        api_keys.ALLOCATE_PRODUCER_IDS,
    }
)
NANOS_TO_PERCENT_SECONDS = 100.0 / 1e9  # 1 s of a whole thread = 100 (% x s)


def exempt(key: int, version: int, request: Any) -> bool:
    """Is this request exempt from request quotas, as Kafka exempts it?"""
    if key in EXEMPT:
        return True
    if key == api_keys.FETCH:
        return is_follower_fetch(version, request)
    if key == api_keys.PRODUCE:
        return bool(request.acks == 0)
    return False


class RequestQuota:
    def __init__(
        self, quotas_of: Callable[[], Mapping[Any, Any]], window_num: int, window_size_s: int
    ) -> None:
        keys = (REQUEST_PERCENTAGE,)
        self._states = QuotaStates(quotas_of, window_num, window_size_s, keys)

    def state(self) -> QuotaState | None:
        """The request_percentage state; None when no such quota is set."""
        return self._states.get(REQUEST_PERCENTAGE)

    def charge(
        self,
        connection: Mapping[str, Any],
        header: Any,
        request: Any,
        elapsed_ns: int,
        now_ms: int,
    ) -> int:
        """Record `elapsed_ns` of loop time for the request's (user, client id): the throttle
        time in ms (0: within the quota, exempt, or no quota)."""
        state = self.state()
        if state is None:
            return 0
        if exempt(header.request_api_key, header.request_api_version, request):
            return 0
        self._states.expire_due(now_ms)
        user = principal_of(connection).name
        percent = elapsed_ns * NANOS_TO_PERCENT_SECONDS
        throttle = state.record(user, header.client_id or "", percent, now_ms)
        return min(throttle, self._states.window_ms)
