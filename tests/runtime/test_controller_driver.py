"""The driver of the controller's core (runtime/controller_driver.py) on a real event loop: its
handlers are what the Raft driver's listener awaits, answered once the core's Pending completes
(here: when the test commits), at once when the core answers at once; its timer ticks the core
(the first tick activates the new leader) and stops with it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from gregor.clock import ManualClock
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import BrokerRegistrationRequest as R
from gregor.runtime.controller_driver import ControllerDriver
from tests.node.test_active_controller import CLUSTER, Setup


def test_handlers_await_the_commit_and_the_timer_ticks() -> None:
    async def go() -> None:
        s = Setup()
        s.quorum.run()  # leads: active, not yet activated
        driver = ControllerDriver(s.core, ManualClock(now_ms=s.quorum.now))
        handlers = driver.handlers()
        assert set(handlers) == {
            api_keys.BROKER_REGISTRATION,
            api_keys.BROKER_HEARTBEAT,
            api_keys.ALLOCATE_PRODUCER_IDS,
            api_keys.ALTER_PARTITION,
        }
        driver.start()
        await asyncio.sleep(0)
        assert s.core.activated_epoch == s.store.epoch  # the timer's first poll ticked
        s.quorum.run()  # the bootstrap records commit
        registering = asyncio.ensure_future(
            handlers[api_keys.BROKER_REGISTRATION](3, register_request(), None)
        )
        await asyncio.sleep(0)
        assert not registering.done()
        s.quorum.run()
        answer = await asyncio.wait_for(registering, 1)
        assert answer.error_code == errors.NONE and answer.broker_epoch >= 0
        other = register_request(cluster_id="other")
        refused = await handlers[api_keys.BROKER_REGISTRATION](3, other, None)
        assert refused.error_code == errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code
        await driver.stop()
        assert driver._task is None

    asyncio.run(go())


def register_request(cluster_id: str = CLUSTER) -> Any:
    return R(
        broker_id=4,
        cluster_id=cluster_id,
        incarnation_id=uuid.UUID(int=4),
        listeners=[R.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
        features=[],
        rack=None,
        log_dirs=[uuid.UUID(int=9)],
    )
