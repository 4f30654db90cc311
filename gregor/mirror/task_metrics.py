"""The source task's side of the metrics (`gregor mirror --metrics`), kept apart from its copy
loop: what it hands `PartitionTracker` once per round, what counts as acknowledged, and the
lag from the consumer's cached watermarks. A mixin of `SourceTask`; with no `MirrorMetrics`
given, the task does none of it."""

from __future__ import annotations

from typing import Any

from gregor.clock import Clock
from gregor.mirror.config import Flow
from gregor.mirror.metrics import MirrorMetrics, PartitionTracker
from gregor.mirror.offsets import OffsetSyncEmitter

TP = tuple[str, int]
LAG_INTERVAL_MS = 1000


class MeasuredSource:
    flow: Flow
    clock: Clock
    consumer: Any
    emitter: OffsetSyncEmitter
    emit_syncs: bool

    def _init_metrics(self, metrics: MirrorMetrics | None) -> None:
        self.metrics = metrics
        self.tracker = (
            None
            if metrics is None
            else PartitionTracker(
                metrics, self.flow.source, self.flow.target, self.flow.remote_topic
            )
        )
        self.acked: dict[TP, int] = {}  # without offset syncs: the last acknowledged offset
        self.committed: dict[TP, int] = {}  # the next offset, as last committed
        self.skipped: dict[TP, list[int]] = {}  # not copied (a cycle's): [records, bytes]
        self.next_lag_ms = 0

    def _measure(self, batch: list[Any]) -> None:
        """Once per round: the batch read and what the target acknowledged; every second,
        publish them and the lag."""
        assert self.tracker is not None and self.metrics is not None
        now = self.clock.now_ms()
        if batch:
            self.tracker.polled(batch, now, self.skipped)
            self.skipped.clear()
        self.tracker.acknowledged(self._acked, now)
        if now >= self.next_lag_ms:
            self.next_lag_ms = now + LAG_INTERVAL_MS
            self.tracker.publish(now)
            self.metrics.set_lags(self.flow.source, self.flow.target, self._lags())

    def _acked(self, tp: TP) -> int:
        """The last source offset of `tp` the target acknowledged, or that is behind the last
        commit (records not copied, as a cycle's, are acknowledged by none) (-1: none yet)."""
        done = self.committed.get(tp, 0) - 1
        if self.emit_syncs:
            state = self.emitter.partitions.get(tp)
            return done if state is None else max(done, state.previous_upstream_offset)
        return max(done, self.acked.get(tp, -1))

    def _lags(self) -> dict[TP, int]:
        """Source end offset minus the next offset to copy, per assigned partition, from the
        consumer's cached watermarks (no request)."""
        out: dict[TP, int] = {}
        for tp in self.consumer.position(self.consumer.assignment()):
            if tp.offset < 0:
                continue
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high >= 0:
                out[(tp.topic, tp.partition)] = max(0, high - tp.offset)
        return out

    def _measure_skipped(self, tp: TP, m: Any) -> None:
        """A record consumed and not copied (a cycle's)."""
        skipped = self.skipped.setdefault(tp, [0, 0])
        skipped[0] += 1
        skipped[1] += len(m)

    def _measure_revoked(self, taken: list[TP]) -> None:
        """Partitions taken away: count what was acknowledged, drop the rest and their lag."""
        assert self.tracker is not None and self.metrics is not None
        now = self.clock.now_ms()
        self.tracker.acknowledged(self._acked, now)
        self.tracker.publish(now)
        self.tracker.forget(taken)
        self.metrics.drop_lags(self.flow.source, self.flow.target, taken)
