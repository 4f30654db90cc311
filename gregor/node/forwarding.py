"""Forwarding (KIP-590), the brokers' side, sans I/O: metadata writes that reach a broker which
is not the active controller go, in an Envelope, to the controller that is (Kafka's
ForwardingManager and AutoTopicCreationManager).

    forwarding = ForwardingCore(forwarded, is_active=store.is_active, node_name="broker-1",
                                host="10.0.0.1")
    forwarding.wanted(api_key)                              # forward this request?
    forwarding.forward(frame, peer, timeout_ms, now_ms, done)   # done(response frame or None)
    forwarding.create_topic(spec, now_ms)                   # auto-creation: a CreateTopics
    result = forwarding.poll(now_ms)                        # Envelopes to send, next deadline
    forwarding.on_response(out, answer, now_ms)             # or on_error(out, exc, now_ms)

The client's request (header and body exactly as they arrived) becomes an Envelope's
`request_data`, sent to the active controller (the driver's channel finds it) with the time
left as its timeout, and sent again 50 ms after a NOT_CONTROLLER answer or no answer (no
controller known, or none from it), to whichever node leads by then, until the deadline. The
controller's `response_data` (response header and body, with the client's correlation id) goes
to `done` unchanged, with a size prefix. `done(None)` when no answer came by the deadline, the
controller refused the Envelope, or this node became the active controller meanwhile: the
broker then answers the request itself (NOT_CONTROLLER for each item, which clients retry).

Auto-creation: a topic a Metadata request asks for, or an internal topic FindCoordinator needs,
is created by forwarding a CreateTopics of our own, at most one in flight per topic; the client
is told LEADER_NOT_AVAILABLE (or COORDINATOR_NOT_AVAILABLE) meanwhile and asks again.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.controller.admin import TopicSpec
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.messages import CreateTopicsRequest, EnvelopeRequest
from gregor.protocol.outbound import Outbound, Poll, earliest

log = logging.getLogger("gregor.forwarding")

ENVELOPE_VERSION = 0
CREATE_TOPICS_VERSION = 7
DEFAULT_TIMEOUT_MS = 30_000
RETRY_BACKOFF_MS = 50
NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
Done = Callable[[list[Any] | None], None]


def host_bytes(peer: str) -> bytes:
    """The client's address as Kafka's envelope carries it: 4 or 16 bytes (empty if unknown)."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


@dataclass(eq=False)
class Forward:
    """One request on its way to the controller."""

    envelope: EnvelopeRequest
    deadline_ms: int
    done: Done
    retry_at_ms: int = 0
    in_flight: bool = False


def _noop() -> None:
    pass


class ForwardingCore:
    def __init__(
        self,
        forwarded: frozenset[int],
        *,
        is_active: Callable[[], bool],
        node_name: str,
        host: str,
    ) -> None:
        """`forwarded`: the API keys only the active controller answers; `node_name` and
        `host`: the client id and address of this node's own CreateTopics."""
        self.forwarded = forwarded
        self.is_active = is_active
        self.node_name = node_name
        self.host = host
        self.pending: list[Forward] = []
        self.creating: set[str] = set()  # topics with a CreateTopics on its way
        self._correlation_id = 0
        self.wakeup: Callable[[], None] = _noop  # set by the driver

    def wanted(self, api_key: int) -> bool:
        """True when `api_key` must be forwarded: this node is not the active controller."""
        return api_key in self.forwarded and not self.is_active()

    def forward(
        self,
        frame: bytes,
        peer: str,
        timeout_ms: int,
        now_ms: int,
        done: Done,
        principal: bytes | None = None,
    ) -> None:
        """Send the client's request `frame` (and its principal, serialized:
        security/principal_data.py); `done` gets the controller's response frame, or None if
        none came within `timeout_ms`."""
        envelope = EnvelopeRequest(
            request_data=frame, request_principal=principal, client_host_address=host_bytes(peer)
        )
        self.pending.append(Forward(envelope, now_ms + max(timeout_ms, 1), done))
        self.wakeup()

    def poll(self, now_ms: int) -> Poll:
        out: list[Outbound] = []
        deadline = None
        active = self.is_active()
        for f in list(self.pending):
            if f.in_flight:
                continue  # its answer (or its timeout, at the deadline) wakes us
            if now_ms >= f.deadline_ms or active:  # too late, or this node answers itself
                self._finish(f, None)
            elif now_ms < f.retry_at_ms:
                deadline = earliest(deadline, f.retry_at_ms)
            else:
                f.in_flight = True
                out.append(
                    Outbound(
                        api_keys.ENVELOPE,
                        ENVELOPE_VERSION,
                        f.envelope,
                        timeout_ms=f.deadline_ms - now_ms,
                        context=f,
                    )
                )
        return Poll(out, deadline)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        f: Forward = out.context
        log.debug("forwarding: %s", error)
        self._retry(f, now_ms)

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        f: Forward = out.context
        if answer.error_code == NOT_CONTROLLER:
            self._retry(f, now_ms)
        elif answer.error_code != errors.NONE or answer.response_data is None:
            log.warning("the controller refused a forwarded request: %s",
                        errors.name_of(answer.error_code))  # fmt: skip
            self._finish(f, None)
        else:
            data = bytes(answer.response_data)
            self._finish(f, [len(data).to_bytes(4, "big"), data])

    def _retry(self, f: Forward, now_ms: int) -> None:
        f.in_flight = False
        f.retry_at_ms = now_ms + RETRY_BACKOFF_MS

    def give_up(self) -> None:
        """Stopping: every request still waiting is answered None (the broker answers it)."""
        for f in list(self.pending):
            self._finish(f, None)

    def _finish(self, f: Forward, response: list[Any] | None) -> None:
        self.pending.remove(f)
        f.done(response)

    # -- auto-creation ---------------------------------------------------------------------

    def create_topic(self, spec: TopicSpec, now_ms: int) -> None:
        """Have the active controller create `spec` (one CreateTopics in flight per topic)."""
        if spec.name in self.creating:
            return
        self.creating.add(spec.name)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        frame = codec.join(
            codec.encode_request(
                api_keys.CREATE_TOPICS,
                CREATE_TOPICS_VERSION,
                self._correlation_id,
                f"{self.node_name}-auto-create",
                _create_topics(spec),
            )
        )[4:]

        def created(response: list[Any] | None) -> None:
            self.creating.discard(spec.name)
            _log_creation(spec.name, response)

        self.forward(frame, f"{self.host}:0", DEFAULT_TIMEOUT_MS, now_ms, created)


def _create_topics(spec: TopicSpec) -> CreateTopicsRequest:
    R = CreateTopicsRequest
    topic = R.CreatableTopic(
        name=spec.name,
        num_partitions=spec.num_partitions,
        replication_factor=spec.replication_factor,
        assignments=[
            R.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
            for i, b in sorted((spec.assignments or {}).items())
        ],
        configs=[
            R.CreatableTopicConfig(name=k, value=v) for k, v in sorted((spec.configs or {}).items())
        ],
    )
    return R(topics=[topic], timeout_ms=DEFAULT_TIMEOUT_MS, validate_only=False)


def _log_creation(name: str, response: list[Any] | None) -> None:
    if response is None:
        log.info("auto-creation of topic %s: no active controller answered", name)
        return
    _cid, body = codec.decode_response(
        api_keys.CREATE_TOPICS, CREATE_TOPICS_VERSION, codec.join(response)[4:]
    )
    result = body.topics[0]
    if result.error_code in (errors.NONE, errors.TOPIC_ALREADY_EXISTS):
        log.info("auto-created topic %s through the active controller", name)
    else:
        why = f"{errors.name_of(result.error_code)} {result.error_message or ''}"
        log.warning("auto-creation of topic %s refused by the controller: %s", name, why)
