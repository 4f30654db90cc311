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

Topics a broker creates on its own (`__consumer_offsets` at the first FindCoordinator,
`__transaction_state` at the first transactional InitProducerId) go the same way:
`RelayingController`, the controller a broker-only node's Admin writes through, sends the
planned CreateTopics to the active controller in the background and refuses with
NOT_CONTROLLER meanwhile (the client is answered COORDINATOR_NOT_AVAILABLE and finds the topic
made when it asks again). Metadata's `auto.create.topics.enable` is not relayed
(`maybe_auto_create` creates only on the active controller).

This is Kafka's forwarding (KIP-590) without the Envelope: the controller sees the broker, not
the client, as the requester (no principal to carry yet), and dynamic configs of one named
broker are refused by the controller (it checks the name against its own node id); the
cluster-wide default ("") works.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gregor.broker.controller_apis import ADMIN_WRITES
from gregor.broker.controller_channel import ControllerChannel
from gregor.controller.local import LocalController
from gregor.metadata.store import TopicInfo
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.codegen import Data
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import CreateTopicsRequest
from gregor.runtime.client import ClientError
from gregor.runtime.connection import Output

log = logging.getLogger("gregor.cluster")

# DescribeQuorum too: only the leader can describe the quorum (Kafka's brokers forward it).
RELAYED = ADMIN_WRITES | {api_keys.DESCRIBE_QUORUM}
# The controller answers once committed, or REQUEST_TIMED_OUT after 30 s: wait a little longer.
RELAY_TIMEOUT_MS = 35_000
CREATE_TOPICS_VERSION = 7
NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code


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


class RelayingController(LocalController):
    """A broker-only node's controller: its own topics' creation goes to the active controller
    (the module docstring); every other write refuses, as off any active controller."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.channel: ControllerChannel | None = None  # set once the Raft driver exists
        self._sending: dict[str, asyncio.Task[None]] = {}

    def create_topic(
        self, name: str, replicas: list[list[int]], configs: Mapping[str, str]
    ) -> TopicInfo:
        if self.channel is not None and name not in self._sending:
            task = asyncio.ensure_future(self._create(self.channel, name, replicas, configs))
            self._sending[name] = task
            task.add_done_callback(lambda _t: self._sending.pop(name, None))
        raise KafkaError(
            NOT_CONTROLLER, f"the creation of {name} was sent to the active controller"
        )

    async def _create(
        self,
        channel: ControllerChannel,
        name: str,
        replicas: list[list[int]],
        configs: Mapping[str, str],
    ) -> None:
        r = CreateTopicsRequest
        topic = r.CreatableTopic(
            name=name,
            num_partitions=-1,
            replication_factor=-1,
            assignments=[
                r.CreatableReplicaAssignment(partition_index=i, broker_ids=list(ids))
                for i, ids in enumerate(replicas)
            ],
            configs=[r.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )
        request = r(topics=[topic], timeout_ms=RELAY_TIMEOUT_MS, validate_only=False)
        try:
            answer = await channel.send(
                api_keys.CREATE_TOPICS, CREATE_TOPICS_VERSION, request, RELAY_TIMEOUT_MS
            )
            code = answer.topics[0].error_code if answer.topics else NOT_CONTROLLER
            log.info("creation of %s by the active controller: %s", name, errors.name_of(code))
        except ClientError as exc:
            log.info("creation of %s not relayed to the controller: %s", name, exc)
