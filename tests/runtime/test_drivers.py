"""The driver of a sans-I/O core (runtime/drivers.py) on a real event loop: it polls when
started, when woken (once per turn however often) and at the core's deadline, sends what the
core returns, hands back the answer or the failure, and after `stop` polls no more, cancels
what is in flight and closes its channel."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gregor.protocol.outbound import Outbound, Poll
from gregor.runtime.client import DisconnectedError
from gregor.runtime.drivers import CoreDriver


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Core:
    """Sends what the test queues; records every poll and answer."""

    def __init__(self) -> None:
        self.to_send: list[Outbound] = []
        self.deadline: int | None = None
        self.polls = 0
        self.answers: list[tuple[str, Any]] = []
        self.wakeup: Any = None

    def poll(self, now: int) -> Poll:
        self.polls += 1
        out, self.to_send = self.to_send, []
        deadline, self.deadline = self.deadline, None
        return Poll(out, deadline)

    def on_response(self, out: Outbound, answer: Any, now: int) -> None:
        self.answers.append(("response", answer))

    def on_error(self, out: Outbound, error: Exception, now: int) -> None:
        self.answers.append(("error", type(error).__name__))


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_polls_when_started_woken_and_due_and_feeds_answers_back() -> None:
    async def go() -> None:
        core = Core()
        sent: list[Outbound] = []
        blocked: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def send(out: Outbound) -> Any:
            sent.append(out)
            if out.body == "fail":
                raise DisconnectedError("refused")
            if out.body == "block":
                return await blocked
            return f"answer to {out.body}"

        closed: list[bool] = []

        async def close() -> None:
            closed.append(True)

        driver = CoreDriver(core, send, now_ms, name="test", close=close)
        assert core.wakeup == driver.wakeup
        core.wakeup()
        await turns()
        assert core.polls == 0, "nothing before start"
        driver.start()
        await turns()
        assert core.polls == 1
        core.to_send = [Outbound(1, 0, "a"), Outbound(1, 0, "fail")]
        core.wakeup()
        core.wakeup()
        await turns()
        assert [o.body for o in sent] == ["a", "fail"]
        assert sorted(core.answers) == [("error", "DisconnectedError"), ("response", "answer to a")]
        polls = core.polls
        core.deadline = now_ms() + 30
        core.wakeup()
        await turns()
        assert core.polls == polls + 1
        await asyncio.sleep(0.06)
        assert core.polls == polls + 2, "polled again at its deadline"
        core.to_send = [Outbound(1, 0, "block")]
        core.wakeup()
        await turns()
        await driver.stop()
        assert blocked.cancelled() and closed == [True], "the send in flight is cancelled"
        assert len(core.answers) == 2, "and nothing is fed back for it"
        core.wakeup()
        await turns()
        assert core.polls == polls + 3, "no poll after stop"

    asyncio.run(go())


def test_a_send_that_submits_answers_through_a_callback_with_no_task() -> None:
    """A send with `submit` (the node client's) is asked first: what it takes needs no task,
    its answer or failure is fed back and polls again at once; what it refuses goes the
    awaited way; after `stop` a late answer is fed to nothing."""

    class Submitting:
        def __init__(self) -> None:
            self.pending: list[tuple[Outbound, Any]] = []
            self.awaited: list[Any] = []

        def __call__(self, out: Outbound) -> Any:
            self.awaited.append(out.body)
            return asyncio.sleep(0, f"awaited {out.body}")

        def submit(self, out: Outbound, done: Any) -> bool:
            if out.body == "refused":
                return False
            self.pending.append((out, done))
            return True

    async def go() -> None:
        core, send = Core(), Submitting()
        driver = CoreDriver(core, send, now_ms, name="test")
        driver.start()
        await turns()
        polls = core.polls
        core.to_send = [Outbound(1, 0, "a"), Outbound(1, 0, "b"), Outbound(1, 0, "refused")]
        core.wakeup()
        await turns()
        assert [o.body for o, _ in send.pending] == ["a", "b"] and send.awaited == ["refused"]
        assert not driver._tasks, "the awaited one has finished; the submitted ones made none"
        assert core.answers == [("response", "awaited refused")]
        (_, done_a), (_, done_b) = send.pending
        polls = core.polls
        done_a("answer to a", None)
        assert core.polls == polls + 1, "an answer polls again at once"
        done_b(None, DisconnectedError("closed"))
        assert core.answers[1:] == [("response", "answer to a"), ("error", "DisconnectedError")]
        assert core.polls == polls + 2
        await turns()
        assert core.polls == polls + 2
        core.to_send = [Outbound(1, 0, "late")]
        core.wakeup()
        await turns()
        await driver.stop()
        send.pending[-1][1]("answer to late", None)
        assert len(core.answers) == 3, "nothing fed back after stop"

    asyncio.run(go())
