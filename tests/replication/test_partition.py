"""The leader side of replication, sans I/O (replication/partition.py): the high-watermark rule,
ISR shrink and expand decisions on a fake clock, AlterPartition answers, acks=all completion,
diverging-epoch answers, and leadership changes from the metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.protocol import errors
from gregor.protocol.errors import BY_NAME, KafkaError
from gregor.replication.partition import IsrUpdate, Partition
from gregor.storage.config import LogConfig

from .helpers import NOW, TOPIC_ID, Cluster, host, manager, produce, registration

INELIGIBLE_REPLICA = BY_NAME["INELIGIBLE_REPLICA"].code
FENCED_LEADER_EPOCH = BY_NAME["FENCED_LEADER_EPOCH"].code
UNKNOWN_LEADER_EPOCH = BY_NAME["UNKNOWN_LEADER_EPOCH"].code
NOT_ENOUGH_REPLICAS_AFTER_APPEND = BY_NAME["NOT_ENOUGH_REPLICAS_AFTER_APPEND"].code
LAG = 10_000


def leader(
    tmp_path: Path, isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 1, epoch: int = 0
) -> tuple[Partition, list[IsrUpdate], Cluster]:
    cluster = Cluster()
    rm = manager(tmp_path, 1, cluster, lag_ms=LAG)
    sent: list[IsrUpdate] = []
    rm.on_isr_update = lambda p, u: sent.append(u)
    p = host(rm, registration(1, epoch, isr), min_isr=min_isr)
    return p, sent, cluster


def fetch(
    p: Partition,
    replica: int,
    offset: int,
    now: int = NOW,
    epoch: int | None = None,
    last_epoch: int = -1,
) -> object:
    return p.fetch_for_follower(
        replica,
        100 + replica if epoch is None else epoch,
        offset,
        last_epoch,
        p.leader_epoch,
        0,
        1 << 20,
        True,
        now,
    )


def test_the_high_watermark_is_the_smallest_log_end_offset_of_the_isr_and_never_goes_back(
    tmp_path: Path,
) -> None:
    p, _, _ = leader(tmp_path)
    produce(p, 5)
    assert p.high_watermark == 0, "a new leader knows no follower's LEO yet"
    fetch(p, 2, 5)
    assert p.high_watermark == 0
    fetch(p, 3, 3)
    assert p.high_watermark == 3
    fetch(p, 3, 5)
    assert p.high_watermark == 5
    produce(p, 2)
    assert p.high_watermark == 5 and p.log.log_end_offset == 7
    fetch(p, 2, 7)
    fetch(p, 3, 4)  # a follower that truncated: the HW does not go back
    assert p.high_watermark == 5


def test_a_waiting_fetch_is_woken_when_the_high_watermark_moves(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1, 2))
    produce(p, 3)
    woken: list[int] = []
    p.watch(lambda: woken.append(1))
    fetch(p, 2, 2)  # the follower has 2 of 3: the HW moves to 2
    assert p.high_watermark == 2 and woken == [1]


def test_an_isr_of_one_moves_the_high_watermark_with_each_append(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1,))
    produce(p, 4)
    assert p.high_watermark == 4
    assert p.acks_all_status(4, p.leader_epoch) == errors.NONE


def test_below_the_effective_min_isr_the_high_watermark_stays(tmp_path: Path) -> None:
    """Kafka 3.7+: with fewer ISR members than min(min.insync.replicas, replicas) consumers do
    not see new writes (acks=1 ones included)."""
    p, _, _ = leader(tmp_path, isr=(1,), min_isr=2)
    produce(p, 3, acks=1)
    assert p.high_watermark == 0 and p.log.log_end_offset == 3
    with pytest.raises(KafkaError) as refused:
        produce(p, 1, acks=-1)
    assert refused.value.code == errors.NOT_ENOUGH_REPLICAS


def test_acks_all_completes_once_the_high_watermark_passes_the_batch(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1, 2))
    last = produce(p, 3)
    assert p.acks_all_status(last + 1, p.leader_epoch) is None
    fetch(p, 2, 2)
    assert p.acks_all_status(last + 1, p.leader_epoch) is None
    fetch(p, 2, 3)
    assert p.acks_all_status(last + 1, p.leader_epoch) == errors.NONE


def test_acks_all_fails_when_leadership_moves_while_it_waits(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1, 2))
    last = produce(p, 3)
    epoch = p.leader_epoch
    p.make_follower(registration(2, epoch + 1, (1, 2), partition_epoch=1))
    assert p.acks_all_status(last + 1, epoch) == errors.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError) as refused:
        produce(p, 1)
    assert refused.value.code == errors.NOT_LEADER_OR_FOLLOWER


def test_acks_all_after_the_isr_shrank_below_the_minimum_is_not_enough_replicas_after_append(
    tmp_path: Path,
) -> None:
    p, _, _ = leader(tmp_path, isr=(1, 2, 3), min_isr=2)
    last = produce(p, 2)
    fetch(p, 2, 2)
    fetch(p, 3, 2)
    assert p.high_watermark == 2
    # The HW is already past the batch, but the ISR is now the leader alone.
    p.isr = [1]
    assert p.acks_all_status(last + 1, p.leader_epoch) == NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_follower_that_stops_fetching_is_removed_after_the_lag_time(tmp_path: Path) -> None:
    p, sent, _ = leader(tmp_path)
    produce(p, 5)
    fetch(p, 2, 5, now=NOW + 1000)
    fetch(p, 3, 5, now=NOW + 1000)
    assert p.maybe_shrink_isr(NOW + LAG) is None
    produce(p, 1, now_ms=NOW + 2000)
    fetch(p, 2, 6, now=NOW + 3000)  # broker 3 fetches no more
    assert p.maybe_shrink_isr(NOW + 1000 + LAG) is None, (
        "caught up at its last fetch, within the lag"
    )
    update = p.maybe_shrink_isr(NOW + 1001 + LAG)
    assert update is not None and update.new_isr == (1, 2) and update.adding is None
    assert sent == [update] and update.broker_epochs == (101, 102)
    assert p.maybe_shrink_isr(NOW + 2 * LAG) is None, "one change in flight at a time"
    assert p.isr == [1, 2, 3] and p.maximal_isr == {1, 2, 3}, "not removed until committed"


def test_a_follower_always_one_batch_behind_a_busy_leader_stays_in_sync(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1, 2))
    now = NOW
    produce(p, 1, now_ms=now)
    for _ in range(30):  # every fetch asks for what the leader had at the previous one
        fetch(p, 2, p.log.log_end_offset, now=now)
        now += 1000
        produce(p, 1, now_ms=now)
    assert p.out_of_sync_replicas(now + LAG - 1000) == []


def test_a_follower_that_never_fetched_after_an_election_is_out_of_sync(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path)
    assert p.out_of_sync_replicas(NOW + LAG) == []
    assert p.out_of_sync_replicas(NOW + LAG + 1) == [2, 3]


def test_a_caught_up_follower_is_added_to_the_isr_and_counts_for_the_high_watermark_at_once(
    tmp_path: Path,
) -> None:
    p, sent, cluster = leader(tmp_path, isr=(1, 2))
    produce(p, 4)
    fetch(p, 2, 4)
    assert p.high_watermark == 4
    fetch(p, 3, 2)
    assert sent == [], "below the high watermark"
    produce(p, 1)
    fetch(p, 3, 4)
    [update] = sent
    assert (
        update.new_isr == (1, 2, 3)
        and update.adding == 3
        and update.broker_epochs == (101, 102, 103)
    )
    assert p.isr == [1, 2] and p.maximal_isr == {1, 2, 3}
    fetch(p, 2, 5)
    assert p.high_watermark == 4, "the replica being added holds the HW back"
    fetch(p, 3, 5)
    assert p.high_watermark == 5


def test_an_ineligible_replica_is_not_added(tmp_path: Path) -> None:
    p, sent, cluster = leader(tmp_path, isr=(1, 2))
    produce(p, 2)
    cluster.fenced.add(3)
    fetch(p, 3, 2)
    assert sent == []
    cluster.fenced.clear()
    fetch(p, 3, 2, epoch=200)  # a newer incarnation of broker 3 the metadata does not know yet
    assert sent == []
    fetch(p, 3, 2)
    assert [u.adding for u in sent] == [3]


def test_a_stale_broker_epoch_is_refused(tmp_path: Path) -> None:
    p, _, cluster = leader(tmp_path)
    with pytest.raises(KafkaError) as refused:
        fetch(p, 3, 0, epoch=cluster.epochs[3] - 1)
    assert refused.value.code == errors.NOT_LEADER_OR_FOLLOWER


def test_a_replica_is_not_added_before_it_reaches_the_start_of_the_leader_epoch(
    tmp_path: Path,
) -> None:
    cluster = Cluster()
    rm = manager(tmp_path, 1, cluster)
    sent: list[IsrUpdate] = []
    rm.on_isr_update = lambda p, u: sent.append(u)
    p = host(rm, registration(1, 0, (1,)))
    produce(p, 3)  # epoch 0: offsets 0-2
    p.make_leader(registration(1, 1, (1,), partition_epoch=1), NOW)  # epoch 1 from offset 3
    assert p.leader_epoch_start_offset == 3
    fetch(p, 2, 3 - 1)
    assert p.high_watermark == 3 and sent == [], "past the HW? no: below the epoch start"
    fetch(p, 2, 3)
    assert [u.adding for u in sent] == [2]


def test_alter_partition_answers(tmp_path: Path) -> None:
    p, sent, _ = leader(tmp_path, isr=(1, 2))
    produce(p, 1)
    fetch(p, 3, 1)
    expand = sent[-1]
    # committed: the ISR and partition epoch come from the answer
    assert p.on_alter_partition_result(expand, errors.NONE, 0, 1, (1, 2, 3)) is False
    assert (p.isr, p.partition_epoch, p.pending) == ([1, 2, 3], 1, None)
    # refused as ineligible: back to the committed state, so it may be tried again
    shrink = p.maybe_shrink_isr(NOW + LAG + 1)
    assert shrink is not None and p.pending is shrink
    assert p.on_alter_partition_result(shrink, INELIGIBLE_REPLICA) is False and p.pending is None
    # a stale leader epoch: stays pending until new metadata
    shrink = p.maybe_shrink_isr(NOW + LAG + 1)
    assert shrink is not None
    assert p.on_alter_partition_result(shrink, FENCED_LEADER_EPOCH) is False and p.pending is shrink
    # another error: send again
    assert p.on_alter_partition_result(shrink, errors.REQUEST_TIMED_OUT) is True
    # the metadata brings a new state: the pending change is forgotten, its answer ignored
    p.make_leader(registration(1, 0, (1, 2), partition_epoch=2), NOW)
    assert p.pending is None and p.isr == [1, 2]
    assert p.on_alter_partition_result(shrink, errors.NONE, 0, 3, (1,)) is False and p.isr == [1, 2]


def test_an_older_partition_epoch_from_the_metadata_is_skipped(tmp_path: Path) -> None:
    p, sent, _ = leader(tmp_path, isr=(1, 2))
    produce(p, 1)
    fetch(p, 3, 1)
    p.on_alter_partition_result(sent[-1], errors.NONE, 0, 1, (1, 2, 3))
    p.make_leader(registration(1, 0, (1, 2), partition_epoch=0), NOW)
    assert p.isr == [1, 2, 3] and p.partition_epoch == 1


def test_the_leader_epoch_comes_from_the_metadata_and_starts_at_the_log_end(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1,), epoch=4)
    assert p.leader_epoch == 4 and p.log.leader_epochs.entries == [(4, 0)]
    produce(p, 2)
    p.make_leader(registration(1, 6, (1,), partition_epoch=1), NOW)
    assert p.log.leader_epochs.entries == [(4, 0), (6, 2)]
    header_epochs = []
    from gregor.protocol.records.batch import iter_headers

    produce(p, 1)
    for _, h in iter_headers(p.log.read_bytes(0, 1 << 20)):
        header_epochs.append(h.partition_leader_epoch)
    assert header_epochs == [4, 6]


def test_leader_epoch_checks_of_requests(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, epoch=3)
    p.check_leader_epoch(3)
    p.check_leader_epoch(-1)
    for asked, code in ((2, FENCED_LEADER_EPOCH), (4, UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(KafkaError) as refused:
            p.check_leader_epoch(asked)
        assert refused.value.code == code
    p.make_follower(registration(2, 4, partition_epoch=1))
    with pytest.raises(KafkaError) as refused:
        p.check_leader_epoch(4)
    assert refused.value.code == errors.NOT_LEADER_OR_FOLLOWER


def test_a_diverging_follower_is_told_where_its_epoch_ended(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, epoch=0)
    produce(p, 10)  # epoch 0: 0-9
    p.make_leader(registration(1, 2, partition_epoch=1), NOW)
    produce(p, 5)  # epoch 2: 10-14
    assert p.log.leader_epochs.entries == [(0, 0), (2, 10)]
    # a follower with epoch 1 at 12 (a leader we never followed): diverges where epoch 0 ended
    read = fetch(p, 2, 12, last_epoch=1)
    assert read.diverging_epoch == (0, 10) and read.records is None
    assert p.followers[2].log_end_offset == -1, (
        "a diverging fetch says nothing of the follower's LEO"
    )
    # epoch 0 up to 8: consistent, records follow
    read = fetch(p, 2, 8, last_epoch=0)
    assert read.diverging_epoch is None and read.records is not None
    # epoch 0 past its end
    assert fetch(p, 2, 11, last_epoch=0).diverging_epoch == (0, 10)
    # our epoch, past our log end
    assert fetch(p, 2, 16, last_epoch=2).diverging_epoch == (2, 15)
    # an epoch newer than any we know
    with pytest.raises(KafkaError) as refused:
        fetch(p, 2, 15, last_epoch=3)
    assert refused.value.code == errors.OFFSET_OUT_OF_RANGE


def test_only_assigned_replicas_may_fetch_as_followers(tmp_path: Path) -> None:
    p, _, _ = leader(tmp_path, isr=(1,))
    with pytest.raises(KafkaError) as refused:
        fetch(p, 9, 0)
    assert refused.value.code == UNKNOWN_LEADER_EPOCH


def test_the_replica_manager_moves_partitions_between_leading_and_following(tmp_path: Path) -> None:
    cluster = Cluster()
    rm = manager(tmp_path, 2, cluster)
    p = host(rm, registration(1, 0))
    assert not p.is_leader
    assert [(c.leader, c.leader_epoch) for c in rm.take_follower_changes()] == [(1, 0)]
    with pytest.raises(KafkaError) as refused:
        rm.leader("t", 0)
    assert refused.value.code == errors.NOT_LEADER_OR_FOLLOWER
    host(rm, registration(1, 0, isr=(1, 2), partition_epoch=1))  # an ISR change: no new epoch
    assert rm.take_follower_changes() == []
    host(rm, registration(2, 1, isr=(2, 3), partition_epoch=2))
    assert rm.leader("t", 0) is p and p.leader_epoch == 1
    assert [(c.leader, c.leader_epoch) for c in rm.take_follower_changes()] == [(None, 1)]
    host(rm, registration(3, 2, isr=(3,), partition_epoch=3))
    assert [(c.leader, c.leader_epoch) for c in rm.take_follower_changes()] == [(3, 2)]
    host(rm, registration(-1, 3, isr=(3,), partition_epoch=4))  # no leader: nothing to fetch from
    assert [(c.leader, c.leader_epoch) for c in rm.take_follower_changes()] == [(-1, 3)]


def test_the_isr_shrink_sweep_runs_a_step_per_led_partition(tmp_path: Path) -> None:
    """The timer's sweep over every led partition yields after each one (run in 0.5 ms slices
    by runtime/slicing.py, so thousands of partitions never hold the loop in one piece) and
    proposes the same shrinks as the one-piece pass; a partition no longer led when its step
    comes is passed over."""
    cluster = Cluster()
    rm = manager(tmp_path, 1, cluster, lag_ms=LAG)
    sent: list[IsrUpdate] = []
    rm.on_isr_update = lambda p, u: sent.append(u)
    led = [
        rm.apply("sweep", i, TOPIC_ID, registration(1, 0, (1, 2)), LogConfig(), 1, NOW)
        for i in range(4)
    ]
    for p in led:
        produce(p, 1)  # a record broker 2 never fetches
    steps = rm.maybe_shrink_isr_steps(NOW + LAG + 1)
    next(steps)  # partition 0's step
    led[1].make_follower(registration(2, 1, (1, 2)))  # led no more when its step comes
    yielded = 1
    try:
        while True:
            next(steps)
            yielded += 1
    except StopIteration as done:
        updates = done.value
    assert yielded == 4  # one step per partition led when the sweep began
    assert [(u.partition, u.new_isr) for u in updates] == [(0, (1,)), (2, (1,)), (3, (1,))]
    assert sent == updates
    assert rm.maybe_shrink_isr(NOW + LAG + 1) == [], "one change in flight at a time"
