"""The driver of forwarding (gregor/node/forwarding.py): a controller channel of its own (an
admin write may wait for its commit, and heartbeats must not queue behind it) and the awaits of
the requests being forwarded.

    forwarder = Forwarder(core, channel, clock)   # core None: a node of its own quorum
    if forwarder.wanted(api_key):
        frame = await forwarder.forward(frame, peer, timeout_ms)   # None: answer it yourself
    forwarder.create_topic_later(spec)
    await forwarder.close()                       # what is still waiting gets None
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gregor.controller.admin import TopicSpec
from gregor.node.forwarding import ForwardingCore
from gregor.runtime.controller_channel import ControllerChannel
from gregor.runtime.drivers import CoreDriver, controller_send

# The controller answers once committed, or REQUEST_TIMED_OUT after 30 s: wait a little longer.
CHANNEL_TIMEOUT_MS = 35_000


class Forwarder:
    def __init__(
        self,
        core: ForwardingCore | None,
        channel: ControllerChannel | None,
        clock: Callable[[], int],
    ) -> None:
        self.core = core
        self.channel = channel
        self.clock = clock
        self.driver: CoreDriver | None = None
        if core is not None:
            assert channel is not None
            self.driver = CoreDriver(core, controller_send(channel), clock, name="forwarding")
            self.driver.start()

    def wanted(self, api_key: int) -> bool:
        """True when `api_key` must be forwarded: a networked node not leading the quorum."""
        return self.core is not None and self.core.wanted(api_key)

    async def forward(
        self, frame: bytes, peer: str, timeout_ms: int, principal: bytes | None = None
    ) -> list[Any] | None:
        """The controller's response frame for the client's request `frame`; None if no
        controller answered within `timeout_ms`."""
        assert self.core is not None
        answer: asyncio.Future[list[Any] | None] = asyncio.get_running_loop().create_future()

        def done(response: list[Any] | None) -> None:
            if not answer.done():
                answer.set_result(response)

        self.core.forward(frame, peer, timeout_ms, self.clock(), done, principal)
        return await answer

    def create_topic_later(self, spec: TopicSpec) -> None:
        """Have the active controller create `spec` (one CreateTopics in flight per topic)."""
        if self.core is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no event loop (not serving): nothing to send with
            return
        self.core.create_topic(spec, self.clock())

    async def close(self) -> None:
        if self.driver is not None:
            await self.driver.stop()
        if self.core is not None:
            self.core.give_up()
        if self.channel is not None:
            await self.channel.close()
