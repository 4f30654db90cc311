"""acks=all writes (handlers/delayed_produce.py): the answer waits in the purgatory for the high
watermark, woken by a follower's fetch; REQUEST_TIMED_OUT at the request's timeout_ms;
NOT_LEADER_OR_FOLLOWER when leadership moves while it waits. Time is driven by hand: the
purgatory reads no clock."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from gregor.handlers.delayed_produce import AwaitingWrite, DelayedProduce, settle
from gregor.protocol import errors
from gregor.protocol.messages import ProduceResponse
from gregor.replication.partition import Partition
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory

from .helpers import NOW, Cluster, host, manager, produce, registration

PartResp = ProduceResponse.PartitionProduceResponse


def parked(
    tmp_path: Path, timeout_ms: int = 5_000
) -> tuple[Partition, DelayedProduce, Pending, Any]:
    """A write of 3 records to a partition of replicas 1 and 2 led here, parked: the partition,
    the operation, its answer (the caller's: the operation lets go of it once answered) and the
    purgatory."""
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
    return p, op, op.answer, purgatory


def follower_fetch(p: Partition, offset: int) -> None:
    p.fetch_for_follower(2, 102, offset, -1, 0, 0, 1 << 20, True, NOW)


def answer_of(answer: Pending) -> Any:
    assert answer.done
    return answer.value.responses[0].partition_responses[0]


def test_the_answer_waits_for_the_follower(tmp_path: Path) -> None:
    p, _, answer, purgatory = parked(tmp_path)
    follower_fetch(p, 2)  # not all of it yet
    assert not answer.done
    follower_fetch(p, 3)
    part = answer_of(answer)
    assert (part.error_code, part.base_offset) == (errors.NONE, 0)
    assert purgatory.delayed() == 0 and purgatory.keys() == 0
    assert len(p.fetches.watchers) == 1, "the purgatory's watcher stays until the next event"


def test_no_follower_in_time_is_request_timed_out(tmp_path: Path) -> None:
    _, _, answer, purgatory = parked(tmp_path, timeout_ms=100)
    assert purgatory.expire(NOW + 99) == 0 and not answer.done
    assert purgatory.expire(NOW + 100) == 1
    part = answer_of(answer)
    assert (part.error_code, part.base_offset) == (errors.REQUEST_TIMED_OUT, -1)


def test_losing_leadership_while_waiting_is_not_leader_or_follower(tmp_path: Path) -> None:
    p, _, answer, purgatory = parked(tmp_path)
    p.make_follower(registration(2, 1, (2,), partition_epoch=1))
    assert answer_of(answer).error_code == errors.NOT_LEADER_OR_FOLLOWER
    assert purgatory.next_deadline_ms() is None


def test_an_answered_write_lets_go_of_its_response(tmp_path: Path) -> None:
    """The operation stays in the purgatory's timer heap until its deadline (or a compaction):
    once answered it holds neither the response nor its answer, so they are freed when sent."""
    p, op, answer, purgatory = parked(tmp_path)
    follower_fetch(p, 3)
    assert op.completed and answer_of(answer).error_code == errors.NONE
    response, held = answer.value, gc.get_referents(op)
    assert all(r is not response and r is not answer for r in held), "released"
    assert [e[2] for e in purgatory._timeouts] == [op], "still in the heap until its deadline"
