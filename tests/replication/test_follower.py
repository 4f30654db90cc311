"""The follower side of replication, sans I/O (replication/follower.py), against real leader
partitions in-process: batches copied byte for byte with their offsets and epochs, the
follower's high watermark, truncation on a diverging epoch (KIP-320), a log start past the
follower's end, fencing, and producer state that survives a failover."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gregor.protocol import errors
from gregor.protocol.errors import BY_NAME
from gregor.protocol.messages import FetchResponse
from gregor.protocol.records.records import build_batch, build_control_batch
from gregor.replication.fetch_sessions import FetchSessionCache
from gregor.replication.follower import FetcherConfig, FollowerFetcher, truncation_offset
from gregor.replication.partition import Partition
from gregor.storage.leader_epoch import LeaderEpochCache
from gregor.storage.producer_state import AppendOrigin

from .helpers import NOW, Cluster, host, log_bytes, manager, produce, registration, serve_fetch


def cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    c = LeaderEpochCache(str(tmp_path))
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_truncation_offsets(tmp_path: Path) -> None:
    c = cache(tmp_path, [(0, 0), (2, 10), (4, 20)])  # our LEO: 30, HW 25
    # the leader had our epoch 2, and it ended at 15 there: truncate to 15
    assert truncation_offset(c, 30, 25, 2, 15) == (15, True)
    # ... ended later there than here: our end of it (20)
    assert truncation_offset(c, 30, 25, 2, 22) == (20, True)
    # the leader's epoch 3 is unknown to us: back to the end of our epoch 2, and ask again
    assert truncation_offset(c, 30, 25, 3, 21) == (20, False)
    # older than any epoch we have: its end, within our log
    assert truncation_offset(c, 30, 25, -1, 12) == (12, True)
    assert truncation_offset(LeaderEpochCache(str(tmp_path / "none")), 30, 25, 1, 40) == (30, True)
    # no end offset from the leader: our high watermark
    assert truncation_offset(c, 30, 25, 2, -1) == (25, True)


class Pair:
    """Node 1 and node 2 replicating one partition; each `pump` is one Fetch round trip of
    node `follower` from the leader it follows."""

    def __init__(self, tmp_path: Path) -> None:
        self.cluster = Cluster()
        self.rms = {n: manager(tmp_path, n, self.cluster) for n in (1, 2)}
        self.fetchers = {
            n: FollowerFetcher(3 - n, FetcherConfig(replica_id=n, backoff_ms=100)) for n in (1, 2)
        }
        self.now = NOW

    def part(self, node: int) -> Partition:
        p = self.rms[node].get("t", 0)
        assert p is not None
        return p

    def elect(
        self, leader: int, epoch: int, partition_epoch: int, isr: tuple[int, ...] = (1, 2)
    ) -> None:
        reg = registration(leader, epoch, isr, partition_epoch, replicas=(1, 2))
        for n, rm in self.rms.items():
            p = host(rm, reg, self.now)
            if n != leader:
                self.fetchers[n].add(p, epoch)
            else:
                self.fetchers[n].remove("t", 0)

    def pump(self, follower: int) -> object:
        self.now += 10
        built = self.fetchers[follower].build_request(self.now, self.cluster.epochs[follower])
        assert built is not None
        request, sent = built
        leader = self.part(3 - follower)
        response = serve_fetch(leader if leader.is_leader else None, request, self.now)
        return self.fetchers[follower].handle_response(sent, response, self.now)


def test_batches_replicate_with_offsets_epochs_and_transactions(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.elect(1, 3, 0)
    leader, follower = pair.part(1), pair.part(2)
    produce(leader, 3)
    txn = build_batch(
        [(b"k", b"in-txn")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
    )
    leader.log.append(txn, leader_epoch=leader.leader_epoch, now_ms=NOW)
    leader.after_leader_append(NOW)
    abort = build_control_batch(7, 0, 0, False, NOW)
    leader.log.append(
        abort, leader_epoch=leader.leader_epoch, now_ms=NOW, origin=AppendOrigin.COORDINATOR
    )
    leader.after_leader_append(NOW)
    leader.log.roll()
    produce(leader, 2)
    assert leader.high_watermark == 0
    pair.pump(2)
    pair.pump(2)  # a fetch reads one segment at most
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.log.leader_epochs.entries == [(3, 0)]
    # A fetch moves the leader's HW with the follower's LEO after reading: the answer carries
    # the HW from before it (as Kafka), so the follower learns a HW one fetch late.
    assert (leader.high_watermark, follower.high_watermark) == (5, 0)
    pair.pump(2)
    assert (leader.high_watermark, follower.high_watermark) == (7, 5)
    pair.pump(2)
    assert follower.high_watermark == 7
    assert follower.log.last_stable_offset == leader.log.last_stable_offset == 7
    assert [
        (a.producer_id, a.first_offset) for a in follower.log.collect_aborted_transactions(0, 7)
    ] == [(7, 3)]


def test_a_diverging_follower_truncates_and_catches_up(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.elect(1, 0, 0)
    old = pair.part(1)
    produce(old, 5)
    pair.pump(2)
    pair.pump(2)
    assert old.high_watermark == 5
    produce(old, 3, acks=1)  # never reaches node 2
    pair.elect(2, 1, 1, isr=(2,))  # node 1 lost its leadership (the controller fenced it)
    new = pair.part(2)
    produce(new, 2)
    assert old.log.log_end_offset == 8 and old.log.leader_epochs.entries == [(0, 0)]
    outcome = pair.pump(1)
    assert outcome.truncated == [("t", 0, 5)] and old.log.log_end_offset == 5
    pair.pump(1)
    assert log_bytes(old) == log_bytes(new)
    assert old.log.leader_epochs.entries == new.log.leader_epochs.entries == [(0, 0), (1, 5)]


def test_an_elected_leader_that_wrote_nothing_leaves_no_epoch_behind(tmp_path: Path) -> None:
    """A leader elected and replaced before it wrote: its epoch sits at its log end; following
    the next leader, it must drop that epoch rather than name it forever."""
    pair = Pair(tmp_path)
    pair.elect(1, 0, 0)
    produce(pair.part(1), 2)
    pair.pump(2)
    pair.elect(2, 1, 1)
    pair.elect(1, 2, 2)
    assert pair.part(2).log.leader_epochs.entries == [(0, 0), (1, 2)]
    produce(pair.part(1), 1)
    pair.pump(2)
    pair.pump(2)
    assert log_bytes(pair.part(2)) == log_bytes(pair.part(1))
    assert pair.part(2).log.leader_epochs.entries == [(0, 0), (2, 2)]


def test_a_follower_behind_the_leaders_log_start_starts_again_there(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.elect(1, 0, 0, isr=(1,))
    leader = pair.part(1)
    produce(leader, 6)
    leader.log.roll()
    produce(leader, 2)
    leader.log.increment_log_start_offset(6)
    outcome = pair.pump(2)
    assert outcome.errors == {("t", 0): errors.OFFSET_OUT_OF_RANGE}
    follower = pair.part(2)
    assert (follower.log.log_start_offset, follower.log.log_end_offset) == (6, 6)
    pair.pump(2)
    assert follower.log.read_bytes(6, 1 << 20) == leader.log.read_bytes(6, 1 << 20)


def test_a_follower_in_an_older_epoch_than_the_leader_waits_for_metadata(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.elect(1, 0, 0)
    # node 1 applied epoch 1 (still leading); node 2 has not seen it yet
    host(pair.rms[1], registration(1, 1, (1, 2), 1, replicas=(1, 2)), pair.now)
    outcome = pair.pump(2)
    assert outcome.errors == {("t", 0): BY_NAME["FENCED_LEADER_EPOCH"].code}
    assert pair.fetchers[2].build_request(pair.now + 10_000, 102) is None, (
        "fenced until new metadata"
    )
    pair.elect(1, 1, 1)
    assert pair.fetchers[2].build_request(pair.now, 102) is not None


def test_a_failed_fetch_backs_off(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.elect(1, 0, 0)
    built = pair.fetchers[2].build_request(pair.now, 102)
    assert built is not None
    pair.fetchers[2].handle_error(built[1], pair.now)
    assert pair.fetchers[2].build_request(pair.now + 50, 102) is None
    assert pair.fetchers[2].next_ready_ms() == pair.now + 100
    assert pair.fetchers[2].build_request(pair.now + 100, 102) is not None


def test_idempotent_producer_state_follows_to_the_new_leader(tmp_path: Path) -> None:
    """A retried batch sent to the new leader after a failover is recognized as written."""
    pair = Pair(tmp_path)
    pair.elect(1, 0, 0)
    first = build_batch([(b"a", b"1")], producer_id=9, producer_epoch=0, base_sequence=0)
    second = build_batch([(b"b", b"2")], producer_id=9, producer_epoch=0, base_sequence=1)
    pair.part(1).append_as_leader(bytearray(first), -1, NOW)
    pair.part(1).append_as_leader(bytearray(second), -1, NOW)
    pair.pump(2)
    pair.elect(2, 1, 1, isr=(2,))
    new = pair.part(2)
    retry = new.append_as_leader(bytearray(second), -1, NOW)
    assert (retry.first_offset, retry.last_offset, new.log.log_end_offset) == (1, 1, 2)
    third = build_batch([(b"c", b"3")], producer_id=9, producer_epoch=0, base_sequence=2)
    assert new.append_as_leader(bytearray(third), -1, NOW).first_offset == 2


def serve_in_session(cache: FetchSessionCache, leader: Partition, request: Any, now: int) -> Any:
    """The leader's answer as handlers/fetch.py gives it with fetch sessions."""
    forgotten = [(f.topic_id, i) for f in request.forgotten_topics_data for i in f.partitions]
    ctx = cache.new_context(
        request.session_id, request.session_epoch, True, True, request.topics, forgotten, now
    )
    if ctx.error:
        return FetchResponse(error_code=ctx.error, session_id=0, responses=[])
    read = SimpleNamespace(replica_state=request.replica_state, topics=ctx.topics)
    response = serve_fetch(leader, read, now)
    _, session_id, kept = ctx.respond([t.partitions for t in response.responses], now)
    response.session_id = session_id
    if kept is not None:
        for t, parts in zip(response.responses, kept, strict=True):
            t.partitions = parts
    return response


def test_a_follower_fetches_in_an_incremental_session(tmp_path: Path) -> None:
    """Full first, then only what changed; a session the leader lost or an epoch it refuses
    starts over with a full Fetch, and replication goes on."""
    pair = Pair(tmp_path)
    pair.elect(leader=1, epoch=1, partition_epoch=1)
    leader, follower, cache = pair.part(1), pair.fetchers[2], FetchSessionCache()

    def pump() -> Any:
        pair.now += 10
        built = follower.build_request(pair.now, pair.cluster.epochs[2])
        assert built is not None
        request, sent = built
        follower.handle_response(sent, serve_in_session(cache, leader, request, pair.now), pair.now)
        return request

    def asked(request: Any) -> list[tuple[int, int]]:
        return [(fp.partition, fp.fetch_offset) for t in request.topics for fp in t.partitions]

    produce(leader, 3, pair.now)
    r = pump()
    assert (r.session_id, r.session_epoch, asked(r)) == (0, 0, [(0, 0)])
    sid = follower.session_id
    assert sid > 0 and pair.part(2).log.log_end_offset == 3
    r = pump()  # the new fetch offset, named; it moves the leader's HW to 3
    assert (r.session_id, r.session_epoch, asked(r)) == (sid, 1, [(0, 3)])
    assert pair.part(2).log.high_watermark == 0
    r = pump()  # nothing changed here: nothing named; the leader's new HW is told
    assert (r.session_id, r.session_epoch, asked(r)) == (sid, 2, [])
    assert pair.part(2).log.high_watermark == 3
    produce(leader, 2, pair.now)
    r = pump()  # records of a partition the request did not name
    assert asked(r) == [] and pair.part(2).log.log_end_offset == 5
    cache.remove(sid)  # the leader lost the session (a restart): FETCH_SESSION_ID_NOT_FOUND
    pump()
    r = pump()
    assert (r.session_id, r.session_epoch, asked(r)) == (0, 0, [(0, 5)])
    sid = follower.session_id
    follower.session_epoch += 5  # an epoch the leader refuses: the session is closed, anew
    pump()
    r = pump()
    assert (r.session_id, r.session_epoch, asked(r)) == (sid, 0, [(0, 5)])
    assert follower.session_id != sid and follower.session_id in cache.sessions
    assert sid not in cache.sessions
    produce(leader, 1, pair.now)
    pump()
    assert pair.part(2).log.log_end_offset == 6


def fake_partition(topic: str, topic_id: uuid.UUID) -> Any:
    """What building a Fetch reads of a partition: its names and its log's offsets and epochs."""
    log_ = SimpleNamespace(
        log_end_offset=0,
        log_start_offset=0,
        offline=False,
        leader_epochs=SimpleNamespace(latest_epoch=-1),
    )
    return SimpleNamespace(topic=topic, index=0, topic_id=topic_id, log=log_, name=f"{topic}-0")


def test_an_incremental_fetch_names_only_what_changed_since_the_last_one() -> None:
    """KIP-227 from the follower's side over several partitions: a full request names them
    all; then each request names those added or whose fetch changed (an append, a log start
    moved by retention, a new leader epoch, a back-off over) and forgets those no longer
    fetched (removed, backed off, offline); a failed request starts over in full."""
    ids = {name: uuid.uuid4() for name in "abcd"}
    parts = {name: fake_partition(name, tid) for name, tid in ids.items()}
    fetcher = FollowerFetcher(1, FetcherConfig(replica_id=2, backoff_ms=100))
    for p in parts.values():
        fetcher.add(p, 4)
    names = {tid: name for name, tid in ids.items()}
    now = NOW

    def fetch(*errors_of: tuple[str, int]) -> tuple[dict[str, tuple[int, int, int]], list[str]]:
        """One request and its answer (a session id; `errors_of` partitions failing):
        {partition named: (fetch offset, log start, leader epoch)} and the forgotten."""
        built = fetcher.build_request(now, 1)
        assert built is not None
        request, sent = built
        answer = SimpleNamespace(
            error_code=0,
            session_id=9,
            responses=[
                SimpleNamespace(
                    topic_id=ids[name],
                    partitions=[SimpleNamespace(partition_index=0, error_code=c)],
                )
                for name, c in errors_of
            ],
        )
        fetcher.handle_response(sent, answer, now)
        named = {
            names[t.topic_id]: (fp.fetch_offset, fp.log_start_offset, fp.current_leader_epoch)
            for t in request.topics
            for fp in t.partitions
        }
        forgotten = sorted(names[f.topic_id] for f in request.forgotten_topics_data)
        return named, forgotten

    assert fetch() == ({n: (0, 0, 4) for n in "abcd"}, [])
    assert fetch() == ({}, [])
    parts["a"].log.log_end_offset = 3  # appended to
    parts["b"].log.log_start_offset = 0  # unchanged
    parts["c"].log.log_start_offset = 2  # retention moved it
    parts["c"].log.log_end_offset = 5
    assert fetch() == ({"a": (3, 0, 4), "c": (5, 2, 4)}, [])
    assert fetch(("b", errors.NOT_LEADER_OR_FOLLOWER)) == ({}, [])  # b backs off
    fetcher.remove("d", 0)
    fetcher.add(parts["a"], 5)  # a new leader epoch
    assert fetch() == ({"a": (3, 0, 5)}, ["b", "d"])
    now += 100  # b's back-off is over
    parts["c"].log.offline = True
    assert fetch() == ({"b": (0, 0, 4)}, ["c"])
    fetcher.add(parts["d"], 4)
    fetcher.remove("d", 0)  # gone again before the next request: never named
    assert fetch() == ({}, [])
    built = fetcher.build_request(now, 1)
    assert built is not None
    fetcher.handle_error(built[1], now)  # a failed request: all back off, then in full
    now += 100
    assert fetch() == ({"a": (3, 0, 5), "b": (0, 0, 4)}, [])  # c is offline
