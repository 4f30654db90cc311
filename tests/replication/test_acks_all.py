"""acks=all writes (handlers/delayed_produce.py): the answer waits in the purgatory for the high
watermark, woken by a follower's fetch; REQUEST_TIMED_OUT at the request's timeout_ms;
NOT_LEADER_OR_FOLLOWER when leadership moves while it waits. Time is driven by hand: the
purgatory reads no clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gregor.handlers.delayed_produce import AwaitingWrite, DelayedProduce, settle
from gregor.protocol import errors
from gregor.protocol.messages import ProduceResponse
from gregor.replication.partition import Partition
from gregor.replication.purgatory import DelayedOperationPurgatory

from .helpers import NOW, Cluster, host, manager, produce, registration

PartResp = ProduceResponse.PartitionProduceResponse


def parked(tmp_path: Path, timeout_ms: int = 5_000) -> tuple[Partition, DelayedProduce, Any]:
    """A write of 3 records to a partition of replicas 1 and 2 led here, parked."""
    rm = manager(tmp_path, 1, Cluster())
    p = host(rm, registration(1, 0, (1, 2)))
    last = produce(p, 3)
    part = PartResp(
        index=0, error_code=errors.NONE, base_offset=0, log_append_time_ms=-1, log_start_offset=0
    )
    response = ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[part])]
    )
    waiting = AwaitingWrite(part, p, last + 1, p.leader_epoch)
    assert not settle(waiting), "the follower has not fetched it yet"
    purgatory = DelayedOperationPurgatory("test")
    op = DelayedProduce(response, [waiting], timeout_ms, NOW)
    assert not purgatory.try_complete_else_watch(op, [p])
    assert purgatory.next_deadline_ms() == NOW + timeout_ms
    return p, op, purgatory


def follower_fetch(p: Partition, offset: int) -> None:
    p.fetch_for_follower(2, 102, offset, -1, 0, 0, 1 << 20, True, NOW)


def answer_of(op: DelayedProduce) -> Any:
    assert op.answer.done
    return op.answer.value.responses[0].partition_responses[0]


def test_the_answer_waits_for_the_follower(tmp_path: Path) -> None:
    p, op, purgatory = parked(tmp_path)
    follower_fetch(p, 2)  # not all of it yet
    assert not op.answer.done
    follower_fetch(p, 3)
    part = answer_of(op)
    assert (part.error_code, part.base_offset) == (errors.NONE, 0)
    assert purgatory.delayed() == 0 and purgatory.keys() == 0
    assert len(p.fetches.watchers) == 1, "the purgatory's watcher stays until the next event"


def test_no_follower_in_time_is_request_timed_out(tmp_path: Path) -> None:
    _, op, purgatory = parked(tmp_path, timeout_ms=100)
    assert purgatory.expire(NOW + 99) == 0 and not op.answer.done
    assert purgatory.expire(NOW + 100) == 1
    part = answer_of(op)
    assert (part.error_code, part.base_offset) == (errors.REQUEST_TIMED_OUT, -1)


def test_losing_leadership_while_waiting_is_not_leader_or_follower(tmp_path: Path) -> None:
    p, op, purgatory = parked(tmp_path)
    p.make_follower(registration(2, 1, (2,), partition_epoch=1))
    assert answer_of(op).error_code == errors.NOT_LEADER_OR_FOLLOWER
    assert purgatory.next_deadline_ms() is None
