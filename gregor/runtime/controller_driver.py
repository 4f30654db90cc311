"""The driver of the controller's core (gregor/node/active_controller.py): its timer, and its
requests served on the controller listener, awaited there while their answers wait for a commit.

    driver = ControllerDriver(core, clock)
    raft_driver.handlers.update(driver.handlers())   # BrokerRegistration, BrokerHeartbeat, ...
    driver.start()            # polls the core at its deadlines (runtime/timers.py `drive`)
    await driver.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from gregor.clock import Clock
from gregor.node.active_controller import ActiveControllerCore
from gregor.replication.pending import Pending
from gregor.runtime.purgatory_driver import future_of
from gregor.runtime.raft_driver import ListenerHandler
from gregor.runtime.timers import drive


class ControllerDriver:
    def __init__(self, core: ActiveControllerCore, clock: Clock) -> None:
        self.core = core
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    def handlers(self) -> dict[int, ListenerHandler]:
        """The core's requests as the Raft driver's listener serves them."""
        return {key: self._serving(key) for key in self.core.requests}

    def _serving(self, api_key: int) -> ListenerHandler:
        async def serve(version: int, request: Any, _conn: Any) -> Any:
            answer = self.core.handle(api_key, version, request, self.clock.now_ms())
            return await future_of(answer) if isinstance(answer, Pending) else answer

        return serve

    def start(self) -> None:
        self._task = asyncio.ensure_future(drive(self.core, self.clock, "controller"))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
