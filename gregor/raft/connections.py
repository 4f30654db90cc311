"""Outbound requests per destination, as Kafka's RequestManager: at most one in flight to each
node, a response counts only if it carries the correlation id of that request, a request with no
answer after `request_timeout_ms` is given up, and a failed one is retried after
`retry_backoff_ms`. A state transition forgets everything in flight (`reset_all`), so a late
answer to a request sent in an earlier state is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.raft.leader import NEVER


@dataclass(slots=True)
class _Connection:
    inflight: int | None = None  # correlation id of the request awaiting its response
    sent_ms: int = 0
    backoff_until_ms: int = 0


class RequestManager:
    def __init__(self, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._connections: dict[int, _Connection] = {}

    def _get(self, destination: int) -> _Connection:
        conn = self._connections.get(destination)
        if conn is None:
            conn = self._connections[destination] = _Connection()
        return conn

    def is_ready(self, destination: int, now_ms: int) -> bool:
        conn = self._connections.get(destination)
        return conn is None or (conn.inflight is None and now_ms >= conn.backoff_until_ms)

    def has_inflight(self) -> bool:
        return any(c.inflight is not None for c in self._connections.values())

    def on_sent(self, destination: int, correlation_id: int, now_ms: int) -> None:
        conn = self._get(destination)
        conn.inflight = correlation_id
        conn.sent_ms = now_ms

    def complete(self, source: int, correlation_id: int) -> bool:
        """True (and the request is done) if this answers the request in flight to `source`."""
        conn = self._connections.get(source)
        if conn is None or conn.inflight != correlation_id:
            return False
        conn.inflight = None
        return True

    def backoff(self, destination: int, now_ms: int) -> None:
        self._get(destination).backoff_until_ms = now_ms + self.retry_backoff_ms

    def expire(self, now_ms: int) -> None:
        """Give up requests unanswered for the request timeout; retry them after the backoff."""
        for conn in self._connections.values():
            if conn.inflight is not None and now_ms >= conn.sent_ms + self.request_timeout_ms:
                conn.inflight = None
                conn.backoff_until_ms = now_ms + self.retry_backoff_ms

    def reset_all(self) -> None:
        self._connections.clear()

    def next_deadline(self, now_ms: int) -> int:
        deadline = NEVER
        for conn in self._connections.values():
            if conn.inflight is not None:
                deadline = min(deadline, conn.sent_ms + self.request_timeout_ms)
            elif conn.backoff_until_ms > now_ms:
                deadline = min(deadline, conn.backoff_until_ms)
        return deadline
