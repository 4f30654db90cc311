"""The fetch session cache (KIP-227, replication/fetch_sessions.py), sans I/O: full fetches make
sessions, incremental ones add, update and forget partitions and are answered only with the
partitions that changed, epochs are checked, epoch -1 closes, and the cache evicts as Kafka's."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace as NS
from typing import Any

import pytest

from gregor.replication.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSessionCache,
    FullFetch,
    IncrementalFetch,
    Sessionless,
    next_epoch,
)

pytestmark = pytest.mark.unit

NOW = 1_000_000


def fp(partition: int, offset: int = 0, max_bytes: int = 1024) -> Any:
    return NS(
        partition=partition,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
        current_leader_epoch=-1,
        last_fetched_epoch=-1,
    )


def topic(name: str, *parts: Any) -> Any:
    return NS(topic=name, topic_id=None, partitions=list(parts))


def answer(hw: int = 10, records: bytes = b"", error: int = 0, start: int = 0) -> Any:
    return NS(
        partition_index=0,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=start,
        records=records,
        diverging_epoch=NS(epoch=-1, end_offset=-1),
        preferred_read_replica=-1,
    )


def answer_all(context: Any, by_key: dict[tuple[str, int], Any] | None = None) -> list[list[Any]]:
    """An answer for every partition the context reads (hw 10 unless given)."""
    by_key = by_key or {}
    out = []
    for t in context.topics:
        answers = []
        for p in t.partitions:
            a = by_key.get((t.topic if t.topic is not None else t.topic_id, p.partition), answer())
            a.partition_index = p.partition
            answers.append(a)
        out.append(answers)
    return out


def read_keys(context: Any) -> list[tuple[str, int, int]]:
    return [(t.topic, p.partition, p.fetch_offset) for t in context.topics for p in t.partitions]


def kept_keys(context: Any, kept: list[list[Any]], answers: list[list[Any]]) -> list[Any]:
    out = []
    for t, ks, ans in zip(context.topics, kept, answers, strict=True):
        for p, a in zip(t.partitions, ans, strict=True):
            if any(a is k for k in ks):
                out.append((t.topic, p.partition))
    return out


def open_session(cache: FetchSessionCache, follower: bool = False, n: int = 3) -> int:
    topics = [topic("a", *[fp(i) for i in range(n)])]
    ctx = cache.new_context(0, 0, False, follower, topics, [], NOW)
    assert isinstance(ctx, FullFetch)
    error, sid, kept = ctx.respond(answer_all(ctx), NOW)
    assert error == 0 and sid > 0 and kept is None
    return sid


def test_full_fetch_makes_a_session_with_every_partition() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    assert len(cache) == 1 and cache.total_partitions() == 3
    assert cache.sessions[sid].epoch == 1


def test_epoch_minus_one_is_sessionless_and_closes_the_named_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    ctx = cache.new_context(sid, -1, False, False, [topic("a", fp(0))], [], NOW)
    assert isinstance(ctx, Sessionless)
    assert ctx.respond(answer_all(ctx), NOW) == (0, 0, None)
    assert len(cache) == 0
    assert cache.new_context(sid, 1, False, False, [], [], NOW).error == FETCH_SESSION_ID_NOT_FOUND


def test_full_fetch_with_an_id_replaces_that_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    ctx = cache.new_context(sid, 0, False, False, [topic("a", fp(0))], [], NOW)
    _, new_sid, _ = ctx.respond(answer_all(ctx), NOW)
    assert sid not in cache.sessions and new_sid in cache.sessions


def test_incremental_reads_every_partition_and_answers_only_the_changed() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    ctx = cache.new_context(sid, 1, False, False, [], [], NOW)
    assert isinstance(ctx, IncrementalFetch)
    assert read_keys(ctx) == [("a", 0, 0), ("a", 1, 0), ("a", 2, 0)]
    answers = answer_all(ctx, {("a", 1): answer(records=b"x" * 10)})
    error, got_sid, kept = ctx.respond(answers, NOW)
    assert (error, got_sid) == (0, sid)
    assert kept is not None and kept_keys(ctx, kept, answers) == [("a", 1)]
    # the partition that got records is read last next time
    ctx = cache.new_context(sid, 2, False, False, [topic("a", fp(1, offset=3))], [], NOW)
    assert read_keys(ctx) == [("a", 0, 0), ("a", 2, 0), ("a", 1, 3)]
    answers = answer_all(ctx, {("a", 2): answer(hw=11), ("a", 0): answer(start=4)})
    _, _, kept = ctx.respond(answers, NOW)
    assert kept is not None and kept_keys(ctx, kept, answers) == [("a", 0), ("a", 2)]
    # a partition the reader left out (nothing new) keeps what was last told
    ctx = cache.new_context(sid, 3, False, False, [], [], NOW)
    answers = answer_all(ctx, {("a", 2): answer(hw=12)})
    _, _, kept = ctx.respond([[a for a in answers[0] if a.partition_index == 2]], NOW)
    assert kept is not None and kept_keys(ctx, kept, answers) == [("a", 2)]
    assert cache.sessions[sid].partitions[("a", 0)].local_log_start_offset == 4
    # nothing changed: an empty answer
    ctx = cache.new_context(sid, 4, False, False, [], [], NOW)
    answers = answer_all(ctx, {("a", 2): answer(hw=12), ("a", 0): answer(start=4)})
    _, _, kept = ctx.respond(answers, NOW)
    assert kept == [[]]


def test_errors_are_always_answered_and_told_again_once_gone() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, n=1)
    for epoch, a, expect in [(1, answer(error=6), 1), (2, answer(error=6), 1), (3, answer(), 1),
                             (4, answer(), 0)]:  # fmt: skip
        ctx = cache.new_context(sid, epoch, False, False, [], [], NOW)
        _, _, kept = ctx.respond([[a]], NOW)
        assert kept is not None and len(kept[0]) == expect, epoch


def test_a_diverging_epoch_is_always_answered() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, n=1)
    ctx = cache.new_context(sid, 1, False, True, [], [], NOW)
    a = answer()
    a.diverging_epoch = NS(epoch=3, end_offset=7)
    assert ctx.respond([[a]], NOW)[2] == [[a]]


def test_add_update_and_forget() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, n=2)
    requested = [topic("a", fp(1, offset=5, max_bytes=99)), topic("b", fp(0, offset=2))]
    ctx = cache.new_context(sid, 1, False, False, requested, [("a", 0)], NOW)
    assert read_keys(ctx) == [("a", 1, 5), ("b", 0, 2)]
    assert ctx.topics[0].partitions[0].partition_max_bytes == 99
    # a newly added partition is answered even with nothing new (never told before)
    answers = answer_all(ctx)
    _, _, kept = ctx.respond(answers, NOW)
    assert kept is not None and kept_keys(ctx, kept, answers) == [("b", 0)]
    assert cache.total_partitions() == 2
    # the same partitions again, then one added and one forgotten
    ctx = cache.new_context(sid, 2, False, False, [], [], NOW)
    assert read_keys(ctx) == [("a", 1, 5), ("b", 0, 2)]
    ctx = cache.new_context(sid, 3, False, False, [topic("c", fp(4))], [("b", 0)], NOW)
    assert read_keys(ctx) == [("a", 1, 5), ("c", 4, 0)]
    # forgetting everything closes the session
    ctx = cache.new_context(sid, 4, False, False, [], [("a", 1), ("c", 4)], NOW)
    assert isinstance(ctx, Sessionless) and len(cache) == 0


def test_wrong_epoch_and_unknown_id() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    assert cache.new_context(sid, 2, False, False, [], [], NOW).error == INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(sid + 1, 1, False, False, [], [], NOW).error == (
        FETCH_SESSION_ID_NOT_FOUND
    )
    ctx = cache.new_context(sid, 1, False, False, [], [], NOW)  # the right one still works
    assert isinstance(ctx, IncrementalFetch)
    assert cache.new_context(sid, 1, False, False, [], [], NOW).error == INVALID_FETCH_SESSION_EPOCH


def test_a_request_of_the_session_answered_out_of_turn_is_refused() -> None:
    """A parked request whose session moved on meanwhile answers INVALID_FETCH_SESSION_EPOCH."""
    cache = FetchSessionCache()
    sid = open_session(cache, n=1)
    first = cache.new_context(sid, 1, False, False, [], [], NOW)
    second = cache.new_context(sid, 2, False, False, [], [], NOW)
    assert first.respond([[answer()]], NOW)[0] == INVALID_FETCH_SESSION_EPOCH
    assert second.respond([[answer()]], NOW)[0] == 0


def test_topic_ids_and_names_do_not_mix() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    assert cache.new_context(sid, 1, True, False, [], [], NOW).error == (
        FETCH_SESSION_TOPIC_ID_ERROR
    )
    tid = uuid.uuid4()
    t = NS(topic=None, topic_id=tid, partitions=[fp(0), fp(1)])
    ctx = cache.new_context(0, 0, True, True, [t], [], NOW)
    _, sid2, _ = ctx.respond(answer_all(ctx), NOW)
    ctx = cache.new_context(sid2, 1, True, True, [], [(tid, 0)], NOW)
    assert [(t.topic_id, p.partition) for t in ctx.topics for p in t.partitions] == [(tid, 1)]


def test_full_cache_makes_no_session_until_one_is_stale() -> None:
    cache = FetchSessionCache(max_slots=1, eviction_ms=1000)
    open_session(cache, n=5)
    ctx = cache.new_context(0, 0, False, False, [topic("c", fp(0))], [], NOW + 10)
    assert ctx.respond(answer_all(ctx), NOW + 10)[1] == 0  # smaller and the other is young
    ctx = cache.new_context(0, 0, False, False, [topic("c", fp(0))], [], NOW + 1001)
    assert ctx.respond(answer_all(ctx), NOW + 1001)[1] > 0  # the other is stale now
    assert cache.evictions == 1 and len(cache) == 1


def test_followers_evict_consumers_and_larger_evicts_smaller_once_old() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000)
    consumer = open_session(cache, n=5)
    follower = open_session(cache, follower=True, n=2)
    # a young consumer session: a follower's new session evicts it, a consumer's cannot
    ctx = cache.new_context(0, 0, False, False, [topic("c", fp(0))], [], NOW + 1)
    assert ctx.respond(answer_all(ctx), NOW + 1)[1] == 0
    ctx = cache.new_context(0, 0, False, True, [topic("c", fp(0))], [], NOW + 1)
    assert ctx.respond(answer_all(ctx), NOW + 1)[1] > 0
    assert consumer not in cache.sessions and follower in cache.sessions
    # both old and recently used: a consumer's session cannot evict a follower's, a larger
    # follower's evicts the smaller one
    for s in cache.sessions.values():
        s.last_used_ms = NOW + 1500
    ctx = cache.new_context(0, 0, False, False, [topic("d", *[fp(i) for i in range(9)])], [],
                            NOW + 1600)  # fmt: skip
    assert ctx.respond(answer_all(ctx), NOW + 1600)[1] == 0  # only followers' left: privileged
    ctx = cache.new_context(0, 0, False, True, [topic("d", *[fp(i) for i in range(9)])], [],
                            NOW + 1600)  # fmt: skip
    assert ctx.respond(answer_all(ctx), NOW + 1600)[1] > 0  # a follower evicts the smaller one
    assert cache.evictions == 2


def test_no_slots_no_sessions() -> None:
    cache = FetchSessionCache(max_slots=0)
    ctx = cache.new_context(0, 0, False, False, [topic("a", fp(0))], [], NOW)
    assert ctx.respond(answer_all(ctx), NOW) == (0, 0, None)


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_session_ids_are_unique() -> None:
    cache = FetchSessionCache(rng=random.Random(1))
    ids = {open_session(cache, n=1) for _ in range(50)}
    assert len(ids) == 50 and 0 not in ids


def test_a_throttled_incremental_fetch_keeps_its_session_and_tells_again() -> None:
    """An answer withheld for a quota (Kafka's getThrottledResponse): the session's id is
    answered, its epoch has moved on, and what the withheld answer told is told again, the
    partitions read in the order they were."""
    cache = FetchSessionCache()
    sid = open_session(cache)
    ctx = cache.new_context(sid, 1, False, False, [], [], NOW)
    answers = answer_all(ctx, {("a", 0): answer(hw=12, records=b"x"), ("a", 2): answer(hw=11)})
    error, got, kept = ctx.respond(answers, NOW)
    assert (error, got) == (0, sid) and kept is not None
    assert kept_keys(ctx, kept, answers) == [("a", 0), ("a", 2)]
    assert cache.throttled(sid, 1, sid, 0) == (0, sid)
    ctx = cache.new_context(sid, 2, False, False, [], [], NOW)  # the next epoch
    assert read_keys(ctx) == [("a", 0, 0), ("a", 1, 0), ("a", 2, 0)]  # "a"-0 not moved last
    answers = answer_all(ctx, {("a", 0): answer(hw=12), ("a", 2): answer(hw=11)})
    _, _, kept = ctx.respond(answers, NOW)
    assert kept is not None and kept_keys(ctx, kept, answers) == [("a", 0), ("a", 2)]
    # that answer went out: nothing new to tell next time
    ctx = cache.new_context(sid, 3, False, False, [], [], NOW)
    answers = answer_all(ctx, {("a", 0): answer(hw=12), ("a", 2): answer(hw=11)})
    assert ctx.respond(answers, NOW)[2] == [[]]


def test_a_throttled_full_fetch_makes_no_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    assert cache.throttled(0, 0, sid, 0) == (0, 0)
    assert len(cache) == 0
    assert cache.throttled(0, -1, 0, 0) == (0, 0)  # sessionless


def test_a_throttled_session_error_is_not_told_but_a_duplicate_request_is() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache)
    assert cache.throttled(sid + 1, 1, 0, FETCH_SESSION_ID_NOT_FOUND) == (0, 0)
    assert cache.throttled(sid, 1, sid, INVALID_FETCH_SESSION_EPOCH) == (
        INVALID_FETCH_SESSION_EPOCH,
        sid,
    )
    assert sid in cache.sessions
