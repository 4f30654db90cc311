"""What the controller listener requires of its callers when an authorizer is configured, as
Kafka's ControllerApis checks it: CLUSTER_ACTION on the cluster for what only nodes send (the
Raft RPCs, the brokers' registration, heartbeats, ISR changes and producer-id blocks, and the
Envelope brokers forward admin writes in), DESCRIBE for DescribeQuorum. A caller without it
gets the API's own response with CLUSTER_AUTHORIZATION_FAILED as its top-level error (a Fetch
before v13 also in each partition, as Kafka's FetchRequest.getErrorResponse) and the request is
not handled. The caller is the connection's principal: its SASL user or TLS name on a secured
controller listener, User:ANONYMOUS on a PLAINTEXT one (so name the nodes in `super.users`).

    driver.wrap = lambda d: sasl_gate(ClusterActionGate(d, authorizer))

The admin writes served there check what each handler checks (controller_apis.py).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.protocol import api_keys, codec, errors
from gregor.protocol.exceptions import CorruptFrameError
from gregor.runtime.connection import Connection, Dispatcher, FrameError, Output
from gregor.security.acls import CLUSTER, CLUSTER_ACTION, CLUSTER_NAME, DESCRIBE
from gregor.security.principal import principal_of

log = logging.getLogger("gregor.authorizer")

CLUSTER_AUTHORIZATION_FAILED = errors.BY_NAME["CLUSTER_AUTHORIZATION_FAILED"].code
# The operation on the cluster each API needs on the controller listener (ControllerApis).
REQUIRED: dict[int, int] = {
    **dict.fromkeys(
        (
            api_keys.VOTE,
            api_keys.BEGIN_QUORUM_EPOCH,
            api_keys.END_QUORUM_EPOCH,
            api_keys.FETCH,
            api_keys.FETCH_SNAPSHOT,
            api_keys.ALTER_PARTITION,
            api_keys.BROKER_REGISTRATION,
            api_keys.BROKER_HEARTBEAT,
            api_keys.ALLOCATE_PRODUCER_IDS,
            api_keys.ENVELOPE,
        ),
        CLUSTER_ACTION,
    ),
    api_keys.DESCRIBE_QUORUM: DESCRIBE,
}
_API_KEY = struct.Struct(">h")
Authorize = Callable[[str, str, int, int, str], bool]


class ClusterActionGate:
    """The controller listener's dispatcher behind this check (the module docstring)."""

    def __init__(self, inner: Dispatcher, authorize: Authorize) -> None:
        self.inner = inner
        self.authorize = authorize  # (principal, host, operation, resource type, name)

    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        operation = REQUIRED.get(_API_KEY.unpack_from(frame)[0] if len(frame) >= 2 else -1)
        if operation is None:
            return self.inner(conn, frame)
        principal = str(principal_of(conn.attributes))
        host = conn.peer.rsplit(":", 1)[0].strip("[]")
        if self.authorize(principal, host, operation, CLUSTER, CLUSTER_NAME):
            return self.inner(conn, frame)
        try:
            header, request = codec.decode_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed request: {exc}") from None
        key, version = header.request_api_key, header.request_api_version
        log.info(
            "Principal = %s is denied %s on the cluster from host %s (%s)",
            principal, "CLUSTER_ACTION" if operation == CLUSTER_ACTION else "DESCRIBE", host,
            api_keys.name_of(key),
        )  # fmt: skip
        body = refused(key, version, request)
        return codec.encode_response(key, version, header.correlation_id, body)


def refused(key: int, version: int, request: Any) -> Any:
    """`key`'s response with CLUSTER_AUTHORIZATION_FAILED, as Kafka's getErrorResponse."""
    body: Any = codec.message_class(key, "response")(error_code=CLUSTER_AUTHORIZATION_FAILED)
    if key == api_keys.FETCH and version < 13:
        cls = type(body)
        body.responses = [
            cls.FetchableTopicResponse(
                topic=t.topic,
                partitions=[
                    cls.PartitionData(
                        partition_index=p.partition, error_code=CLUSTER_AUTHORIZATION_FAILED
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    if key == api_keys.DESCRIBE_QUORUM and version >= 2:
        body.error_message = "Cluster authorization failed."  # Errors.message()
    return body
