"""Drive a `TransactionCoordinatorShard` by hand, as the runtime does: every operation's records
are kept in `log` (encoded and decoded again, as they would be on disk) and replayed; marker
requests go to `markers`, a fake writer the test answers (or that answers by itself). Time is
whatever the test says it is.

    h = Harness()
    pid, epoch = h.init("tx")                 # asserts NONE
    h.add("tx", pid, epoch, ("t", 0))
    h.end("tx", pid, epoch, commit=True)
    h.answer_markers()                         # every marker written: CompleteCommit appended
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import TxnRecord, decode, encode
from gregor.coordinator.txn.results import MarkerRequest, ProducerIdAndEpoch
from gregor.coordinator.txn.shard import TransactionCoordinatorShard, TxnConfig
from gregor.coordinator.txn.state import TxnState

FIRST_PID = 1000


class Harness:
    def __init__(
        self, config: TxnConfig | None = None, now_ms: int = 1_000_000, auto_markers: bool = False
    ) -> None:
        self.config = config or TxnConfig()
        self.now = now_ms
        self.pids = itertools.count(FIRST_PID)
        self.shard = self._new_shard()
        self.shard.on_loaded(self.now)
        self.log: list[TxnRecord] = []
        self.markers: list[MarkerRequest] = []  # asked for and not answered yet
        self.marker_history: list[MarkerRequest] = []
        self.auto_markers = auto_markers  # answer every marker request with NONE at once

    def _new_shard(self) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(0, self.config, lambda: next(self.pids))

    # -- the runtime's part ---------------------------------------------------------------------

    def _commit(self, records: list[TxnRecord]) -> None:
        for r in records:
            key, value = encode(r)
            again = decode(key, value)
            assert again == r, f"record does not survive encoding: {r} != {again}"
            self.log.append(r)
            self.shard.replay(r)  # our own record, as the runtime replays it
        self._collect()

    def _collect(self) -> None:
        asked = self.shard.take_marker_requests()
        self.markers += asked
        self.marker_history += asked
        if self.auto_markers:
            while self.markers:
                self.answer_markers()

    def _settle(self) -> None:
        while (d := self.shard.next_deadline_ms()) is not None and d <= self.now:
            self._commit(self.shard.poll(self.now))

    def run(self, step: tuple[list[TxnRecord], Any]) -> Any:
        records, answer = step
        self._commit(records)
        self._settle()
        return answer

    def advance(self, ms: int) -> None:
        """Move the clock forward, running every timer in order at its own deadline."""
        end = self.now + ms
        while (d := self.shard.next_deadline_ms()) is not None and d <= end:
            self.now = max(self.now, d)
            self._commit(self.shard.poll(self.now))
        self.now = end

    def answer_markers(
        self, errors: dict[tuple[str, int], int] | None = None, request: MarkerRequest | None = None
    ) -> MarkerRequest:
        """Answer the oldest marker request (or `request`): NONE for every partition unless
        `errors` says otherwise."""
        req = request or self.markers[0]
        self.markers.remove(req)
        answer = {tp: (errors or {}).get(tp, codes.NONE) for tp in req.partitions}
        self._commit(self.shard.markers_written(req, answer, self.now))
        return req

    def reload(self) -> TransactionCoordinatorShard:
        """A new shard made by replaying the log decoded from bytes, as a restart does; the
        markers of transactions left preparing are asked for again."""
        shard = self._new_shard()
        for r in self.log:
            again = decode(*encode(r))
            assert again is not None
            shard.replay(again)
        shard.on_loaded(self.now)
        self.shard = shard
        self.markers = []
        self._collect()
        return shard

    # -- requests -------------------------------------------------------------------------------

    def init_result(
        self, tid: str, timeout_ms: int = 60_000, expected: tuple[int, int] | None = None
    ) -> ProducerIdAndEpoch:
        result: ProducerIdAndEpoch = self.run(
            self.shard.init_producer_id(tid, timeout_ms, expected, self.now)
        )
        return result

    def init(
        self, tid: str, timeout_ms: int = 60_000, expected: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        r = self.init_result(tid, timeout_ms, expected)
        assert r.error == codes.NONE, r
        return r.producer_id, r.producer_epoch

    def add(self, tid: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> int:
        code: int = self.run(self.shard.add_partitions(tid, pid, epoch, partitions, self.now))
        return code

    def end(
        self, tid: str, pid: int, epoch: int, commit: bool = True, client_version: int = 0
    ) -> ProducerIdAndEpoch:
        result: ProducerIdAndEpoch = self.run(
            self.shard.end_txn(tid, pid, epoch, commit, client_version, self.now)
        )
        return result

    def state(self, tid: str) -> TxnState | None:
        m = self.shard.txns.get(tid)
        return m.state if m is not None else None

    def states_written(self, tid: str) -> list[str]:
        return [
            r.value.state.name if r.value is not None else "tombstone"
            for r in self.log
            if r.transactional_id == tid
        ]

    def verify(
        self, tid: str, pid: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        return self.shard.verify(tid, pid, epoch, partitions)
