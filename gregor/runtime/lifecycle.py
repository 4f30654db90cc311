"""The driver of a broker's lifecycle toward the controller (gregor/node/lifecycle.py): its
controller channel, its timer, the leaving sequence awaited one step at a time, and the
shutdown when a failed log dir went unacknowledged.

    lifecycle = BrokerLifecycle(core, channel, clock, controlled_shutdown=lambda: True)
    lifecycle.start()                 # register, then heartbeat; fetch a producer-id block
    lifecycle.on_leader_change()      # the controller moved: talk to the new one at once
    await lifecycle.leave()           # controlled shutdown, then fenced; no more heartbeats
    await lifecycle.stop()            # (leaves first if not done yet), then stops
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

from gregor.node.lifecycle import BrokerLifecycleCore
from gregor.runtime.client import ClientError
from gregor.runtime.controller_channel import ControllerChannel
from gregor.runtime.drivers import CoreDriver, controller_send

log = logging.getLogger("gregor.cluster")


def shut_down_this_process(reason: str) -> None:
    """Stop this process as SIGTERM does (cleanly: the broker's stop runs)."""
    log.error("%s; shutting down", reason)
    os.kill(os.getpid(), signal.SIGTERM)


class BrokerLifecycle:
    def __init__(
        self,
        core: BrokerLifecycleCore,
        channel: ControllerChannel,
        clock: Callable[[], int],
        *,
        controlled_shutdown: Callable[[], bool],
    ) -> None:
        """`controlled_shutdown`: controlled.shutdown.enable, read when leaving."""
        self.core = core
        self.channel = channel
        self.clock = clock
        self.controlled_shutdown = controlled_shutdown
        self.driver = CoreDriver(
            core, controller_send(channel), clock, name=f"broker-{core.node_id}-lifecycle"
        )

    @property
    def broker_epoch(self) -> int:
        return self.core.broker_epoch

    def start(self) -> None:
        self.driver.start()

    def on_leader_change(self) -> None:
        self.core.on_leader_change()

    def on_dir_failure(self, _directory: str) -> None:
        self.core.on_dir_failure(self.clock())

    def allocate_producer_ids(self, count: int) -> int:
        return self.core.allocate_producer_ids(count)

    async def leave(self) -> None:
        """Hand this broker's leaderships over (controlled shutdown), then ask to be fenced, so
        clients stop being sent here at once and the next start may register at once. Once."""
        for out in self.core.leave_requests(self.controlled_shutdown()):
            try:
                answer = await self.channel.send(out.api_key, out.version, out.body, out.timeout_ms)
            except ClientError as exc:
                self.core.on_error(out, exc, self.clock())
            else:
                self.core.on_response(out, answer, self.clock())

    async def stop(self) -> None:
        await self.leave()
        await self.driver.stop()
        await self.channel.close()
