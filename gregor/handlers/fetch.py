"""Fetch v4-17: record data for consumers and follower replicas, zero-copy from the segment files.

v4: isolation_level, last_stable_offset, aborted_transactions: a read_committed fetch reads up to
the last stable offset and lists the aborted transactions that start below it and end at or
after the fetch offset (from the segments' .txnindex), so the client drops their records; a
read_uncommitted one reads to the high watermark, aborted_transactions null (as Kafka). v5: log_start_offset. v7: fetch
sessions (KIP-227, replication/fetch_sessions.py): a full fetch may make a session; an
incremental one names only its changed partitions, every partition of the session is read
(and a parked one wakes on news in any of them), and the answer holds only those with
something new. v9: current_leader_epoch
(older than ours: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH; the client refreshes its
metadata). v11: rack_id, preferred_read_replica (always -1: no follower fetching, KIP-392).
v12: flexible; last_fetched_epoch, diverging_epoch. v13: topic ids instead of names. v15:
replica_state. v16: node_endpoints. v17: replica_directory_id.

Consumers read only from the leader (NOT_LEADER_OR_FOLLOWER elsewhere). A Fetch with a replica
id (`replica_id` >= 0 before v15, `replica_state.replica_id` from v15) is a follower's: it
reads to the log end, its fetch offset becomes that follower's log end offset on the leader
(which may move the high watermark or add it to the ISR), and a `last_fetched_epoch` whose
history diverges from ours gets `diverging_epoch` and no records (replication/partition.py).

Replication throttle (`leader.replication.throttled.rate`, security/replication_quotas.py): a
follower outside the ISR gets no records for a partition named by its topic's
`leader.replication.throttled.replicas` while the leader quota is exceeded (Kafka's
shouldLeaderThrottle; such a partition does not count toward min_bytes, so the Fetch waits);
the record bytes of throttled partitions in each answer to a follower are recorded in it.

Sizes: each partition gets at most partition_max_bytes and the response at most max_bytes, but
the first partition with data always gets at least one whole batch (KIP-74). Fewer than
min_bytes ready: the request waits up to max_wait_ms (`DelayedFetch`, in the purgatory of
replication/purgatory.py), woken by an append to a partition it reads, a move of its high
watermark or a leadership change; a partition no longer hosted, or hosted anew, answers at
once. Record data leaves as file slices the runtime `sendfile`s; the fds are duplicated here,
and the runtime closes them once sent (or once the connection is gone), so a segment deleted
meanwhile is still readable. Up to COPY_MAX bytes of a partition are read into the response
instead, so a small answer leaves in one send.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import FetchResponse
from gregor.replication.fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchContext,
    FullFetch,
    IncrementalFetch,
    Sessionless,
)
from gregor.replication.fetch_watch import FetchWatch
from gregor.replication.partition import FollowerRead, Partition
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation
from gregor.security.acls import CLUSTER_ACTION, READ, TOPIC

TopicResp = FetchResponse.FetchableTopicResponse
PartResp = FetchResponse.PartitionData
Aborted = FetchResponse.AbortedTransaction
Diverging = FetchResponse.EpochEndOffset
# A partition's answer without a diverging epoch, a current leader or a snapshot id: one of
# each, shared by every answer (the generated constructor would make three per partition
# answered). Nothing changes them in place: a diverging answer gets its own `Diverging`.
_NO_DIVERGING = Diverging()
_NO_LEADER = FetchResponse.LeaderIdAndEpoch()
_NO_SNAPSHOT = FetchResponse.SnapshotId()
READ_COMMITTED = 1
# Record data up to this size is read into the response (one pread) rather than sent from the
# file (a dup, a sendfile and a close, and the response split around it into three sends, so
# three TCP segments and as many wake-ups of the reader): small answers, the common case of
# followers and consumers keeping up, go out in one send.
COPY_MAX = 16 * 1024


class Unauthorized(str):
    """The name of a topic the caller may not fetch from."""

    __slots__ = ()


def _session_context(ctx: RequestContext, request: Any, now: int, follower: bool) -> FetchContext:
    """The fetch session context of the request (v7+; older ones are sessionless)."""
    if ctx.version < 7 or (
        request.session_epoch == FINAL_EPOCH and request.session_id == INVALID_SESSION_ID
    ):  # (a consumer's sessionless Fetch: as the cache would answer it, without a look)
        return Sessionless(request.topics)
    by_id = ctx.version >= 13
    forgotten = (
        [
            (f.topic_id if by_id else f.topic, index)
            for f in request.forgotten_topics_data
            for index in f.partitions
        ]
        if request.forgotten_topics_data
        else []  # (most Fetches forget nothing: no comprehension run for it)
    )
    return ctx.services.fetch_sessions.new_context(
        request.session_id,
        request.session_epoch,
        by_id,
        follower,
        request.topics,
        forgotten,
        now,
    )


def _resolve_topics(
    ctx: RequestContext, follower: bool, requested: Any
) -> list[tuple[str | None, Any]]:
    """(topic name or None if unknown, the topic) for every topic to read (the request's, or
    its session's); with an authorizer, a topic the caller may not read (a follower: without
    CLUSTER_ACTION) is named Unauthorized."""
    out: list[tuple[str | None, Any]] = []
    store = ctx.services.store
    for t in requested:
        if ctx.version >= 13:
            info = store.topic_by_id(t.topic_id)
            out.append((info.name if info else None, t))
        else:
            out.append((t.topic, t))
    if ctx.services.authorizer is not None:
        if follower:
            allowed = ctx.authorize_cluster(CLUSTER_ACTION)
            return [(n if allowed or n is None else Unauthorized(n), t) for n, t in out]
        return [
            (n if n is None or ctx.authorize(READ, TOPIC, n) else Unauthorized(n), t)
            for n, t in out
        ]
    return out


def _replica_of(ctx: RequestContext, request: Any) -> tuple[int, int]:
    """(replica id, broker epoch) of a follower's Fetch; replica id -1 for a consumer."""
    if ctx.version >= 15:
        state = request.replica_state
        return (state.replica_id, state.replica_epoch) if state is not None else (-1, -1)
    return request.replica_id, -1


class _Pass:
    """One pass over a Fetch's partitions: what they share, and what it has read so far."""

    __slots__ = (
        "ctx", "version", "replicas", "first", "read_committed", "replica_id", "broker_epoch",
        "now", "budget", "total", "partitions", "incremental", "fenced", "only", "told",
        "watch", "build", "clean",
    )  # fmt: skip

    def __init__(
        self,
        ctx: RequestContext,
        request: Any,
        first: bool,
        now: int | None = None,
        replica: tuple[int, int] | None = None,
    ) -> None:
        self.ctx = ctx
        version = self.version = ctx.version
        services = ctx.services
        self.replicas = services.replicas
        self.first = first  # the request's first pass (later ones leave a follower's state)
        self.read_committed = version >= 4 and request.isolation_level == READ_COMMITTED
        if replica is not None:  # (the handler's, read once)
            self.replica_id, self.broker_epoch = replica
        elif version >= 15:
            self.replica_id, self.broker_epoch = _replica_of(ctx, request)
        else:
            self.replica_id, self.broker_epoch = request.replica_id, -1
        # The clock is read for a request's first pass (its follower states' times, a parked
        # fetch's deadline); a later pass reads it only to judge a throttle (`_leader_throttles`).
        self.now = now if now is not None else services.now_ms() if first else -1
        self.budget = request.max_bytes if version >= 3 else 0x7FFFFFFF
        self.total = 0  # record bytes read so far
        self.partitions: list[Partition] = []  # the partitions found, in request order
        self.incremental = False  # reading an incremental session: quiet partitions skipped
        self.fenced: bool | None = None  # a follower's broker epoch is older than registered
        # Of an incremental session, the partitions to look at (None: all); the others are
        # taken as quiet. And those that were not quiet (read and answered).
        self.only: set[Partition] | None = None
        self.told: list[Partition] = []
        # A follower's session watched (replication/fetch_watch.py): only its dirty partitions
        # are read; or, with `build`, every partition is and the watch is made as they are.
        self.watch: FetchWatch | None = None
        self.build = False
        self.clean = False  # the last `_quiet` found the follower in sync at our log end

    def stale_epoch(self, p: Partition) -> bool:
        """Whether the follower fetching registered anew since the epoch it sends (then each
        partition answers the error); looked up once per request, not per partition."""
        if self.fenced is None:
            epoch = self.broker_epoch
            self.fenced = epoch != -1 and p.liveness(self.replica_id).epoch > epoch
        return self.fenced


def _collect(
    ctx: RequestContext,
    request: Any,
    topics: list[tuple[str | None, Any]],
    first: bool = True,
    only: set[Partition] | None = None,
    watch: tuple[FetchWatch, bool] | None = None,
    now: int | None = None,
    replica: tuple[int, int] | None = None,
) -> tuple[list[Any], _Pass]:
    """(the response's topics, the pass: record bytes read, partitions found) for one pass;
    of an incremental session, `only` (if given) the partitions that may not be quiet; of a
    watched follower's session, `watch`: the watch, and whether to make it in this pass."""
    s = _Pass(ctx, request, first, now, replica)
    s.only = only
    if watch is not None:
        s.watch, s.build = watch
        if not s.build:
            return _dirty_partitions(s, topics), s
    responses = []
    for ti, (name, t) in enumerate(topics):
        if t.partitions and type(t.partitions[0]) is CachedPartition:
            s.incremental = True
            if type(name) is str:
                parts = _session_partitions(s, name, t.partitions, ti)
            else:
                parts = [_fetch_partition(s, name, fp) for fp in t.partitions]
        else:
            parts = []
            for fp in t.partitions:  # (a loop: a comprehension makes a function at each run)
                parts.append(_fetch_partition(s, name, fp))
        responses.append(_topic_response(s, name, t, parts))
    return responses, s


def _topic_response(s: _Pass, name: str | None, t: Any, parts: list[Any]) -> Any:
    if s.version >= 13:
        return TopicResp._make(topic_id=t.topic_id, partitions=parts)
    return TopicResp._make(topic=name, partitions=parts)


def _session_partitions(
    s: _Pass, name: str, cached: list[CachedPartition], topic_index: int
) -> list[Any]:
    """The answers of one topic's partitions of an incremental session, those with something
    to tell (the others are quiet, or not to be looked at: see `_Pass.only`); with
    `_Pass.build`, each partition found joins the watch. Most partitions of a follower's
    session are quiet at most Fetches: this loop is kept lean."""
    hosted = s.replicas.partitions
    found, told, only = s.partitions, s.told, s.only
    watch = s.watch if s.build else None
    parts = []
    for fp in cached:
        p = hosted.get((name, fp.partition))
        if p is None:
            parts.append(_failed(fp, errors.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        found.append(p)
        if watch is not None:
            entry = watch.add(fp, p, p.followers.get(s.replica_id), topic_index)
            if _quiet(s, p, fp):
                if s.clean:
                    s.clean = False
                    watch.mark_clean(entry)
                continue
        elif (only is not None and p not in only) or _quiet(s, p, fp):
            continue
        told.append(p)
        parts.append(_read_partition(s, p, fp))
    return parts


def _dirty_partitions(s: _Pass, topics: list[tuple[str | None, Any]]) -> list[Any]:
    """The response's topics of a watched session: its dirty partitions read, the clean ones
    quiet (replication/fetch_watch.py). Those read in this pass are `s.partitions`."""
    watch = s.watch
    assert watch is not None
    s.incremental = True
    answers: list[list[Any]] = []
    for _ in topics:  # (a loop: cheaper than a comprehension's function for a few topics)
        answers.append([])
    found, told = s.partitions, s.told
    for entry in list(watch.dirty):
        p, fp = entry.partition, entry.cached
        found.append(p)
        if _quiet(s, p, fp):
            if s.clean:
                s.clean = False
                watch.mark_clean(entry)
            continue
        told.append(p)
        answers[entry.topic_index].append(_read_partition(s, p, fp))
    out = []
    make, by_id = TopicResp._make, s.version >= 13
    for (name, t), parts in zip(topics, answers):  # noqa: B905 - one length, made so above
        out.append(
            make(topic_id=t.topic_id, partitions=parts)
            if by_id
            else make(topic=name, partitions=parts)
        )
    return out


def _fetch_partition(s: _Pass, name: str | None, fp: Any) -> Any:
    """The answer for one partition of the request."""
    if name is None:
        return _failed(fp, errors.UNKNOWN_TOPIC_ID)
    if isinstance(name, Unauthorized):
        return _failed(fp, errors.TOPIC_AUTHORIZATION_FAILED)
    p = s.replicas.partitions.get((name, fp.partition))  # (`ReplicaManager.get`)
    if p is None:
        return _failed(fp, errors.UNKNOWN_TOPIC_OR_PARTITION)
    s.partitions.append(p)
    return _read_partition(s, p, fp)


def _read_partition(s: _Pass, p: Partition, fp: Any) -> Any:
    """Read one partition found hosted here."""
    log = p.log
    code, aborted, diverging = errors.NONE, None, None
    records: Any = b""
    total = s.total
    try:
        limit = s.budget - total  # (`min`, written out: this runs per partition read)
        if fp.partition_max_bytes < limit:
            limit = fp.partition_max_bytes
        if s.replica_id >= 0:
            read = _read_for_follower(s, p, fp, limit)
            hw, start, lso = read.high_watermark, read.log_start_offset, read.last_stable_offset
            found = read.records if limit > 0 or total == 0 else None
            if found is not None and s.replica_id not in p.isr and _leader_throttles(s, p):
                found = None
            if read.diverging_epoch is not None:
                epoch, end_offset = read.diverging_epoch
                diverging = Diverging(epoch=epoch, end_offset=end_offset)
        else:  # a consumer's: to the high watermark, or the LSO for read_committed
            p.check_leader_epoch(fp.current_leader_epoch if s.version >= 9 else -1)
            hw, start, lso = log.high_watermark, log.log_start_offset, log.last_stable_offset
            found = (  # (`Partition.read`)
                log.read(
                    fp.fetch_offset,
                    limit if limit > 1 else 1,
                    lso if s.read_committed else hw,
                    total == 0,
                )
                if limit > 0 or total == 0
                else None
            )
        if found is not None:
            records = found.read() if found.length <= COPY_MAX else found.dup()
            s.total = total + found.length
        if s.read_committed:
            aborted = (
                []
                if found is None
                else [
                    Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in log.collect_aborted_transactions(fp.fetch_offset, lso)
                ]
            )
    except KafkaError as exc:
        code = exc.code
        # (a failed read changes nothing: the log's values, as they were before it)
        hw, start, lso = log.high_watermark, log.log_start_offset, log.last_stable_offset
    return PartResp._make(
        partition_index=fp.partition,
        error_code=code,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=start,
        aborted_transactions=aborted,
        records=records,
        diverging_epoch=_NO_DIVERGING if diverging is None else diverging,
        current_leader=_NO_LEADER,
        snapshot_id=_NO_SNAPSHOT,
    )


def _quiet(s: _Pass, p: Partition, cached: CachedPartition) -> bool:
    """Whether a partition of an incremental session has nothing to tell: its read would
    find no records, no error and no divergence, and its high watermark, last stable offset
    and log start are the ones last told, so its answer would be left out. Such a partition is
    not read (a follower's fetch state is still updated, as the read would). False whenever in
    doubt: the partition is then read as any other. (Run for most partitions of every Fetch of
    a follower's session: each value is read once.)"""
    log = p.log
    hw = log.high_watermark
    if (
        cached.high_watermark != hw
        or cached.local_log_start_offset != log.log_start_offset
        or log.offline
        or p.leader_id != p.node_id
    ):
        return False
    first = log.producer_state.first_unstable
    if cached.last_stable_offset != (
        hw if first is None or first >= hw else log.last_stable_offset
    ):
        return False
    epoch = cached.current_leader_epoch
    if epoch != -1 and epoch != p.leader_epoch:
        return False
    if s.replica_id < 0:
        upper = log.last_stable_offset if s.read_committed else hw
        return cached.fetch_offset == upper
    end = log.log_end_offset
    if cached.fetch_offset != end:
        return False
    epoch = cached.last_fetched_epoch
    if epoch != -1:
        entries = log.leader_epochs.entries
        if epoch != (entries[-1][0] if entries else -1):
            return False
    state = p.followers.get(s.replica_id)
    if state is None:
        return False
    if s.first:
        if (
            state.log_end_offset == end
            and state.broker_epoch == s.broker_epoch
            and state.log_start_offset == cached.log_start_offset
            and s.replica_id in p.isr
            and not s.stale_epoch(p)
        ):
            # An in-sync follower asking again for the log end it has: of its state only the
            # times move (no ISR or high watermark change can follow).
            state.fetched_again(end, s.now)
            s.clean = True
            return True
        try:
            p.update_follower_fetch_state(
                state, end, cached.log_start_offset, s.now, end, s.broker_epoch
            )
        except KafkaError:
            return False  # read, and answered with the error
    return True


def _failed(fp: Any, code: int) -> Any:
    return PartResp._make(
        partition_index=fp.partition,
        error_code=code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        records=b"",
        diverging_epoch=_NO_DIVERGING,
        current_leader=_NO_LEADER,
        snapshot_id=_NO_SNAPSHOT,
    )


def _read_for_follower(s: _Pass, p: Partition, fp: Any, limit: int) -> FollowerRead:
    """A follower's read: to the log end, or the epoch where its log diverges."""
    version = s.version
    return p.fetch_for_follower(
        s.replica_id,
        s.broker_epoch,
        fp.fetch_offset,
        fp.last_fetched_epoch if version >= 12 else -1,
        fp.current_leader_epoch if version >= 9 else -1,
        fp.log_start_offset,
        limit if limit > 1 else 1,
        s.total == 0,
        s.now,
        update_fetch_state=s.first,
    )


def _leader_throttles(s: _Pass, p: Partition) -> bool:
    """Of a follower outside the ISR (one in it is never throttled)."""
    quota = s.replicas.leader_quota
    if s.now < 0:
        s.now = s.ctx.services.now_ms()
    return quota.should_throttle(False, p.topic, p.index, s.now)


def _answered(
    ctx: RequestContext,
    request: Any,
    session: FetchContext,
    topics: list[Any],
    responses: list[Any],
    follower: bool,
) -> Any:
    """The Fetch response; for a `follower`'s, the record bytes of throttled partitions are
    recorded in the leader's replication quota first."""
    quota = ctx.services.replicas.leader_quota
    if follower and quota.active():
        size = 0
        for (name, _), t in zip(topics, responses, strict=True):
            if name is None or isinstance(name, Unauthorized):
                continue
            for part in t.partitions:
                n = len(part.records) if part.records is not None else 0
                if n and quota.is_throttled(name, part.partition_index):
                    size += n
        if size:
            quota.record(size, ctx.services.now_ms())
    return _response(ctx, session, topics, responses, follower)


def _close(responses: list[Any]) -> None:
    for t in responses:
        for p in t.partitions:
            if not isinstance(p.records, (bytes, bytearray, memoryview)) and p.records is not None:
                os.close(p.records.fd)


@handles(api_keys.FETCH)
def handle(ctx: RequestContext, request: Any) -> Any:
    now = ctx.services.now_ms()  # (one reading for the request's first pass)
    replica = _replica_of(ctx, request)
    follower = replica[0] >= 0
    session = _session_context(ctx, request, now, follower)
    if session.error:
        return FetchResponse(error_code=session.error, session_id=0, responses=[])
    topics = _resolve_topics(ctx, follower, session.topics)
    watch = _watch_of(ctx, session, topics, now, replica)
    responses, s = _collect(ctx, request, topics, watch=watch, now=now, replica=replica)
    partitions = s.partitions
    if (
        s.total >= request.min_bytes
        or request.max_wait_ms <= 0
        or (not partitions and s.watch is None)
        or _has_error(responses)
    ):
        return _answered(ctx, request, session, topics, responses, follower)
    _close(responses)
    op = DelayedFetch(ctx, request, session, topics, s)
    if s.watch is not None:
        keys: Any = (s.watch,)
    elif follower:
        keys = partitions
    else:  # (a consumer's: see DelayedFetch)
        keys = []
        for p in partitions:
            keys.append(p.commits)
    ctx.services.purgatory.watch(op, keys)
    return op.answer


def _watch_of(
    ctx: RequestContext,
    session: FetchContext,
    topics: list[tuple[str | None, Any]],
    now: int,
    replica: tuple[int, int],
) -> tuple[FetchWatch, bool] | None:
    """Of a follower's incremental session: its watch, and whether to make it anew in this
    pass (the first Fetch of the session, or what the watch was made under changed: see
    replication/fetch_watch.py). None: read every partition (a consumer's, a sessionless
    fetch, a topic unknown or not authorized)."""
    if type(session) is not IncrementalFetch or not session.session.privileged:
        return None
    fs = session.session
    for name, _ in topics:
        if type(name) is not str:
            if fs.watch is not None:
                fs.watch.close()
                fs.watch = None
            return None
    replica_id, broker_epoch = replica
    watch = fs.watch if isinstance(fs.watch, FetchWatch) else None
    if (
        watch is not None
        and _same_stamp(ctx, watch.stamp)  # (the stamp is made only for a new watch)
        and watch.holds(watch.stamp, replica_id, broker_epoch, fs.members, fs.view)
    ):
        watch.begin(now)
        return watch, False
    if fs.watch is not None:
        fs.watch.close()
    watch = fs.watch = FetchWatch(_stamp(ctx), replica_id, broker_epoch, fs.members, fs.view)
    watch.begin(now)
    return watch, True


def _stamp(ctx: RequestContext) -> tuple[Any, int, int]:
    """What moves when a partition's answer may change without an event on it: the metadata
    image, a partition applied or removed, a log's start or health (ReplicaManager.stamp)."""
    changes, logs = ctx.services.replicas.stamp()
    return ctx.services.store.image, changes, logs


def _same_stamp(ctx: RequestContext, stamp: tuple[Any, int, int]) -> bool:
    """Whether `_stamp(ctx)` would still be `stamp` (read without making it: a parked
    follower's Fetch asks at every event on its session)."""
    services = ctx.services
    replicas = services.replicas
    return stamp[0] is services.store.image and (stamp[1], stamp[2]) == replicas.stamp()


def _read_state(ctx: RequestContext, request: Any, topics: list[tuple[str | None, Any]]) -> Any:
    """What a pass over the request's partitions depends on, per partition: the partition
    hosted, its leader and epoch, the offset its read stops at (the log end for a follower,
    the high watermark or the last stable offset for a consumer), its log start and whether
    its log is offline. While it is unchanged, a pass would answer as the last one did."""
    replicas = ctx.services.replicas
    follower = _replica_of(ctx, request)[0] >= 0
    committed = ctx.version >= 4 and request.isolation_level == READ_COMMITTED
    state: list[Any] = []
    for name, t in topics:
        if name is None or isinstance(name, Unauthorized):
            continue
        for fp in t.partitions:
            p = replicas.get(name, fp.partition)
            if p is not None:  # (one gone or new changes the length)
                state.append(_partition_state(p, follower, committed))
    return state


def _partition_state(p: Partition, follower: bool, committed: bool) -> tuple[Any, ...]:
    lg = p.log
    if follower:
        upper = lg.log_end_offset
    else:
        upper = lg.last_stable_offset if committed else lg.high_watermark
    return (p, p.leader_id, p.leader_epoch, upper, lg.log_start_offset, lg.offline)


def _has_error(responses: list[Any]) -> bool:
    """An error or a diverging epoch: an answer the client must act on, sent without waiting."""
    for t in responses:
        for p in t.partitions:
            if p.error_code or p.diverging_epoch.epoch >= 0:
                return True
    return False


class DelayedFetch(DelayedOperation):
    """A Fetch waiting for min_bytes (Kafka's DelayedFetch; of an incremental fetch, every
    partition of its session is read, and so watched): each event on a partition it reads
    reads them all again, unless none of them changed in what the read depends on (its
    `_read_state`: a follower's fetch is not read again when only the high watermark moved, as
    Kafka's DelayedFetch counts only new bytes); complete once min_bytes are ready, an error is
    to be told, or a partition is no longer the one watched; at max_wait_ms, answered with what
    is there.

    A consumer's fetch waits on its partitions' `commits` (moves of the high watermark and
    leadership changes), not on every append: it reads to the high watermark (or the last
    stable offset, which moves only with it), so an append that leaves the high watermark where
    it was cannot change its answer (Kafka tries it at each append, and finds that)."""

    __slots__ = (
        "ctx", "request", "session", "topics", "partitions", "responses", "answer", "state",
        "slots", "follower", "committed", "told", "watch", "dirty",
    )  # fmt: skip

    def __init__(
        self,
        ctx: RequestContext,
        request: Any,
        session: FetchContext,
        topics: list[tuple[str | None, Any]],
        read: _Pass,
    ) -> None:
        # (the pass read the clock; the base named, not super(): one Fetch in three parks)
        DelayedOperation.__init__(self, read.now + request.max_wait_ms)
        self.ctx, self.request, self.session, self.topics = ctx, request, session, topics
        self.partitions = read.partitions
        self.responses: list[Any] = []
        self.answer = Pending("fetch")
        self.follower = read.replica_id >= 0
        self.committed = read.read_committed
        self.slots: dict[Any, int] | None = None  # each partition's place in `state`
        self.told = set(read.told)  # of an incremental session: those the last pass answered
        # A watched follower's session: parked on its watch, `dirty` is the state of the
        # partitions the last pass read (the dirty ones), by partition, and an event reads the
        # dirty ones again; `state` is then left empty.
        self.watch = read.watch
        self.state: list[tuple[Any, ...]] = []
        self.dirty: dict[Partition, tuple[Any, ...]] = {}
        self._remember(read.partitions)

    def _remember(self, partitions: list[Partition]) -> None:
        """What a pass over `partitions` depended on: `_partition_state` of each (written out
        for a follower's: its session's partitions are parked on at every Fetch)."""
        follower, committed = self.follower, self.committed
        # (loops: a comprehension makes a function at each run, here at every pass)
        if self.watch is not None:
            dirty = self.dirty = {}
            for p in partitions:
                lg = p.log
                dirty[p] = (p, p.leader_id, p.leader_epoch, lg.log_end_offset,
                            lg.log_start_offset, lg.offline)  # fmt: skip
        else:
            state = self.state = []
            for p in partitions:
                if follower:
                    lg = p.log
                    state.append((p, p.leader_id, p.leader_epoch, lg.log_end_offset,
                                  lg.log_start_offset, lg.offline))  # fmt: skip
                else:
                    state.append(_partition_state(p, follower, committed))
        self.slots = None

    def try_complete_after(self, key: Any) -> bool:
        """After an event on one partition: if what this fetch reads of it is unchanged (a
        follower's partition whose high watermark moved, a consumer's that got records above
        its high watermark), nothing else is looked at. Otherwise the partitions are read
        again; of an incremental session only that one and those the last pass answered (the
        others were quiet, and an event on any of them is checked on its own)."""
        if self.watch is not None:
            return self._after_session_event()
        state = self.state
        if len(state) == 1:  # (a consumer's Fetch of one partition, the common one)
            p = state[0][0]
            if key is not p and key is not p.commits:
                return self.try_complete()
            i = 0
        else:
            slots = self.slots
            if slots is None:  # (by partition, and by its `commits`: a consumer's key)
                slots = self.slots = {}
                for i, st in enumerate(state):
                    slots[st[0]] = slots[st[0].commits] = i
            found = slots.get(key)
            if found is None:
                return self.try_complete()
            i = found
            p = state[i][0]
        if _partition_state(p, self.follower, self.committed) == state[i]:
            return False
        return self._read_again({p, *self.told})

    def try_complete(self) -> bool:
        if self.watch is not None:
            return self._after_session_event()
        if _read_state(self.ctx, self.request, self.topics) == self.state:
            return False
        return self._read_again(None)

    def _after_session_event(self) -> bool:
        """An event on a partition of the watched session: read the dirty partitions again
        if one of them is new to this fetch or changed in what its read depends on. If the
        watch no longer holds (new metadata, a partition gone or a log's start moved), every
        partition is read and the fetch answered."""
        watch = self.watch
        assert watch is not None
        if watch.closed or not _same_stamp(self.ctx, watch.stamp):
            self.responses, _ = _collect(self.ctx, self.request, self.topics, first=False)
            return True
        state = self.dirty
        for entry in watch.dirty:
            p = entry.partition
            lg = p.log  # (`_partition_state` of a follower's, inline; None: new to this fetch)
            if (
                p,
                p.leader_id,
                p.leader_epoch,
                lg.log_end_offset,
                lg.log_start_offset,
                lg.offline,
            ) != state.get(p):
                return self._read_again(None)
        return False

    def _read_again(self, only: set[Partition] | None) -> bool:
        """Read again: complete with min_bytes, an error, or a partition no longer the one
        watched; else remember what this pass depended on."""
        watch = None if self.watch is None else (self.watch, False)
        responses, s = _collect(self.ctx, self.request, self.topics, False, only, watch)
        partitions = s.partitions
        if (
            s.total >= self.request.min_bytes
            or _has_error(responses)
            or (
                self.watch is None
                and (
                    len(partitions) != len(self.partitions)
                    or any(a is not b for a, b in zip(partitions, self.partitions))  # noqa: B905
                )
            )
        ):
            self.responses = responses
            return True
        _close(responses)
        self._remember(partitions)
        self.told = set(s.told)
        return False

    def on_expiration(self) -> None:
        watch = self.watch
        held = None
        if watch is not None and not watch.closed and watch.stamp == _stamp(self.ctx):
            held = (watch, False)
        self.responses, _ = _collect(self.ctx, self.request, self.topics, first=False, watch=held)

    def on_complete(self) -> None:
        answer = _answered(
            self.ctx, self.request, self.session, self.topics, self.responses, self.follower
        )
        # A completed operation stays in the purgatory's timer heap until its deadline comes
        # up or the heap is compacted: let go of what it read and of its answer, so the request,
        # its context, its passes and (once sent) the response are freed now rather than walked
        # by the garbage collector while it waits.
        pending = self.answer  # (the caller has it: the operation need not)
        del self.ctx, self.request, self.session, self.topics, self.partitions, self.responses
        del self.state, self.slots, self.told, self.watch, self.answer, self.dirty
        pending.complete(answer)


def _response(
    ctx: RequestContext,
    session: FetchContext,
    topics: list[tuple[str | None, Any]],
    responses: list[Any],
    follower: bool,
) -> Any:
    """The response of the partitions read; of an incremental fetch, only those the session
    says have something new."""
    _count(ctx, topics, responses, not follower)
    # (of the contexts, only a full fetch's answer reads the time: a new session's creation)
    now = ctx.services.now_ms() if isinstance(session, FullFetch) else -1
    answers = []
    for t in responses:  # (a loop: cheaper than a comprehension's function for a few topics)
        answers.append(t.partitions)
    error, session_id, kept = session.respond(answers, now)
    if error:
        _close(responses)
        return FetchResponse._make(error_code=error, session_id=session_id, responses=[])
    if kept is not None:
        assert len(kept) == len(responses)  # (zip's `strict`, without its keyword's cost)
        answered = []
        for t, parts in zip(responses, kept):  # noqa: B905 - asserted
            if parts:  # (a topic with nothing left to tell is left out)
                t.partitions = parts
                answered.append(t)
        responses = answered
    return FetchResponse._make(error_code=errors.NONE, session_id=session_id, responses=responses)


# Errors of a partition read that Kafka's FailedFetchRequestsPerSec does not count: they tell
# the client something about the partition, not that the broker failed to read it.
_EXPECTED_ERRORS = frozenset(
    errors.BY_NAME[name].code
    for name in (
        "UNKNOWN_TOPIC_OR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_LEADER_EPOCH",
        "FENCED_LEADER_EPOCH", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR",
        "INCONSISTENT_TOPIC_ID", "OFFSET_OUT_OF_RANGE",
    )
)  # fmt: skip


def _count(
    ctx: RequestContext,
    topics: list[tuple[str | None, Any]],
    responses: list[Any],
    consumer: bool,
) -> None:
    """Kafka's BrokerTopicMetrics of the answer: each partition read a fetch request of its
    topic (of an incremental fetch, every partition of the session, answered or not), failed
    if its read failed unexpectedly, and the record bytes sent to a consumer."""
    stats = ctx.services.topic_stats
    known = stats.topics
    assert len(topics) == len(responses)  # (zip's `strict`, without its keyword's cost)
    for (name, t), answered in zip(topics, responses):  # noqa: B905 - asserted
        if type(name) is not str:  # unknown (None), or Unauthorized
            continue
        counts = known.get(name) or stats.topic(name)
        counts.total_fetch += len(t.partitions)
        for p in answered.partitions:
            code = p.error_code
            if code:
                if code not in _EXPECTED_ERRORS:
                    counts.failed_fetch += 1
            elif consumer:
                records = p.records
                counts.bytes_out += (
                    len(records) if isinstance(records, (bytes, bytearray)) else records.length
                )


__all__ = ["handle", "uuid"]
