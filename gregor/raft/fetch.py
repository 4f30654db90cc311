"""The leader's side of Fetch: where a follower's position stands against the leader's log, and
the fetches parked until there is something to answer.

`validate_fetch_position(log, fetch_offset, last_fetched_epoch)` is Kafka's
validateOffsetAndEpoch. With a snapshot at the log start, the follower must fetch the snapshot
when its offset is below the log start, equal to it with another epoch than the snapshot's, in
an epoch older than the snapshot's, or 0 (an empty follower loads the snapshot, not the log).
Otherwise the leader looks up the largest epoch it has <= the last fetched epoch, and where that
epoch ends: if it is another epoch, or ends before the fetch offset, the logs diverge there.

    leader:    epoch 1 at [0, 3), epoch 3 at [3, 6)
    follower:  fetch offset 5, last fetched epoch 2 (it wrote 3-4 in epoch 2)
    -> the leader's largest epoch <= 2 is 1, which ends at 3: DIVERGING (1, 3). The follower
       truncates to min(3, where its own epoch 1 ends) and fetches again from there.

A valid fetch that finds nothing new is parked (`FetchPurgatory`) until the log grows past its
offset or its wait runs out. A high watermark its node has not been told yet (the node's own
Fetch moved it, or another's did) shortens the wait to `high_watermark_linger_ms`: the news
rides with the next append's records when one comes within that time (the usual case while
writes follow each other), so each commit costs one Fetch answer and one Fetch per follower,
not two; alone, it is answered by then.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.leader import NEVER
from gregor.raft.log import RaftLog

SNAPSHOT_NOT_FOUND = errors.BY_NAME["SNAPSHOT_NOT_FOUND"].code
POSITION_OUT_OF_RANGE = errors.BY_NAME["POSITION_OUT_OF_RANGE"].code


class Position(enum.Enum):
    VALID = 0
    DIVERGING = 1  # with (epoch, end offset) on the leader
    SNAPSHOT = 2  # with (end offset, epoch) of the latest snapshot


def validate_fetch_position(log: RaftLog, offset: int, epoch: int) -> tuple[Position, int, int]:
    snapshot = log.latest_snapshot()
    start = log.start_offset
    if snapshot is not None and (
        offset < start
        or (offset == start and epoch != snapshot.epoch)
        or epoch < snapshot.epoch
        or offset == 0
    ):
        return Position.SNAPSHOT, snapshot.end_offset, snapshot.epoch
    found_epoch, end = log.end_offset_for_epoch(epoch)
    if found_epoch != epoch or end < offset:
        return Position.DIVERGING, found_epoch, end
    return Position.VALID, offset, epoch


@dataclass(slots=True)
class ParkedFetch:
    source: int
    request: m.FetchRequest
    deadline_ms: int
    high_watermark: int  # the high watermark its node was last told (-1: none)


class FetchPurgatory:
    """Parked fetches; at most one per request, each gone by its deadline."""

    def __init__(self) -> None:
        self._parked: list[ParkedFetch] = []

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, parked: ParkedFetch) -> None:
        self._parked.append(parked)

    def due(self, now_ms: int, log: RaftLog) -> list[ParkedFetch]:
        """Take out the fetches with data to read (below `log`'s end) or no time left."""
        if not self._parked:  # a leader with no follower waiting (one voter: always)
            return []
        log_end_offset = log.end_offset
        for p in self._parked:  # most polls find none: nothing is built for them
            if now_ms >= p.deadline_ms or p.request.fetch_offset < log_end_offset:
                break
        else:
            return []
        due: list[ParkedFetch] = []
        keep: list[ParkedFetch] = []
        for p in self._parked:
            ready = now_ms >= p.deadline_ms or p.request.fetch_offset < log_end_offset
            (due if ready else keep).append(p)
        self._parked = keep
        return due

    def high_watermark_moved(self, high_watermark: int, deadline_ms: int) -> None:
        """The leader's high watermark is now `high_watermark`: a fetch whose node was told
        another is answered by `deadline_ms` at the latest (sooner if records come)."""
        for p in self._parked:
            if p.high_watermark != high_watermark and p.deadline_ms > deadline_ms:
                p.deadline_ms = deadline_ms

    def drain(self) -> list[ParkedFetch]:
        parked, self._parked = self._parked, []
        return parked

    def next_deadline(self) -> int:
        if not self._parked:
            return NEVER
        return min(p.deadline_ms for p in self._parked)


def snapshot_chunk(data: bytes | None, position: int, max_bytes: int) -> tuple[int, bytes]:
    """(error, bytes) for a FetchSnapshot of `data` from `position`."""
    if data is None:
        return SNAPSHOT_NOT_FOUND, b""
    if position < 0 or (position >= len(data) and not position == len(data) == 0):
        return POSITION_OUT_OF_RANGE, b""
    return errors.NONE, data[position : position + max_bytes]
