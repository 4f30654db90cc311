"""The follower side of replication for one source broker, sans I/O (Kafka's
AbstractFetcherThread and ReplicaFetcherThread without the thread).

    fetcher = FollowerFetcher(leader_id=2, config=FetcherConfig(replica_id=1))
    fetcher.add(partition, leader_epoch=7)
    request, sent = fetcher.build_request(now_ms, broker_epoch)     # None: nothing to fetch
    fetcher.handle_response(sent, response, now_ms)                  # or handle_error(sent, now_ms)

One fetcher per leader broker (Kafka's num.replica.fetchers = 1), one Fetch in flight at a
time (the caller's loop), every partition followed from that leader in it: v15, topic ids,
`replica_state` = (this broker, its broker epoch), replica.fetch.wait.max.ms / min.bytes /
response.max.bytes for the request and replica.fetch.max.bytes per partition. Each partition
asks from its log end offset, naming the epoch of its last batch (`last_fetched_epoch`, the
latest of its leader-epoch cache) and the leader epoch it follows (`current_leader_epoch`).

Fetch sessions (KIP-227, Kafka's FetchSessionHandler): the first request is full (session id
0, epoch 0); once the leader answers a session id, each request is incremental: it names only
the partitions added or whose fetch (offset, log start, epochs) changed, and forgets those no
longer fetched (removed, backed off, fenced, throttled); a partition missing from an answer
had nothing new. An answer FETCH_SESSION_ID_NOT_FOUND starts over with a new session, any
other error, or a failed request, closes the session with the next full request (the
session's id, epoch 0). A leader that answers session id 0 gets full requests.

An incremental request looks only at the partitions that may have changed since the last one
(`dirty`): those the fetcher itself changed (answered, appended to, truncated, backed off,
fenced, added anew) and those backed off until their back-off ends. What changes a partition's
fetch without the fetcher (a log's start moved by retention or DeleteRecords, a log offline, a
partition applied or removed) moves the `stamp` the owner gives (ReplicaManager.stamp); a new
stamp, the throttle over its bound now or at the last request, a full request, or no stamp
given makes the request look at every partition, as Kafka's fetcher does at every request.

Truncation (KIP-320 "truncate on fetch", what Kafka does since 2.7; no OffsetForLeaderEpoch
round trip): when the leader answers `diverging_epoch` = (epoch E, end offset X), nothing is
appended and the log is truncated (`truncation_offset`, Kafka's getOffsetTruncationState):
to min(our end of E, X, our LEO) when we know E; when our largest epoch up to E is an older
one, to min(its end, our LEO) only, and the next Fetch, naming that older epoch, may be told
to go further. A log with no epochs at all names none (-1) and is never told to truncate: only
logs from before leader epochs existed are like that.

Answers per partition:

  NONE                  append the batches as they are (Log.append_as_follower: CRC checked,
                        offsets and epochs kept, producer state updated), then the follower's
                        HW = min(the leader's HW, our LEO) (it may go down), and the log start
                        offset moves up to the leader's (DeleteRecords, retention).
  OFFSET_OUT_OF_RANGE   below the leader's log start: truncate fully and start at it; above
                        its log end (a log with no epochs that is ahead of the leader):
                        truncate to the leader's HW, an offset both logs hold; else back off.
  FENCED_LEADER_EPOCH   the leader is in a newer epoch than the metadata we applied: stop
                        fetching the partition until the metadata gives it a new epoch (`add`).
  anything else         back off the partition for replica.fetch.backoff.ms (NOT_LEADER,
                        UNKNOWN_LEADER_EPOCH while the leader applies its metadata, ...).

A request that fails as a whole (connection lost, timeout) backs off every partition in it.
An answer for a partition whose state changed meanwhile (removed, a new epoch, truncated or
appended to) is ignored, as Kafka does.

Replication throttle (`follower.replication.throttled.rate`, security/replication_quotas.py):
a partition named by its topic's `follower.replication.throttled.replicas` is left out of the
Fetch while the follower quota is exceeded, unless it is in sync: its lag (the leader's HW
minus our log end, as of the last answer that brought records) is known and 0, as Kafka's
fetcher judges it. The bytes appended to a throttled partition are recorded in the quota.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import FetchRequest
from gregor.replication.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from gregor.replication.partition import Partition
from gregor.security.replication_quotas import ReplicationQuota
from gregor.storage.leader_epoch import LeaderEpochCache
from gregor.storage.log import Log

log = logging.getLogger("gregor.replication.follower")

_UNSEEN = object()  # no stamp yet (or none given): look at every partition
_BY_ORDER = attrgetter("order")

FETCH_VERSION = 15
FENCED_LEADER_EPOCH = errors.BY_NAME["FENCED_LEADER_EPOCH"].code


@dataclass(frozen=True)
class FetcherConfig:
    """Kafka's replica.fetch.* configs (their defaults)."""

    replica_id: int
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms


class Sent(NamedTuple):
    """What one partition of a Fetch asked for (made once a partition moves: a tuple is the
    quickest immutable record to make)."""

    topic: str
    index: int  # type: ignore[assignment]  # (the partition's index, over tuple.index)
    fetch_offset: int
    leader_epoch: int


# What a partition's Fetch asks: (fetch offset, log start, leader epoch, last fetched epoch)
Asked = tuple[int, int, int, int]


@dataclass(slots=True)
class FetchState:
    partition: Partition
    leader_epoch: int
    delayed_until_ms: int = 0
    fenced: bool = False  # until the metadata gives a new epoch
    lag: int | None = None  # the leader's HW - our LEO, after the last answer with records
    # what the leader's fetch session holds for the partition (None: not in it), as asked
    held: Asked | None = None
    sent: Sent | None = None
    order: int = 0  # its place among the fetcher's partitions (a request names them in it)
    key: tuple[uuid.UUID, int] = field(init=False)
    log: Log = field(init=False)  # the partition's

    def __post_init__(self) -> None:
        self.key = (self.partition.topic_id, self.partition.index)
        self.log = self.partition.log

    def ready(self, now_ms: int) -> bool:
        return not self.fenced and self.delayed_until_ms <= now_ms

    @property
    def in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0


@dataclass
class FetchOutcome:
    """What a response did (logs, tests and the fetch loop's pacing)."""

    appended_bytes: int = 0
    truncated: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, index, offset)
    errors: dict[tuple[str, int], int] = field(default_factory=dict)


def truncation_offset(
    cache: LeaderEpochCache,
    log_end_offset: int,
    high_watermark: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> tuple[int, bool]:
    """(offset to truncate to, whether that is the final answer) for a leader's
    diverging_epoch (leader_epoch, leader_end_offset) against our epoch history."""
    if leader_end_offset < 0:
        return min(high_watermark, log_end_offset), True
    if leader_epoch < 0:
        return min(leader_end_offset, log_end_offset), True
    epoch, end = cache.end_offset_for(leader_epoch, log_end_offset)
    if end < 0:  # we have no epoch up to the leader's: its end offset is all we have
        return min(leader_end_offset, log_end_offset), True
    if epoch != leader_epoch:  # we never had its epoch: go back to the end of our older one
        return min(end, log_end_offset), False
    return min(end, leader_end_offset, log_end_offset), True


class FollowerFetcher:
    def __init__(
        self,
        leader_id: int,
        config: FetcherConfig,
        quota: ReplicationQuota | None = None,
        stamp: Callable[[], object] | None = None,
    ) -> None:
        """`stamp`: a value that moves whenever a partition's fetch may change without the
        fetcher (ReplicaManager.stamp); None: every request looks at every partition."""
        self.leader_id = leader_id
        self.config = config
        self.quota = quota  # the follower replication throttle; None: never throttled
        self.stamp = stamp
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._order = itertools.count()
        # The partitions an incremental request looks at (module docstring), in no order; a
        # key no longer fetched is passed over. What the stamp and the throttle were at the
        # last request: either moving makes the next one look at every partition.
        self.dirty: dict[tuple[str, int], None] = {}
        self._seen_stamp: object = _UNSEEN
        self._was_throttling = False
        # the fetch session with the leader: its id and the epoch of the next request
        # (INITIAL_EPOCH: a full one), what each partition in the leader's session asked
        # (also on its FetchState, `held`), and the partitions it holds that the next
        # incremental request forgets
        self.session_id = INVALID_SESSION_ID
        self.session_epoch = INITIAL_EPOCH
        self.session: dict[tuple[uuid.UUID, int], Sent] = {}
        self.forget: set[tuple[uuid.UUID, int]] = set()
        self.full_in_flight = True
        self._replica_state: Any = None  # this broker and its epoch, as the last request named

    # -- which partitions ---------------------------------------------------------------------

    def add(self, partition: Partition, leader_epoch: int) -> None:
        """Fetch `partition` from this leader in `leader_epoch` (again, at once, if it was
        here in an older one)."""
        key = (partition.topic, partition.index)
        state = self.partitions.get(key)
        if state is not None:
            if state.partition is partition and state.leader_epoch == leader_epoch:
                return
            self._leave_session(state)
            order = state.order  # (the dict keeps the key's place)
        else:
            order = next(self._order)
        self.partitions[key] = FetchState(partition, leader_epoch, order=order)
        self.dirty[key] = None

    def remove(self, topic: str, index: int) -> None:
        state = self.partitions.pop((topic, index), None)
        if state is not None:
            self._leave_session(state)

    def _leave_session(self, state: FetchState) -> None:
        """The partition is no longer fetched as `state` says: the next request forgets it
        (unless it asks for it again)."""
        if state.held is not None:
            state.held = None
            self.session.pop(state.key, None)
            self.forget.add(state.key)

    def __len__(self) -> int:
        return len(self.partitions)

    def next_ready_ms(self) -> int | None:
        """When the earliest backed-off partition may be fetched again (None: none waits)."""
        times = [s.delayed_until_ms for s in self.partitions.values() if not s.fenced]
        return min(times) if times else None

    # -- the request --------------------------------------------------------------------------

    def build_request(
        self, now_ms: int, broker_epoch: int
    ) -> tuple[Any, dict[tuple[uuid.UUID, int], Sent]] | None:
        """The Fetch for every partition ready now (of an incremental session: those added or
        changed, and the forgotten), and what each partition of the session asks (the same
        dict from one request to the next: it holds until the next call); None if no
        partition is ready.

        An incremental request looks at the dirty partitions only, unless something moved
        that the fetcher does not see (module docstring); each partition looked at costs a
        few attribute reads: what it asked last is on its FetchState, so parts are built only
        for the partitions that changed."""
        full = self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)
        if full:
            self.session.clear()
            self.forget.clear()
        quota = self.quota
        # the throttle holds a partition back only while its rate is over the bound
        throttling = quota is not None and quota.exceeded(now_ms)
        # (read before the partitions: a change after it moves it again for the next request)
        stamp = self.stamp() if self.stamp is not None else _UNSEEN
        states: Iterable[FetchState]
        if (
            full
            or throttling
            or self._was_throttling
            or stamp is _UNSEEN
            or stamp != self._seen_stamp
        ):
            states = self.partitions.values()
        else:  # the dirty ones still fetched, in the order of the fetcher's partitions
            partitions = self.partitions
            states = []
            for key in self.dirty:  # (a loop: a comprehension costs a function's making)
                state = partitions.get(key)
                if state is not None:
                    states.append(state)
            if len(states) > 1:
                states.sort(key=_BY_ORDER)
        self._seen_stamp, self._was_throttling = stamp, throttling
        self.dirty.clear()
        by_topic = self._look(states, now_ms, full, throttling)
        if not self.session:
            return None
        forgotten: dict[uuid.UUID, list[int]] = {}
        for tid, index in self.forget:
            forgotten.setdefault(tid, []).append(index)
        self.forget.clear()
        self.full_in_flight = full
        return self._request(broker_epoch, by_topic, forgotten), self.session

    def _look(
        self, states: Iterable[FetchState], now_ms: int, full: bool, throttling: bool
    ) -> dict[uuid.UUID, list[Any]]:
        """Look at `states`: each one ready and changed (or every one ready, in a full
        request) is named, each one held back leaves the session; the parts named, by topic.
        One held back until its back-off ends stays dirty."""
        session, forget, quota = self.session, self.forget, self.quota
        max_bytes = self.config.partition_max_bytes
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for state in states:
            lg = state.log
            if (
                state.fenced
                or state.delayed_until_ms > now_ms
                or lg.offline  # a failed log dir: nothing to append to
                or (throttling and self._throttled(state, quota))  # type: ignore[arg-type]
            ):
                if state.delayed_until_ms > now_ms and not state.fenced:
                    self.dirty[state.partition.topic, state.partition.index] = None
                if state.held is not None:
                    state.held = None
                    if not full:
                        del session[state.key]
                        forget.add(state.key)
                continue
            asked = (lg.log_end_offset, lg.log_start_offset, state.leader_epoch,
                     lg.leader_epochs.latest_epoch)  # fmt: skip
            if asked == state.held:
                if not full:
                    continue  # the leader's session has it as it is
            else:
                if state.held is None and not full:
                    forget.discard(state.key)
                state.held = asked
                state.sent = Sent(state.partition.topic, state.partition.index, asked[0], asked[2])
            key = state.key
            sent = state.sent
            assert sent is not None
            session[key] = sent
            by_topic.setdefault(key[0], []).append(
                FetchRequest.FetchPartition(
                    partition=key[1],
                    current_leader_epoch=asked[2],
                    fetch_offset=asked[0],
                    last_fetched_epoch=asked[3],
                    log_start_offset=asked[1],
                    partition_max_bytes=max_bytes,
                )
            )
        return by_topic

    @staticmethod
    def _throttled(state: FetchState, quota: ReplicationQuota) -> bool:
        """Held back while the follower throttle's rate is over its bound (the caller knows
        it is): asked again once it is back under."""
        lag = state.lag
        if lag is not None and lag <= 0:
            return False  # in sync: never held back
        p = state.partition
        return quota.is_throttled(p.topic, p.index)

    def _request(
        self,
        broker_epoch: int,
        by_topic: dict[uuid.UUID, list[Any]],
        forgotten: dict[uuid.UUID, list[int]],
    ) -> Any:
        cfg = self.config
        replica_state = self._replica_state
        if replica_state is None or replica_state.replica_epoch != broker_epoch:
            replica_state = FetchRequest.ReplicaState(
                replica_id=cfg.replica_id, replica_epoch=broker_epoch
            )
            self._replica_state = replica_state
        return FetchRequest(
            replica_state=replica_state,
            max_wait_ms=cfg.max_wait_ms,
            min_bytes=cfg.min_bytes,
            max_bytes=cfg.max_bytes,
            isolation_level=0,
            session_id=self.session_id,
            session_epoch=self.session_epoch,
            topics=[
                FetchRequest.FetchTopic(topic_id=tid, partitions=parts)
                for tid, parts in by_topic.items()
            ],
            forgotten_topics_data=[
                FetchRequest.ForgottenTopic(topic_id=tid, partitions=parts)
                for tid, parts in forgotten.items()
            ],
            rack_id="",
        )

    def _session_answered(self, response: Any) -> None:
        """Move the session on after an answer without a top-level error."""
        if response.session_id == INVALID_SESSION_ID:
            self.session_id, self.session_epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif self.full_in_flight:
            self.session_id, self.session_epoch = response.session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.session_epoch = next_epoch(self.session_epoch)

    def _session_failed(self, code: int | None) -> None:
        """After an error answer (`code`) or a failed request (None): the next request is
        full, in a new session if the leader no longer knows this one."""
        if code == FETCH_SESSION_ID_NOT_FOUND:
            self.session_id = INVALID_SESSION_ID
        self.session_epoch = INITIAL_EPOCH

    # -- the answer ---------------------------------------------------------------------------

    def handle_error(self, sent: dict[tuple[uuid.UUID, int], Sent], now_ms: int) -> None:
        """The whole Fetch failed: back off every partition it asked for."""
        self._session_failed(None)
        dirty = self.dirty
        for s in sent.values():
            key = (s.topic, s.index)
            state = self.partitions.get(key)
            if state is not None and state.leader_epoch == s.leader_epoch:
                state.delayed_until_ms = now_ms + self.config.backoff_ms
                dirty[key] = None

    def handle_response(
        self, sent: dict[tuple[uuid.UUID, int], Sent], response: Any, now_ms: int
    ) -> FetchOutcome:
        outcome = FetchOutcome()
        code = response.error_code
        if code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            log.info("fetch session %d with broker %d: %s; starting a new one", self.session_id,
                     self.leader_id, errors.name_of(code))  # fmt: skip
            self._session_failed(code)  # asked again at once, in full
            return outcome
        if code != errors.NONE:
            log.info(
                "fetch from broker %d failed: %s",
                self.leader_id,
                errors.name_of(response.error_code),
            )
            self.handle_error(sent, now_ms)
            return outcome
        self._session_answered(response)
        dirty = self.dirty
        for t in response.responses:
            for pd in t.partitions:
                s = sent.get((t.topic_id, pd.partition_index))
                if s is None:
                    continue
                key = (s.topic, s.index)
                dirty[key] = None  # whatever its answer does, the next request looks at it
                state = self.partitions.get(key)
                if (
                    state is None
                    or state.fenced
                    or state.leader_epoch != s.leader_epoch
                    or state.partition.log.log_end_offset != s.fetch_offset
                ):
                    continue  # changed while the fetch was out
                try:
                    self._handle_partition(state, s, pd, now_ms, outcome)
                except KafkaError as exc:
                    # A failed log dir has said so already, in one line for the whole dir.
                    level = (
                        logging.DEBUG if exc.code == errors.KAFKA_STORAGE_ERROR else logging.WARNING
                    )
                    log.log(level, "%s: replicating from broker %d at offset %d failed: %s",
                            state.partition.name, self.leader_id, s.fetch_offset, exc)  # fmt: skip
                    outcome.errors[(s.topic, s.index)] = exc.code
                    state.delayed_until_ms = now_ms + self.config.backoff_ms
        return outcome

    def _handle_partition(
        self, state: FetchState, s: Sent, pd: Any, now_ms: int, outcome: FetchOutcome
    ) -> None:
        p = state.partition
        code = pd.error_code
        if code == errors.NONE:
            div = pd.diverging_epoch
            if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
                outcome.truncated.append(
                    (s.topic, s.index, self._truncate(p, div.epoch, div.end_offset))
                )
                return
            size = self._append(p, pd, now_ms)
            outcome.appended_bytes += size
            if size > 0 or state.lag is None:
                state.lag = max(0, pd.high_watermark - p.log.log_end_offset)
            quota = self.quota
            # the topic's config (a dict read) before the rate's (a config parsed)
            if size > 0 and quota is not None and quota.is_throttled(s.topic, s.index):
                if quota.active():
                    quota.record(size, now_ms)
            return
        outcome.errors[(s.topic, s.index)] = code
        if code == errors.OFFSET_OUT_OF_RANGE:
            if not self._out_of_range(p, pd, s.fetch_offset):
                state.delayed_until_ms = now_ms + self.config.backoff_ms
            return
        if code == FENCED_LEADER_EPOCH:
            log.info("%s: broker %d leads in an epoch newer than %d; waiting for metadata",
                     p.name, self.leader_id, s.leader_epoch)  # fmt: skip
            state.fenced = True
            return
        log.debug("%s: fetch from broker %d: %s", p.name, self.leader_id, errors.name_of(code))
        state.delayed_until_ms = now_ms + self.config.backoff_ms

    def _append(self, p: Partition, pd: Any, now_ms: int) -> int:
        lg = p.log
        size = 0
        records = pd.records
        if records is not None and len(records):
            info = p.append_as_follower(records, now_ms)
            size = info.valid_bytes if info is not None else 0
        lg.update_high_watermark(min(pd.high_watermark, lg.log_end_offset))
        leader_start = pd.log_start_offset
        if leader_start > lg.log_start_offset:
            target = min(leader_start, lg.high_watermark)
            if target > lg.log_start_offset:
                lg.increment_log_start_offset(target)
        return size

    def _truncate(self, p: Partition, leader_epoch: int, leader_end_offset: int) -> int:
        lg = p.log
        offset, final = truncation_offset(
            lg.leader_epochs, lg.log_end_offset, lg.high_watermark, leader_epoch, leader_end_offset
        )
        if offset < lg.high_watermark:
            log.warning(
                "%s: truncating to %d, below the high watermark %d",
                p.name,
                offset,
                lg.high_watermark,
            )
        log.info(
            "%s: truncating from %d to %d (leader %d's epoch %d ends at %d%s)",
            p.name, lg.log_end_offset, offset, self.leader_id, leader_epoch, leader_end_offset,
            "" if final else "; our epochs end earlier, asking again",
        )  # fmt: skip
        lg.truncate_to(offset)
        return offset

    def _out_of_range(self, p: Partition, pd: Any, fetch_offset: int) -> bool:
        lg = p.log
        leader_start, leader_hw = pd.log_start_offset, pd.high_watermark
        if 0 <= fetch_offset < leader_start:
            log.warning("%s: offset %d is below broker %d's log start %d: starting the log again there",
                        p.name, fetch_offset, self.leader_id, leader_start)  # fmt: skip
            lg.truncate_fully_and_start_at(leader_start)
            return True
        if 0 <= leader_hw < fetch_offset:
            log.warning("%s: offset %d is past broker %d's log end: truncating to its high watermark %d",
                        p.name, fetch_offset, self.leader_id, leader_hw)  # fmt: skip
            lg.truncate_to(leader_hw)
            return True
        return False
