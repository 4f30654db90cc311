"""Which partitions of a follower's fetch session changed since its last Fetch: the leader's
side of reading only those (sans I/O).

A follower's session names every partition it replicates from this leader, and at most of its
Fetches only the one or two being written to have anything new. Kafka reads every partition of
a session at every Fetch; here a `FetchWatch`, kept with the session, subscribes once to each
partition's events and sorts the partitions in two:

- **clean**: its last read found the follower at our log end, in the ISR, with nothing to tell,
  and since then the partition had no event and no request of the session named it. Reading it
  again would find the same. A Fetch skips it.
- **dirty**: everything else (new in the watch, named by a request, had an event, or was not
  quiet when last read). A Fetch reads it as before, and it turns clean once a read finds it so.

A clean partition's follower state is still fetched at every Fetch of the session: each one
finds the follower at our log end, so its caught-up and last-fetch times are those of the
session's latest Fetch. The state is bound to the watch (`ReplicaState.clock`) and reads
`fetch_ms` from it; the times are written into the state as it leaves clean (an event, a
request naming it, the watch closing), before anything reads them as the follower's own.

A Fetch parked on a watched session waits on the watch (one key in the purgatory, whatever the
number of partitions): an event on any partition of the session notifies it.

What changes a partition's answer without an event on it (new metadata, the partition hosted
anew or removed, a log's start moved up, a log offline) moves the `stamp` the handler passes in;
a watch made under another stamp, for another broker epoch, or over another set of partitions
is closed, and that Fetch reads every partition, making a new one.
"""

from __future__ import annotations

from typing import Any

from gregor.replication.partition import Watchers


class _Entry:
    """One partition of the watched session."""

    __slots__ = ("watch", "cached", "partition", "state", "topic_index", "clean", "on_event")

    def __init__(
        self, watch: FetchWatch, cached: Any, partition: Any, state: Any, topic_index: int
    ) -> None:
        self.watch = watch
        self.cached = cached  # the session's CachedPartition
        self.partition = partition  # the hosted Partition
        self.state = state  # the follower's ReplicaState on it (None: it has none)
        self.topic_index = topic_index  # the place of its topic among the session's topics
        self.clean = False
        self.on_event = self._on_event  # (one bound method: subscribed and removed as itself)

    def _on_event(self) -> None:
        """An event on the partition (a one-shot call): subscribe again, turn dirty, and tell
        whatever waits on the watch."""
        watch = self.watch
        if watch.closed:
            return
        self.partition.fetches.watchers.append(self.on_event)  # (`Watchers.watch`, inline)
        if self.clean:
            watch.unclean(self)
        watch.notify()


class FetchWatch(Watchers):
    """The clean and dirty partitions of one follower's session (module docstring), and the
    purgatory key its parked Fetch waits on."""

    __slots__ = (
        "stamp", "replica_id", "broker_epoch", "members", "view", "entries", "dirty",
        "fetch_ms", "closed",
    )  # fmt: skip

    def __init__(
        self, stamp: Any, replica_id: int, broker_epoch: int, members: int, view: Any
    ) -> None:
        self.stamp = stamp
        self.replica_id = replica_id
        self.broker_epoch = broker_epoch
        self.members = members  # the session's membership count it was made for
        self.view = view  # the session's topics it was made over (entries know their places)
        self.entries: dict[Any, _Entry] = {}  # by CachedPartition
        # The dirty entries, in the order to read them: a partition that got records is read
        # last next time (the fairness Kafka gets by moving it to the end of its session).
        self.dirty: dict[_Entry, None] = {}
        self.fetch_ms = 0  # when the session's latest Fetch came
        self.closed = False
        super().__init__()  # (the Fetches parked on the watch: the purgatory's key)

    def holds(
        self, stamp: Any, replica_id: int, broker_epoch: int, members: int, view: Any
    ) -> bool:
        """Whether the watch still describes the session for a Fetch under these."""
        return (
            not self.closed
            and self.members == members
            and self.view is view
            and self.replica_id == replica_id
            and self.broker_epoch == broker_epoch
            and self.stamp == stamp
        )

    # -- building -------------------------------------------------------------------------------

    def add(self, cached: Any, partition: Any, state: Any, topic_index: int) -> _Entry:
        """Watch one partition of the session (dirty until a read finds it clean)."""
        entry = _Entry(self, cached, partition, state, topic_index)
        self.entries[cached] = entry
        self.dirty[entry] = None
        partition.fetches.watch(entry.on_event)
        return entry

    def close(self) -> None:
        """The session ended or the watch is replaced: unsubscribe, write the times of the
        clean partitions' follower states, and tell a Fetch still parked on the watch (it
        answers with every partition read)."""
        if self.closed:
            return
        self.closed = True
        for entry in self.entries.values():
            entry.partition.fetches.unwatch(entry.on_event)
            if entry.clean and entry.state is not None and entry.state.clock is self:
                entry.state.unbind()
        self.entries.clear()
        self.dirty.clear()
        self.notify()

    # -- a Fetch --------------------------------------------------------------------------------

    def touch(self, cached: Any) -> None:
        """A request named the partition (new fetch parameters): read it at this Fetch."""
        entry = self.entries.get(cached)
        if entry is not None and entry.clean:
            self.unclean(entry)

    def begin(self, now_ms: int) -> None:
        """A Fetch of the session at `now_ms` (after the partitions it names are touched): the
        clean partitions' followers were fetched again at our log end now."""
        self.fetch_ms = now_ms

    def mark_clean(self, entry: _Entry) -> None:
        """A read found the follower in sync at our log end, with nothing to tell."""
        state = entry.state
        if state is None:
            return
        entry.clean = True
        del self.dirty[entry]
        if state.clock is not None:  # (another session's of the same follower)
            state.unbind()
        state.clock = self

    def read_last(self, cached: Any) -> None:
        """The partition got records: read it after the others next time."""
        dirty = self.dirty
        entry = self.entries.get(cached)
        if entry in dirty:
            del dirty[entry]
            dirty[entry] = None

    def unclean(self, entry: _Entry) -> None:
        entry.clean = False
        state = entry.state
        if state is not None and state.clock is self:
            state.unbind()
        self.dirty[entry] = None


__all__ = ["FetchWatch"]
