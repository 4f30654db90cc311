"""Forwarding (KIP-590), the brokers' side: metadata writes that reach a broker which is not the
active controller go, in an Envelope, to the controller that is, over the controller listener
(controller_apis.py serves it there).

    forwarder = Forwarder(broker)
    forwarder.wanted(api_key)                    # a networked node, not the active controller
    await forwarder.forward(frame, peer, timeout_ms)     # the response frame, or None
    forwarder.create_topic_later(spec)           # auto-creation: a CreateTopics sent for us

As Kafka's ForwardingManager: the client's request (header and body exactly as they arrived)
becomes an Envelope's `request_data`; it is sent to the active controller this node's metadata
names (through a ControllerChannel of its own: an admin write may wait for its commit, and
heartbeats must not queue behind it), and sent again, to whichever node leads by then, while the
answer is NOT_CONTROLLER or no controller can be reached, until the deadline. The controller's
`response_data` (response header and body, with the client's correlation id) goes back to the
client unchanged, with a size prefix. No answer by the deadline: `forward` returns None and the
broker answers the request itself (each item NOT_CONTROLLER, which clients retry). A broker-only
node is never the active controller, so it forwards every such request; a combined node only
while another node leads.

Auto-creation (Kafka's AutoTopicCreationManager): a topic a Metadata request asks for, or an
internal topic FindCoordinator needs, is created by sending the controller a CreateTopics in an
Envelope, at most one in flight per topic; the client is told LEADER_NOT_AVAILABLE (or
COORDINATOR_NOT_AVAILABLE) meanwhile and asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from typing import TYPE_CHECKING, Any

from gregor.broker.controller_apis import FORWARDED
from gregor.broker.controller_channel import ControllerChannel
from gregor.controller.admin import TopicSpec
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.messages import CreateTopicsRequest, EnvelopeRequest
from gregor.runtime.client import ClientError

if TYPE_CHECKING:
    from gregor.broker.broker import BrokerServer

log = logging.getLogger("gregor.forwarding")

ENVELOPE_VERSION = 0
CREATE_TOPICS_VERSION = 7
DEFAULT_TIMEOUT_MS = 30_000
RETRY_BACKOFF_S = 0.05
NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
# The controller answers once committed, or REQUEST_TIMED_OUT after 30 s: wait a little longer.
CHANNEL_TIMEOUT_MS = 35_000


def host_bytes(peer: str) -> bytes:
    """The client's address as Kafka's envelope carries it: 4 or 16 bytes (empty if unknown)."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


class Forwarder:
    def __init__(self, broker: BrokerServer) -> None:
        self.broker = broker
        self._creating: dict[str, asyncio.Task[None]] = {}
        self._correlation_id = 0
        member = broker.member
        self.channel = (
            None
            if member is None
            else ControllerChannel(
                broker.store,
                member.driver.endpoint,
                client_id=f"broker-{broker.node_id}-forwarding",
                request_timeout_ms=CHANNEL_TIMEOUT_MS,
            )
        )

    def wanted(self, api_key: int) -> bool:
        """True when `api_key` must be forwarded: a networked node not leading the quorum."""
        store = self.broker.store
        return api_key in FORWARDED and self.channel is not None and not store.is_active()

    async def forward(self, frame: bytes, peer: str, timeout_ms: int) -> list[Any] | None:
        """The controller's response frame for the client's request `frame`; None if no
        controller answered within `timeout_ms`."""
        channel = self.channel
        assert channel is not None
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
        envelope = EnvelopeRequest(
            request_data=frame, request_principal=None, client_host_address=host_bytes(peer)
        )
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return None
            if self.broker.store.is_active():
                return None  # this node leads now: the caller answers itself
            try:
                answer = await channel.send(
                    api_keys.ENVELOPE, ENVELOPE_VERSION, envelope, timeout_ms=left_ms
                )
            except ClientError as exc:  # no controller known, or no answer from it
                log.debug("forwarding: %s", exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if answer.error_code == NOT_CONTROLLER:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if answer.error_code != errors.NONE or answer.response_data is None:
                log.warning(
                    "the controller refused a forwarded request: %s",
                    errors.name_of(answer.error_code),
                )
                return None
            data = bytes(answer.response_data)
            return [len(data).to_bytes(4, "big"), data]

    def create_topic_later(self, spec: TopicSpec) -> None:
        """Have the active controller create `spec` (one CreateTopics in flight per topic)."""
        if spec.name in self._creating or self.channel is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._create(spec))
        except RuntimeError:  # no event loop (not serving): nothing to send with
            return
        self._creating[spec.name] = task
        name = spec.name

        def finished(_task: asyncio.Task[None]) -> None:
            self._creating.pop(name, None)

        task.add_done_callback(finished)

    async def _create(self, spec: TopicSpec) -> None:
        topic = CreateTopicsRequest.CreatableTopic(
            name=spec.name,
            num_partitions=spec.num_partitions,
            replication_factor=spec.replication_factor,
            assignments=[
                CreateTopicsRequest.CreatableReplicaAssignment(
                    partition_index=i, broker_ids=list(b)
                )
                for i, b in sorted((spec.assignments or {}).items())
            ],
            configs=[
                CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                for k, v in sorted((spec.configs or {}).items())
            ],
        )
        request = CreateTopicsRequest(
            topics=[topic], timeout_ms=DEFAULT_TIMEOUT_MS, validate_only=False
        )
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        frame = codec.join(
            codec.encode_request(
                api_keys.CREATE_TOPICS,
                CREATE_TOPICS_VERSION,
                self._correlation_id,
                f"broker-{self.broker.node_id}-auto-create",
                request,
            )
        )[4:]
        response = await self.forward(frame, f"{self.broker.host}:0", DEFAULT_TIMEOUT_MS)
        if response is None:
            log.info("auto-creation of topic %s: no active controller answered", spec.name)
            return
        _cid, body = codec.decode_response(
            api_keys.CREATE_TOPICS, CREATE_TOPICS_VERSION, codec.join(response)[4:]
        )
        result = body.topics[0]
        if result.error_code in (errors.NONE, errors.TOPIC_ALREADY_EXISTS):
            log.info("auto-created topic %s through the active controller", spec.name)
        else:
            log.warning(
                "auto-creation of topic %s refused by the controller: %s %s",
                spec.name,
                errors.name_of(result.error_code),
                result.error_message or "",
            )

    async def close(self) -> None:
        for task in list(self._creating.values()):
            task.cancel()
        for task in list(self._creating.values()):
            with contextlib.suppress(BaseException):
                await task
        if self.channel is not None:
            await self.channel.close()
