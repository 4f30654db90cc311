"""A broker-only node's admin writes, relayed to the active controller.

In a cluster of dedicated controllers no broker is ever the active controller, so a
CreateTopics (DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) reaching
a broker-only node is sent on, as it came (same API, same version), to the active
controller's controller listener (controller_apis.py serves it there), and the controller's
answer goes back to the client under the client's correlation id. DescribeQuorum goes the
same way (only the leader describes the quorum; its controller listener serves it). Metadata tells clients that
this broker is the controller (`controller_id` = itself while a leader is known), so admin
clients, which send these requests to the controller, send them here.

No controller known, or no answer from it (it died, an election is under way): the request is
answered here instead, which off the active controller means NOT_CONTROLLER for every item; the
client refreshes its metadata and retries. A write the dead controller had appended may still
be committed by the next one: the retry then finds it made (TOPIC_ALREADY_EXISTS), as with
combined nodes.

This is Kafka's forwarding (KIP-590) without the Envelope: the controller sees the broker, not
the client, as the requester (no principal to carry yet), and dynamic configs of one named
broker are refused by the controller (it checks the name against its own node id); the
cluster-wide default ("") works.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.broker.controller_apis import ADMIN_WRITES
from gregor.broker.controller_channel import ControllerChannel
from gregor.protocol import api_keys, codec
from gregor.protocol.codegen import Data
from gregor.runtime.client import ClientError
from gregor.runtime.connection import Output

log = logging.getLogger("gregor.cluster")

# DescribeQuorum too: only the leader can describe the quorum (Kafka's brokers forward it).
RELAYED = ADMIN_WRITES | {api_keys.DESCRIBE_QUORUM}
# The controller answers once committed, or REQUEST_TIMED_OUT after 30 s: wait a little longer.
RELAY_TIMEOUT_MS = 35_000


class ControllerRelay:
    def __init__(self, channel: ControllerChannel) -> None:
        self.channel = channel

    def relay(
        self,
        key: int,
        version: int,
        correlation_id: int,
        request: Any,
        here: Callable[[], Any],
    ) -> Awaitable[Output]:
        """The encoded answer to `request`, from the active controller; from `here()` (this
        node's own handler) when the controller cannot be reached."""

        async def answer() -> Output:
            try:
                body = await self.channel.send(key, version, request, RELAY_TIMEOUT_MS)
            except ClientError as exc:
                log.info("%s not relayed to the controller: %s", api_keys.name_of(key), exc)
                body = here()
                if not isinstance(body, Data):
                    body = await body
            return codec.encode_response(key, version, correlation_id, body)

        return answer()

    async def close(self) -> None:
        await self.channel.close()
