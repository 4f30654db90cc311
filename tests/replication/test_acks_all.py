"""acks=all in the produce handler (handlers/produce.py): the answer waits for the high
watermark, woken by a follower's fetch; REQUEST_TIMED_OUT at the request's timeout_ms;
NOT_LEADER_OR_FOLLOWER when leadership moves while it waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gregor.handlers.produce import AwaitingWrite, await_replication, settle
from gregor.protocol import errors
from gregor.protocol.messages import ProduceResponse

from .helpers import NOW, Cluster, host, manager, produce, registration

PartResp = ProduceResponse.PartitionProduceResponse


def waiting_write(tmp_path: Path) -> tuple[object, AwaitingWrite, object]:
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
    return p, waiting, response


def follower_fetch(p: object, offset: int) -> None:
    p.fetch_for_follower(2, 102, offset, -1, 0, 0, 1 << 20, True, NOW)  # type: ignore[attr-defined]


def test_the_answer_waits_for_the_follower(tmp_path: Path) -> None:
    p, waiting, response = waiting_write(tmp_path)

    async def run() -> object:
        task = asyncio.ensure_future(await_replication(response, [waiting], 5_000))
        await asyncio.sleep(0.05)
        assert not task.done()
        follower_fetch(p, 2)  # not all of it yet
        await asyncio.sleep(0.05)
        assert not task.done()
        follower_fetch(p, 3)
        return await asyncio.wait_for(task, 1.0)

    answer = asyncio.run(run())
    part = answer.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert (part.error_code, part.base_offset) == (errors.NONE, 0)


def test_no_follower_in_time_is_request_timed_out(tmp_path: Path) -> None:
    _, waiting, response = waiting_write(tmp_path)
    answer = asyncio.run(await_replication(response, [waiting], 100))
    part = answer.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert (part.error_code, part.base_offset) == (errors.REQUEST_TIMED_OUT, -1)


def test_losing_leadership_while_waiting_is_not_leader_or_follower(tmp_path: Path) -> None:
    p, waiting, response = waiting_write(tmp_path)

    async def run() -> object:
        task = asyncio.ensure_future(await_replication(response, [waiting], 5_000))
        await asyncio.sleep(0.05)
        p.make_follower(registration(2, 1, (2,), partition_epoch=1))  # type: ignore[attr-defined]
        return await asyncio.wait_for(task, 1.0)

    answer = asyncio.run(run())
    part = answer.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert part.error_code == errors.NOT_LEADER_OR_FOLLOWER
