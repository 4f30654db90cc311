"""Deliberately broken variants of the data plane, to prove the simulation can fail: each one
breaks one rule replication rests on, and the invariants must catch it within a few seeds
(tests/sim/test_replication_sim.py). They live here, as subclasses; the product has no switch
for them.

    acks-at-append      acks=all answered once the leader appended, not once the HW passed
    hw-max-leo          the leader's HW is the largest log end among the ISR, not the smallest
    no-truncation       a follower told its log diverges keeps it as it is (it never catches
                        up: the liveness check at the end catches it, if nothing earlier)
    no-divergence-check a follower never asks whether its log diverges, so never truncates:
                        replicas' logs differ below the HW
    lso-is-hw           read_committed reads up to the HW, with no aborted transactions
                        listed (as if there were no transactions)
    offsets-at-append   the group coordinator answers once its records are appended, not once
                        they are replicated: an acknowledged OffsetCommit a failover loses is
                        read back lower
    txn-offsets-abort-as-commit
                        the group coordinator takes an ABORT marker in __consumer_offsets for a
                        COMMIT: an aborted transaction's offsets are read back
    markers-at-append   (FIXED) a transaction marker is answered once appended, not once on every ISR
                        member (what gregor's WriteTxnMarkers did until the simulation found
                        a marker lost with a stale leader, seed 41): a committed transaction
                        stays open in that partition, and the next one's marker ends both
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from gregor.coordinator.deferred import HeldAnswers
from gregor.coordinator.runtime import GroupCoordinator
from gregor.metadata.image import PartitionRegistration
from gregor.protocol import errors
from gregor.replication.follower import FollowerFetcher
from gregor.replication.partition import Partition, ReplicaManager
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory
from gregor.sim.broker_host import BrokerHost
from gregor.sim.coordinator_host import Broker, Coordinators
from gregor.sim.replication import ReplicationConfig, Result, Simulation
from gregor.sim.rpc import ConsumerFetch
from gregor.storage.config import LogConfig


class AcksAtAppendPartition(Partition):
    """Tells the delayed produce an acks=all write is acknowledged once appended."""

    def acks_all_status(self, required_offset: int, leader_epoch: int) -> int | None:
        if not self.is_leader or self.leader_epoch != leader_epoch:
            return errors.NOT_LEADER_OR_FOLLOWER
        return errors.NONE


class MaxLeoPartition(Partition):
    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        if not self.is_leader or self.under_min_isr:
            return False
        ends = [self.log.log_end_offset]
        ends += [s.log_end_offset for s in self.followers.values() if s.broker_id in self.isr]
        new_hw = min(max(ends), self.log.log_end_offset)
        if new_hw <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new_hw)
        self.notify()
        return True


class _PartitionsOf(ReplicaManager):
    """Hosts its partitions as `partition_class`."""

    partition_class: type[Partition] = Partition

    def apply(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        reg: PartitionRegistration,
        config: LogConfig,
        min_insync_replicas: int,
        now_ms: int,
    ) -> Partition:
        p = super().apply(topic, index, topic_id, reg, config, min_insync_replicas, now_ms)
        p.__class__ = self.partition_class
        return p


class AcksAtAppendReplicas(_PartitionsOf):
    partition_class = AcksAtAppendPartition


class AcksAtAppendBroker(BrokerHost):
    replica_manager_class = AcksAtAppendReplicas


class MaxLeoReplicas(_PartitionsOf):
    partition_class = MaxLeoPartition


class MaxLeoBroker(BrokerHost):
    replica_manager_class = MaxLeoReplicas


class NoTruncationFetcher(FollowerFetcher):
    """Told that its log diverges from the leader's, it keeps it as it is."""

    def _truncate(self, p: Partition, leader_epoch: int, leader_end_offset: int) -> int:
        return int(p.log.log_end_offset)


class NoDivergenceCheckFetcher(NoTruncationFetcher):
    """Never names its last fetched epoch, so the leader never tells it that its log diverges:
    it appends what follows on the leader onto whatever it has (Kafka before KIP-101)."""

    def build_request(self, now_ms: int, broker_epoch: int) -> Any:
        built = super().build_request(now_ms, broker_epoch)
        if built is not None:
            for topic in built[0].topics:
                for fp in topic.partitions:
                    fp.last_fetched_epoch = -1
        return built


class NoTruncationBroker(BrokerHost):
    fetcher_class = NoTruncationFetcher


class NoDivergenceCheckBroker(BrokerHost):
    fetcher_class = NoDivergenceCheckFetcher


class LsoIsHwBroker(BrokerHost):
    def _consumer_fetch(self, src: int, corr: int, body: ConsumerFetch) -> None:
        super()._consumer_fetch(src, corr, replace(body, read_committed=False))


class AnswersAtAppend(HeldAnswers):
    def answer(
        self, index: int, partition: Partition, release: Any, fail: Any, deadline: Any
    ) -> bool:
        release()
        return True


class OffsetsAtAppendCoordinators(Coordinators):
    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.groups.runtime.held = AnswersAtAppend()


class OffsetsAtAppendBroker(BrokerHost):
    coordinators_class = OffsetsAtAppendCoordinators


class AbortAsCommitGroups(GroupCoordinator):
    def complete_transaction(
        self, offsets_partition: int, producer_id: int, committed: bool
    ) -> None:
        super().complete_transaction(offsets_partition, producer_id, True)


class AbortAsCommitCoordinators(Coordinators):
    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.groups.__class__ = AbortAsCommitGroups


class AbortAsCommitBroker(BrokerHost):
    coordinators_class = AbortAsCommitCoordinators


class NoWaiting(DelayedOperationPurgatory):
    """Every operation is done at once, with the answer it was made with."""

    def try_complete_else_watch(self, op: DelayedOperation, keys: Any) -> bool:
        return True


class MarkersAtAppendCoordinators(Coordinators):
    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.purgatory = NoWaiting("markers")


class MarkersAtAppendBroker(BrokerHost):
    coordinators_class = MarkersAtAppendCoordinators


BROKEN: dict[str, type[BrokerHost]] = {
    "acks-at-append": AcksAtAppendBroker,
    "hw-max-leo": MaxLeoBroker,
    "no-truncation": NoTruncationBroker,
    "no-divergence-check": NoDivergenceCheckBroker,
    "lso-is-hw": LsoIsHwBroker,
    "offsets-at-append": OffsetsAtAppendBroker,
    "txn-offsets-abort-as-commit": AbortAsCommitBroker,
}
# What gregor did before a fix the simulation found: its regression test runs the seed that
# showed it (tests/sim), not a bounded search.
FIXED: dict[str, type[BrokerHost]] = {
    "markers-at-append": MarkersAtAppendBroker,
}


def run_broken(name: str, seed: int, config: ReplicationConfig | None = None) -> Result:
    """One seed of the simulation with every broker of the broken variant `name`."""

    class Broken(Simulation):
        broker_class = BROKEN[name] if name in BROKEN else FIXED[name]

    return Broken(seed, config).run()


__all__: list[Any] = ["BROKEN", "FIXED", "run_broken"]
