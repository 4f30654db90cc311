"""Which leaders this broker's follower partitions copy from, and when each is asked next:
the replica fetchers' decisions, sans I/O (Kafka's ReplicaFetcherManager and the loop of its
ReplicaFetcherThread; what one Fetch asks and what its answer does is follower.py's).

    fetchers = ReplicaFetchers(config, partition_of=replicas.get, broker_epoch=epoch_of_me,
                               endpoint_of=broker_endpoint, socket_timeout_ms=30_000)
    fetchers.apply(replicas.take_follower_changes())   # after each metadata change
    result = fetchers.poll(now_ms)          # a Fetch per leader ready now; the next deadline
    fetchers.on_response(out, answer, now_ms)          # or on_error(out, exc, now_ms)

One session per leader broker (`num.replica.fetchers` = 1), made when the first partition needs
it and dropped when its last one goes; an answer to a dropped session is ignored (its
partitions may lead now). A session has one Fetch out at a time: it asks its leader's
registered listener (read from the metadata at each request, so a leader that moved ports is
followed), with a timeout of replica.fetch.wait.max.ms + replica.socket.timeout.ms, and asks
again as soon as the answer is applied. With nothing ready it waits until a partition is
added or a back-off ends (and polls at least every second). No Fetch goes out before this
broker is registered (its broker epoch is the Fetch's replica_epoch, KIP-903): it looks again
every 200 ms. A failed request, or a leader with no endpoint known, backs its partitions off
replica.fetch.backoff.ms.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from gregor.protocol import api_keys
from gregor.protocol.outbound import Outbound, Poll, earliest
from gregor.replication.follower import FETCH_VERSION, FetcherConfig, FollowerFetcher, Sent
from gregor.replication.partition import FollowerChange, Partition
from gregor.security.replication_quotas import ReplicationQuota

log = logging.getLogger("gregor.replica_fetcher")

NOT_REGISTERED_RECHECK_MS = 200
IDLE_RECHECK_MS = 1000


def _noop() -> None:
    pass


class FetcherSession:
    """The fetching from one leader: its partitions (FollowerFetcher) and its one Fetch out."""

    def __init__(
        self,
        leader_id: int,
        config: FetcherConfig,
        fetcher: type[FollowerFetcher] = FollowerFetcher,
        quota: ReplicationQuota | None = None,
        stamp: Callable[[], object] | None = None,
    ) -> None:
        self.leader_id = leader_id
        self.state = fetcher(leader_id, config, quota, stamp)
        self.in_flight: dict[tuple[uuid.UUID, int], Sent] | None = None
        self.failures = 0  # in a row: the first is logged at INFO, the rest at DEBUG


class ReplicaFetchers:
    def __init__(
        self,
        config: FetcherConfig,
        *,
        partition_of: Callable[[str, int], Partition | None],
        broker_epoch: Callable[[], int],
        endpoint_of: Callable[[int], tuple[str, int] | None],
        socket_timeout_ms: int,
        fetcher: type[FollowerFetcher] = FollowerFetcher,
        quota: ReplicationQuota | None = None,
        stamp: Callable[[], object] | None = None,
    ) -> None:
        """`fetcher`: what one session's Fetch asks and does with its answer (follower.py's
        FollowerFetcher; the simulation's broken variants give a subclass). `quota`: the
        follower replication throttle all sessions share. `stamp`: what moves when a
        partition's fetch may change without the fetchers (ReplicaManager.stamp; None: each
        Fetch looks at every partition of its session)."""
        self.config = config
        self.fetcher = fetcher
        self.quota = quota
        self.stamp = stamp
        self.partition_of = partition_of
        self.broker_epoch = broker_epoch
        self.endpoint_of = endpoint_of
        self.request_timeout_ms = config.max_wait_ms + socket_timeout_ms
        self.sessions: dict[int, FetcherSession] = {}
        self.wakeup: Callable[[], None] = _noop  # set by the driver

    def apply(self, changes: list[FollowerChange]) -> None:
        """Move each changed partition to the session of its new leader (or out of them)."""
        for change in changes:
            for session in self.sessions.values():
                session.state.remove(change.topic, change.index)
            if change.leader is None or change.leader < 0:
                continue
            p = self.partition_of(change.topic, change.index)
            if p is None or p.is_leader:
                continue
            if change.leader not in self.sessions:
                session = FetcherSession(
                    change.leader, self.config, self.fetcher, self.quota, self.stamp
                )
                self.sessions[change.leader] = session
                log.info("replica fetcher for broker %d started", change.leader)
            self.sessions[change.leader].state.add(p, change.leader_epoch)
        for leader_id in [b for b, s in self.sessions.items() if not len(s.state)]:
            del self.sessions[leader_id]
            log.info("replica fetcher for broker %d stopped: nothing to fetch from it", leader_id)
        if changes:
            self.wakeup()

    def poll(self, now_ms: int) -> Poll:
        out: list[Outbound] = []
        deadline: int | None = None
        epoch = self.broker_epoch()
        for session in self.sessions.values():
            if session.in_flight is not None:
                continue  # its answer wakes us
            if epoch < 0:  # not registered yet
                deadline = earliest(deadline, now_ms + NOT_REGISTERED_RECHECK_MS)
                continue
            request, next_ms = self._next_fetch(session, now_ms, epoch)
            if request is not None:
                out.append(request)
            deadline = earliest(deadline, next_ms)
        return Poll(out, deadline)

    def _next_fetch(
        self, session: FetcherSession, now_ms: int, epoch: int
    ) -> tuple[Outbound | None, int | None]:
        """The session's next Fetch if one is ready, else when to look again."""
        built = session.state.build_request(now_ms, epoch)
        if built is not None:
            endpoint = self.endpoint_of(session.leader_id)
            if endpoint is not None:
                request, sent = built
                session.in_flight = sent
                return Outbound(
                    api_keys.FETCH,
                    FETCH_VERSION,
                    request,
                    destination=session.leader_id,
                    timeout_ms=self.request_timeout_ms,
                    address=endpoint,
                    context=session,
                ), None
            log.debug("no endpoint for broker %d yet", session.leader_id)
            session.state.handle_error(built[1], now_ms)  # backs every partition off
        ready = session.state.next_ready_ms()
        if ready is None or ready <= now_ms:
            return None, now_ms + IDLE_RECHECK_MS
        return None, min(ready, now_ms + IDLE_RECHECK_MS)

    def _take(self, out: Outbound) -> tuple[FetcherSession, dict[tuple[uuid.UUID, int], Sent]]:
        session: FetcherSession = out.context
        sent = session.in_flight
        assert sent is not None, "an answer with no Fetch out"
        session.in_flight = None
        return session, sent

    def _current(self, session: FetcherSession) -> bool:
        return self.sessions.get(session.leader_id) is session

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        session, sent = self._take(out)
        if self._current(session):
            session.failures = 0
            session.state.handle_response(sent, answer, now_ms)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        session, sent = self._take(out)
        if not self._current(session):
            return
        session.failures += 1
        level = logging.INFO if session.failures == 1 else logging.DEBUG
        log.log(level, "fetch from broker %d failed: %s", session.leader_id, error)
        session.state.handle_error(sent, now_ms)
