"""Forwarding (KIP-590): metadata writes that reach a broker which is not the active controller
go, in an Envelope, to the controller that is, over the controller listener.

    forwarder = Forwarder(broker)
    forwarder.wanted(api_key)                    # a networked node, not the active controller
    await forwarder.forward(frame, peer, deadline_ms)   # the response frame, or None
    forwarder.create_topic_later(spec)           # auto-creation: a CreateTopics sent for us
    await forwarder.serve_envelope(version, req) # the controller side

The broker side, as Kafka's ForwardingManager: the client's request (header and body exactly as
they arrived) becomes an Envelope's `request_data`; it is sent to the active controller as this
node's metadata names it, and sent again, to whichever node leads by then, while the answer is
NOT_CONTROLLER or the controller cannot be reached, until the deadline. The controller's
`response_data` (response header and body, with the client's correlation id) goes back to the
client unchanged, with a size prefix. No answer by the deadline: `forward` returns None and the
broker answers the request itself (each item NOT_CONTROLLER, which clients retry).

Auto-creation (Kafka's AutoTopicCreationManager): a topic a Metadata request asks for, or an
internal topic FindCoordinator needs, is created by sending the controller a CreateTopics in an
Envelope, at most one in flight per topic; the client is told LEADER_NOT_AVAILABLE (or
COORDINATOR_NOT_AVAILABLE) meanwhile and asks again.

The controller side: an Envelope reaching a node that is not the active controller gets
NOT_CONTROLLER; one carrying an API that is not forwarded gets INVALID_REQUEST; otherwise the
inner request goes through the same handler as a client's would (the peer is the client's
address from the envelope) and its encoded response is the envelope's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from gregor.controller.admin import TopicSpec
from gregor.handlers.context import RequestContext
from gregor.handlers.registry import HANDLERS
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.codegen import Data
from gregor.protocol.exceptions import ProtocolError
from gregor.protocol.messages import CreateTopicsRequest, EnvelopeRequest, EnvelopeResponse
from gregor.runtime.client import ClientError

if TYPE_CHECKING:
    from gregor.broker.broker import BrokerServer

log = logging.getLogger("gregor.forwarding")

# What a broker never answers itself in a quorum: the metadata writes (and DescribeQuorum).
FORWARDED = frozenset(
    {
        api_keys.CREATE_TOPICS,
        api_keys.DELETE_TOPICS,
        api_keys.CREATE_PARTITIONS,
        api_keys.ALTER_CONFIGS,
        api_keys.INCREMENTAL_ALTER_CONFIGS,
        api_keys.DESCRIBE_QUORUM,  # only the leader can describe the quorum
    }
)
ENVELOPE_VERSION = 0
CREATE_TOPICS_VERSION = 7
DEFAULT_TIMEOUT_MS = 30_000
RETRY_BACKOFF_S = 0.05
NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
INVALID_REQUEST = errors.INVALID_REQUEST
UNKNOWN_SERVER_ERROR = errors.BY_NAME["UNKNOWN_SERVER_ERROR"].code


def host_bytes(peer: str) -> bytes:
    """The client's address as Kafka's envelope carries it: 4 or 16 bytes (empty if unknown)."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def peer_of(address: bytes) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return "?"


class Forwarder:
    def __init__(self, broker: BrokerServer) -> None:
        self.broker = broker
        self._creating: dict[str, asyncio.Task[None]] = {}
        self._correlation_id = 0

    # -- the broker side ------------------------------------------------------------------------

    def wanted(self, api_key: int) -> bool:
        """True when `api_key` must be forwarded: a networked node not leading the quorum."""
        store = self.broker.store
        return (
            api_key in FORWARDED
            and self.broker.member is not None
            and store.networked
            and not store.is_active()
        )

    async def forward(self, frame: bytes, peer: str, timeout_ms: int) -> list[Any] | None:
        """The controller's response frame for the client's request `frame`; None if no
        controller answered within `timeout_ms`."""
        member = self.broker.member
        assert member is not None
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
            leader = self.broker.store.leader_id
            client = member.client
            if leader is None or leader not in member.voters or client is None:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            try:
                answer = await client.send(
                    leader, api_keys.ENVELOPE, ENVELOPE_VERSION, envelope, timeout_ms=left_ms
                )
            except ClientError as exc:
                log.debug("forwarding to node %d: %s", leader, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if answer.error_code == NOT_CONTROLLER:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if answer.error_code != errors.NONE or answer.response_data is None:
                log.warning(
                    "node %d refused a forwarded request: %s",
                    leader,
                    errors.name_of(answer.error_code),
                )
                return None
            data = bytes(answer.response_data)
            return [len(data).to_bytes(4, "big"), data]

    def create_topic_later(self, spec: TopicSpec) -> None:
        """Have the active controller create `spec` (one CreateTopics in flight per topic)."""
        if spec.name in self._creating or self.broker.member is None:
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

    # -- the controller side --------------------------------------------------------------------

    async def serve_envelope(self, version: int, req: Any) -> Any:
        store = self.broker.store
        if not store.is_active():
            return EnvelopeResponse(error_code=NOT_CONTROLLER)
        try:
            header, body = codec.decode_request(memoryview(req.request_data))
        except ProtocolError as exc:
            log.warning("a forwarded request is malformed or of a version not served: %s", exc)
            return EnvelopeResponse(error_code=INVALID_REQUEST)
        key, inner_version = header.request_api_key, header.request_api_version
        if key not in FORWARDED:
            log.warning("an Envelope carried %s, which is not forwarded", api_keys.name_of(key))
            return EnvelopeResponse(error_code=INVALID_REQUEST)
        ctx = RequestContext(self.broker, header, peer_of(bytes(req.client_host_address)), {})  # type: ignore[arg-type]
        try:
            result = HANDLERS[key](ctx, body)
            if not isinstance(result, Data):
                result = await result if isinstance(result, Awaitable) else result
            out = codec.encode_response(key, inner_version, header.correlation_id, result)
        except Exception:
            log.exception("a forwarded %s failed", api_keys.name_of(key))
            return EnvelopeResponse(error_code=UNKNOWN_SERVER_ERROR)
        return EnvelopeResponse(response_data=codec.join(out)[4:], error_code=errors.NONE)
