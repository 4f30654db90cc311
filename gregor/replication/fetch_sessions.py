"""Incremental fetch sessions (KIP-227), the leader's side, sans I/O: Kafka's FetchSessionCache
and FetchContext.

    cache = FetchSessionCache(max_slots=1000, eviction_ms=120_000)
    context = cache.new_context(session_id, epoch, uses_topic_ids, follower,
                                requested, forgotten, now_ms)
    # read context.topics (each topic's partitions look like a request's FetchPartition)
    error, session_id, kept = context.respond(answers_per_topic, now_ms)

A Fetch names a session id and an epoch. Id 0 with epoch 0, or an id with epoch 0: a full
fetch (the named session is closed first); the answer makes a session of its partitions if
the cache has a free slot (`max.incremental.fetch.session.cache.slots`) or can evict one, and
tells its id (0: none made). Epoch -1: a full fetch that makes no session (closing the named
one). Id X with epoch N > 0: incremental. The request names only the partitions added or
changed (fetch offset, log start, max bytes, epochs), `forgotten_topics_data` the ones the
client dropped; every partition of the session is read, and the answer holds only those with
something to tell: records, an error, a diverging epoch, or a high watermark, last stable
offset or log start offset other than the last one told. The next request must carry N+1.
An unknown id answers FETCH_SESSION_ID_NOT_FOUND, another epoch INVALID_FETCH_SESSION_EPOCH,
a request keyed by topic ids (v13+) to a session keyed by names or the reverse
FETCH_SESSION_TOPIC_ID_ERROR; the client then starts over with a full fetch.

A consumer's Fetch over its client quota is answered with no data instead (Kafka's
getThrottledResponse, `cache.throttled`): an incremental one keeps its session (its id, the
epoch moved on) and what the withheld answer would have told is taken back, so the next answer
tells it; a full one makes no session (id 0).

Sessions are cache entries by id, not tied to a connection. With the cache full, a new session
may evict (Kafka's rules): the least recently used one if unused for
`min.incremental.fetch.session.eviction.ms`; else the smallest evictable one, if the new one is
at least as valuable (followers' sessions first, then size). A follower's session is evictable
by consumers only once it is older than the eviction time.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

from gregor.protocol import errors

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
FETCH_SESSION_ID_NOT_FOUND = errors.BY_NAME["FETCH_SESSION_ID_NOT_FOUND"].code
INVALID_FETCH_SESSION_EPOCH = errors.BY_NAME["INVALID_FETCH_SESSION_EPOCH"].code
FETCH_SESSION_TOPIC_ID_ERROR = errors.BY_NAME["FETCH_SESSION_TOPIC_ID_ERROR"].code
_MAX_EPOCH = 0x7FFFFFFF


# (the epoch it was given at, (partition, high watermark, last stable, log start) told before,
# the partitions' order before or None)
Undo = tuple[int, list[tuple["CachedPartition", int, int, int]], list[tuple[Hashable, int]] | None]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (after the largest comes 1; a closed session stays closed)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


def records_size(records: Any) -> int:
    if records is None:
        return 0
    kind = type(records)
    if kind is bytes or kind is bytearray or isinstance(records, (bytes, bytearray, memoryview)):
        return len(records)
    return int(records.length)


class SessionWatch(Protocol):
    def touch(self, cached: CachedPartition) -> None: ...

    def read_last(self, cached: CachedPartition) -> None: ...

    def close(self) -> None: ...


class CachedPartition:
    """One partition of a session: what its last request asked (read as a request's
    FetchPartition would be) and what its last answer told."""

    __slots__ = (
        "topic", "partition", "fetch_offset", "log_start_offset", "partition_max_bytes",
        "current_leader_epoch", "last_fetched_epoch",
        "high_watermark", "last_stable_offset", "local_log_start_offset",
    )  # fmt: skip

    def __init__(self, topic: Hashable, fp: Any) -> None:
        self.topic = topic  # the topic's name, or its id in a session keyed by ids
        self.partition: int = fp.partition
        self.update(fp)
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.local_log_start_offset = -1

    def update(self, fp: Any) -> None:
        """Take a request's fetch parameters for this partition."""
        self.fetch_offset: int = fp.fetch_offset
        self.log_start_offset: int = getattr(fp, "log_start_offset", -1)
        self.partition_max_bytes: int = fp.partition_max_bytes
        self.current_leader_epoch: int = getattr(fp, "current_leader_epoch", -1)
        self.last_fetched_epoch: int = getattr(fp, "last_fetched_epoch", -1)

    def told(self, answer: Any) -> None:
        """Remember what an answer told of the partition (an error: told again once gone)."""
        self.high_watermark = -1 if answer.error_code else answer.high_watermark
        self.last_stable_offset = answer.last_stable_offset
        self.local_log_start_offset = answer.log_start_offset

    def must_answer(self, answer: Any) -> bool:
        """Whether an incremental answer carries this partition's `answer`."""
        if answer.error_code or records_size(answer.records):
            return True
        div = getattr(answer, "diverging_epoch", None)
        if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
            return True
        if getattr(answer, "preferred_read_replica", -1) >= 0:
            return True
        return (
            answer.high_watermark != self.high_watermark
            or answer.log_start_offset != self.local_log_start_offset
            or answer.last_stable_offset != self.last_stable_offset
        )


class SessionTopic:
    """A topic of a session as a request's FetchTopic reads: its name or id, its partitions."""

    __slots__ = ("topic", "topic_id", "partitions")

    def __init__(self, topic: Hashable, by_id: bool, partitions: list[CachedPartition]) -> None:
        self.topic = None if by_id else topic
        self.topic_id = topic if by_id else None
        self.partitions = partitions


class FetchSession:
    __slots__ = ("id", "privileged", "uses_topic_ids", "partitions", "creation_ms",
                 "last_used_ms", "epoch", "view", "undo", "members", "watch")  # fmt: skip

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[tuple[Hashable, int], CachedPartition],
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions  # in the order they are read
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)  # the epoch the next request must carry
        self.view: list[SessionTopic] | None = None  # topics(), until the partitions change
        # A consumer's: what its last answer changed, to take back if that answer is withheld
        # (`take_back`): the epoch it was given at, each partition's told values before, and
        # the order of the partitions before (None: unchanged).
        self.undo: Undo | None = None
        self.members = 0  # moves whenever a partition is added or dropped
        # What the reader keeps with a follower's session (the fetch handler's FetchWatch,
        # replication/fetch_watch.py): told of the partitions a request names (`touch`), of
        # those answered with records (`read_last`, instead of reordering the session) and
        # closed with the session.
        self.watch: SessionWatch | None = None

    def update(
        self, requested: Iterable[tuple[Hashable, Any]], forgotten: Iterable[tuple[Hashable, int]]
    ) -> None:
        """Add or update the request's partitions, drop the forgotten ones."""
        parts, watch = self.partitions, self.watch
        for topic, fp in requested:
            cached = parts.get((topic, fp.partition))
            if cached is None:
                parts[(topic, fp.partition)] = CachedPartition(topic, fp)
                self.view = None
                self.members += 1
            else:
                cached.update(fp)
                if watch is not None:
                    watch.touch(cached)
        for key in forgotten:
            if parts.pop(key, None) is not None:
                self.view = None
                self.members += 1

    def close(self) -> None:
        """The session left the cache."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def move_to_end(self, key: tuple[Hashable, int]) -> None:
        """Read `key` last from now on."""
        parts = self.partitions
        if key in parts and next(reversed(parts)) != key:
            parts[key] = parts.pop(key)
            self.view = None

    def take_back(self) -> None:
        """Forget the last answer (withheld for a quota): the partitions are as they were told
        before it, in the order they were read before it."""
        undo, self.undo = self.undo, None
        if undo is None or undo[0] != self.epoch:  # none, or another request came since
            return
        for cached, high_watermark, last_stable, log_start in undo[1]:
            cached.high_watermark = high_watermark
            cached.last_stable_offset = last_stable
            cached.local_log_start_offset = log_start
        order = undo[2]
        if order is not None:
            parts = self.partitions
            self.partitions = {key: parts[key] for key in order if key in parts}
            self.view = None
            self.members += 1

    def topics(self) -> list[SessionTopic]:
        """The session's partitions by topic, in session order (made again only after a
        change; its readers do not change it)."""
        if self.view is not None:
            return self.view
        by_topic: dict[Hashable, list[CachedPartition]] = {}
        for cached in self.partitions.values():
            group = by_topic.get(cached.topic)
            if group is None:
                by_topic[cached.topic] = [cached]
            else:
                group.append(cached)
        by_id = self.uses_topic_ids
        self.view = [SessionTopic(t, by_id, parts) for t, parts in by_topic.items()]
        return self.view


class FetchContext:
    """How one Fetch is read and answered: `topics` to read, `respond` to pick the answer."""

    error = 0
    topics: Sequence[Any] = ()

    def respond(
        self, answers: list[list[Any]], now_ms: int
    ) -> tuple[int, int, list[list[Any]] | None]:
        """(error code, session id, the answered partitions per topic of `topics`, None for
        all of them) for the partitions read, `answers` in the order of `topics`."""
        return self.error, INVALID_SESSION_ID, None


class SessionError(FetchContext):
    def __init__(self, error: int) -> None:
        self.error = error

    def respond(
        self, answers: list[list[Any]], now_ms: int
    ) -> tuple[int, int, list[list[Any]] | None]:
        return self.error, INVALID_SESSION_ID, [[] for _ in answers]


class Sessionless(FetchContext):
    def __init__(self, topics: Sequence[Any]) -> None:
        self.topics = topics


class FullFetch(FetchContext):
    """A full fetch whose answer makes a session of its partitions, if the cache lets it."""

    def __init__(
        self,
        cache: FetchSessionCache,
        topics: Sequence[Any],
        keys: list[Hashable],
        follower: bool,
        uses_topic_ids: bool,
    ) -> None:
        self.cache, self.topics, self.keys = cache, topics, keys
        self.follower, self.uses_topic_ids = follower, uses_topic_ids

    def respond(
        self, answers: list[list[Any]], now_ms: int
    ) -> tuple[int, int, list[list[Any]] | None]:
        size = sum(len(t.partitions) for t in self.topics)
        if not self.cache.has_room(self.follower, size, now_ms):
            return 0, INVALID_SESSION_ID, None
        parts: dict[tuple[Hashable, int], CachedPartition] = {}
        for topic, t, answered in zip(self.keys, self.topics, answers, strict=True):
            for fp, answer in zip(t.partitions, answered, strict=True):
                cached = CachedPartition(topic, fp)
                cached.told(answer)
                parts[(topic, fp.partition)] = cached
        session = self.cache.create(self.follower, self.uses_topic_ids, parts, now_ms)
        return 0, session.id, None


class IncrementalFetch(FetchContext):
    """An incremental fetch: every partition of the session is read, the changed answered."""

    def __init__(self, cache: FetchSessionCache, session: FetchSession) -> None:
        self.cache, self.session = cache, session
        self.expected_epoch = session.epoch
        self.topics = session.topics()

    def respond(
        self, answers: list[list[Any]], now_ms: int
    ) -> tuple[int, int, list[list[Any]] | None]:
        session = self.session
        if session.epoch != self.expected_epoch:  # another request of the session came first
            return INVALID_FETCH_SESSION_EPOCH, session.id, [[] for _ in answers]
        kept: list[list[Any]] = []
        moved: list[tuple[Hashable, int]] = []
        # a consumer's answer may be withheld for its quota: what it changes can be taken back
        before: list[tuple[CachedPartition, int, int, int]] | None = (
            None if session.privileged else []
        )
        parts = session.partitions
        by_id = session.uses_topic_ids
        assert len(answers) == len(self.topics)  # (zip's `strict`, without its keyword's cost)
        for t, answered in zip(self.topics, answers):  # noqa: B905 - asserted
            if not answered:  # (most topics of a follower's session at most Fetches)
                kept.append([])
                continue
            out = []
            key = t.topic_id if by_id else t.topic
            for answer in answered:  # those read: a quiet one may be left out by the reader
                cached = parts.get((key, answer.partition_index))
                if cached is None:  # forgotten by a request of the session meanwhile
                    continue
                size = records_size(answer.records)
                if size or cached.must_answer(answer):
                    if before is not None:
                        before.append(
                            (cached, cached.high_watermark, cached.last_stable_offset,
                             cached.local_log_start_offset)
                        )  # fmt: skip
                    cached.told(answer)
                    out.append(answer)
                    if size:
                        moved.append((cached.topic, cached.partition))
            kept.append(out)
        if before is not None:
            order = list(parts) if moved else None
            session.undo = (session.epoch, before, order)
        watch = session.watch
        for key in moved:  # those that got records are read last next time (fairness)
            if watch is None:
                session.move_to_end(key)
            else:
                watch.read_last(parts[key])
        return 0, session.id, kept


class FetchSessionCache:
    def __init__(
        self,
        max_slots: int = 1000,
        eviction_ms: int = 120_000,
        rng: random.Random | None = None,
    ) -> None:
        """`max_slots`: max.incremental.fetch.session.cache.slots; `eviction_ms`:
        min.incremental.fetch.session.eviction.ms."""
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0  # IncrementalFetchSessionEvictionsPerSec's count

    # -- Kafka's gauges -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.sessions)

    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    # -- requests -----------------------------------------------------------------------------

    def new_context(
        self,
        session_id: int,
        epoch: int,
        uses_topic_ids: bool,
        follower: bool,
        topics: Sequence[Any],
        forgotten: Iterable[tuple[Hashable, int]],
        now_ms: int,
    ) -> FetchContext:
        """The context of a Fetch v7+: `topics` are the request's (FetchTopic-like, keyed by
        `topic_id` when `uses_topic_ids`, else `topic`), `forgotten` its (topic, partition)s."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            if epoch == FINAL_EPOCH:
                return Sessionless(topics)
            keys = [_key_of(t, uses_topic_ids) for t in topics]
            return FullFetch(self, topics, keys, follower, uses_topic_ids)
        session = self.sessions.get(session_id)
        if session is None:
            return SessionError(FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionError(INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionError(FETCH_SESSION_TOPIC_ID_ERROR)
        requested = []  # (`_key_of`, inline; a loop: cheaper than a comprehension per Fetch)
        for t in topics:
            key = t.topic_id if uses_topic_ids else t.topic
            for fp in t.partitions:
                requested.append((key, fp))
        session.update(requested, forgotten)
        if not session.partitions:  # nothing left: closed, answered as a sessionless fetch
            self.remove(session_id)
            return Sessionless(topics)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetch(self, session)

    def throttled(
        self, session_id: int, epoch: int, answered_id: int, error: int
    ) -> tuple[int, int]:
        """(error code, session id) of a consumer's Fetch v7+ answered with no data for its
        quota instead of the answer it got (`session_id`, `epoch`: the request's;
        `answered_id`, `error`: that answer's), as Kafka's getThrottledResponse: a full fetch
        makes no session (the one made is dropped) and answers 0; an incremental one answers
        its session, which forgets what the withheld answer told; a session error is not told
        (NONE, 0) but a duplicate request's INVALID_FETCH_SESSION_EPOCH is."""
        if answered_id == INVALID_SESSION_ID:
            return 0, INVALID_SESSION_ID
        if epoch == INITIAL_EPOCH:
            self.remove(answered_id)
            return 0, INVALID_SESSION_ID
        if error == INVALID_FETCH_SESSION_EPOCH:
            return error, answered_id
        session = self.sessions.get(answered_id)
        if session is not None and answered_id == session_id:
            session.take_back()
        return 0, answered_id

    # -- the cache ----------------------------------------------------------------------------

    def has_room(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Whether a new session fits, evicting one if Kafka's rules allow."""
        if self.max_slots <= 0:
            return False
        return len(self.sessions) < self.max_slots or self._try_evict(privileged, size, now_ms)

    def create(
        self,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[tuple[Hashable, int], CachedPartition],
        now_ms: int,
    ) -> FetchSession:
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = self.rng.randint(1, _MAX_EPOCH)
        session = FetchSession(session_id, privileged, uses_topic_ids, partitions, now_ms)
        self.sessions[session_id] = session
        return session

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            return self._evict(stalest)
        old = [s for s in self.sessions.values() if now_ms - s.creation_ms > self.eviction_ms]
        if privileged:  # a follower may also evict any consumer's session, however young
            old += [
                s
                for s in self.sessions.values()
                if not s.privileged and now_ms - s.creation_ms <= self.eviction_ms
            ]
        if not old:
            return False
        victim = min(old, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size, 0) < (victim.privileged, len(victim.partitions), victim.id):
            return False
        return self._evict(victim)

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        session.close()
        self.evictions += 1
        return True


def _key_of(topic: Any, uses_topic_ids: bool) -> Hashable:
    return topic.topic_id if uses_topic_ids else topic.topic


__all__ = [
    "FETCH_SESSION_ID_NOT_FOUND",
    "FETCH_SESSION_TOPIC_ID_ERROR",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_FETCH_SESSION_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "FullFetch",
    "IncrementalFetch",
    "SessionError",
    "Sessionless",
    "next_epoch",
]
