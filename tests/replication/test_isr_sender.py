"""The ISR change sender, sans I/O (replication/isr_sender.py), on a clock the test moves: real
leader Partitions propose shrinks, the sender batches them into one AlterPartition, keeps one
in flight, hands each answer back to its Partition, and backs off (doubling, reset by an
answer) when the controller is unreachable, refuses, or this broker is not registered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gregor.protocol import api_keys, errors
from gregor.protocol.errors import BY_NAME
from gregor.protocol.messages import AlterPartitionResponse as R
from gregor.protocol.outbound import Outbound
from gregor.replication.isr_sender import IsrChangeSender
from gregor.replication.partition import Partition, ReplicaManager
from gregor.runtime.client import DisconnectedError
from gregor.storage.config import LogConfig

from .helpers import NOW, TOPIC, TOPIC_ID, Cluster, manager, registration

LAG = 10_000
NOT_CONTROLLER = BY_NAME["NOT_CONTROLLER"].code


class Setup:
    def __init__(self, tmp_path: Path, partitions: int = 2) -> None:
        self.epoch = 101  # this broker's epoch; -1: not registered
        self.sender = IsrChangeSender(1, lambda: self.epoch)
        self.woken = 0
        self.sender.wakeup = self.wake
        self.rm: ReplicaManager = manager(tmp_path, 1, Cluster(), lag_ms=LAG)
        self.rm.on_isr_update = self.sender.submit
        self.parts: list[Partition] = [
            self.rm.apply(TOPIC, i, TOPIC_ID, registration(1), LogConfig(), 1, NOW)
            for i in range(partitions)
        ]

    def wake(self) -> None:
        self.woken += 1

    def shrink(self, now: int = NOW + LAG + 1) -> None:
        """Brokers 2 and 3 never fetched: every partition proposes the ISR [1]."""
        self.rm.maybe_shrink_isr(now)

    def poll(self, now: int) -> tuple[list[Outbound], int | None]:
        result = self.sender.poll(now)
        return result.outbound, result.next_deadline_ms


def sent_partitions(out: Outbound) -> list[tuple[int, list[int], int]]:
    return [
        (p.partition_index, [b.broker_id for b in p.new_isr_with_epochs], p.partition_epoch)
        for t in out.body.topics
        for p in t.partitions
    ]


def answer(out: Outbound, code: int = errors.NONE, skip: int | None = None, **by: int) -> Any:
    """The controller's answer: each partition committed with the ISR asked (partition epoch
    + 1), or failed with `by[f"p{index}"]`; `skip`: a partition left out."""
    topics = []
    for t in out.body.topics:
        parts = []
        for p in t.partitions:
            if p.partition_index == skip:
                continue
            isr = [b.broker_id for b in p.new_isr_with_epochs]
            parts.append(
                R.PartitionData(
                    partition_index=p.partition_index,
                    error_code=by.get(f"p{p.partition_index}", errors.NONE),
                    leader_id=1,
                    leader_epoch=p.leader_epoch,
                    isr=isr,
                    partition_epoch=p.partition_epoch + 1,
                )
            )
        topics.append(R.TopicData(topic_id=t.topic_id, partitions=parts))
    return R(error_code=code, topics=topics if code == errors.NONE else [])


def test_changes_go_together_in_one_request_and_answers_reach_their_partitions(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    s.shrink()
    assert s.woken == 2
    [out], deadline = s.poll(NOW)
    assert deadline is None
    assert (out.api_key, out.version, out.destination) == (api_keys.ALTER_PARTITION, 3, None)
    assert (out.body.broker_id, out.body.broker_epoch) == (1, 101)
    assert sent_partitions(out) == [(0, [1], 0), (1, [1], 0)]
    assert [b.broker_epoch for b in out.body.topics[0].partitions[0].new_isr_with_epochs] == [101]
    s.sender.on_response(out, answer(out), NOW + 5)
    assert [(p.isr, p.partition_epoch, p.pending) for p in s.parts] == [([1], 1, None)] * 2
    assert s.poll(NOW + 5) == ([], None)  # nothing left, nothing to wait for


def test_one_request_in_flight_and_changes_made_meanwhile_wait_for_it(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.parts[0].maybe_shrink_isr(NOW + LAG + 1)
    [first], _ = s.poll(NOW)
    assert [p[0] for p in sent_partitions(first)] == [0]
    s.parts[1].maybe_shrink_isr(NOW + LAG + 1)
    assert s.poll(NOW + 1) == ([], None), "one AlterPartition in flight at a time"
    assert s.parts[0].maybe_shrink_isr(NOW + 2 * LAG) is None, "a partition's own change waits"
    s.sender.on_response(first, answer(first), NOW + 2)
    [second], _ = s.poll(NOW + 2)
    assert [p[0] for p in sent_partitions(second)] == [1]


def test_no_answer_backs_off_doubling_up_to_two_seconds_and_an_answer_resets_it(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    s.shrink()
    now = NOW
    for backoff in (200, 400, 800, 1600, 2000, 2000):
        [out], _ = s.poll(now)
        s.sender.on_error(out, DisconnectedError("connection refused"), now)
        assert s.poll(now + backoff - 1) == ([], now + backoff)
        now += backoff
    [out], _ = s.poll(now)
    assert sent_partitions(out) == [(0, [1], 0), (1, [1], 0)], "the same changes, again"
    # partition 1 is answered with an error worth retrying: the backoff starts again at 200
    s.sender.on_response(out, answer(out, p1=errors.REQUEST_TIMED_OUT), now)
    assert s.parts[0].pending is None and s.parts[1].pending is not None
    assert s.poll(now + 199) == ([], now + 200)
    [again], _ = s.poll(now + 200)
    assert [p[0] for p in sent_partitions(again)] == [1]


def test_a_refusal_as_a_whole_is_retried_after_the_backoff(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.shrink()
    [out], _ = s.poll(NOW)
    s.sender.on_response(out, answer(out, code=NOT_CONTROLLER), NOW)
    assert s.sender.failures == 1
    assert s.poll(NOW + 100) == ([], NOW + 200)
    [again], _ = s.poll(NOW + 200)
    assert len(sent_partitions(again)) == 2


def test_a_partition_left_out_of_the_answer_is_sent_again(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.shrink()
    [out], _ = s.poll(NOW)
    s.sender.on_response(out, answer(out, skip=0), NOW)
    assert s.parts[1].pending is None and s.parts[0].pending is not None
    [again], _ = s.poll(NOW + 200)
    assert [p[0] for p in sent_partitions(again)] == [0]


def test_nothing_goes_before_this_broker_is_registered(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.epoch = -1
    s.shrink()
    assert s.poll(NOW) == ([], NOW + 200)
    assert s.poll(NOW + 200) == ([], NOW + 200 + 400)  # a failure in a row: doubled
    s.epoch = 205
    [out], _ = s.poll(NOW + 600)
    assert out.body.broker_epoch == 205 and len(sent_partitions(out)) == 2


def test_a_change_its_partition_gave_up_on_is_not_sent_again(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.shrink()
    [out], _ = s.poll(NOW)
    s.sender.on_error(out, DisconnectedError("lost"), NOW)
    # new metadata for partition 0 (another leader epoch): its pending change is forgotten
    s.parts[0].make_leader(registration(1, 1, (1, 2, 3), partition_epoch=1), NOW + 50)
    [again], _ = s.poll(NOW + 200)
    assert [p[0] for p in sent_partitions(again)] == [1]
