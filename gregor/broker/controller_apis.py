"""Admin writes served on the controller listener, as Kafka's ControllerApis serves them:
CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
ElectLeaders, AlterUserScramCredentials, CreateAcls, DeleteAcls and AlterClientQuotas, and the
Envelope (API 58) in which brokers forward their clients' requests of those kinds and
DescribeQuorum (node/forwarding.py, KIP-590).

    driver.handlers.update(admin_handlers(services))

Each runs the handler the client listener runs (gregor/handlers), with the node's services and
the caller's principal (so it authorizes as on the client listener):
the BrokerServer on a combined node; on a controller-only node the ControllerServer, which has
what those handlers use (the store, Admin, the static config, the node id) and hosts no
partitions. Off the active controller they answer NOT_CONTROLLER, as on the client listener;
on it, once the records are committed.

An Envelope reaching a node that is not the active controller gets NOT_CONTROLLER (the broker
tries the new one); one carrying an API that is not forwarded, or a request that does not
decode, gets INVALID_REQUEST; otherwise the inner request goes through the same handler as a
client's would (the peer is the client's address from the envelope) and its encoded response,
header included, is the envelope's `response_data`.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import gregor.handlers  # noqa: F401  (registers every handler)
from gregor.handlers.context import CLIENT_HOST, RequestContext
from gregor.handlers.registry import HANDLERS
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.exceptions import ProtocolError
from gregor.protocol.headers import RequestHeader
from gregor.protocol.messages import EnvelopeResponse
from gregor.replication.pending import Pending
from gregor.runtime.connection import Connection
from gregor.runtime.purgatory_driver import future_of
from gregor.runtime.raft_driver import ListenerHandler
from gregor.security import principal_data
from gregor.security.principal import set_principal

log = logging.getLogger("gregor.controller")

ADMIN_WRITES = frozenset(
    {
        api_keys.CREATE_TOPICS,
        api_keys.DELETE_TOPICS,
        api_keys.CREATE_PARTITIONS,
        api_keys.ALTER_CONFIGS,
        api_keys.INCREMENTAL_ALTER_CONFIGS,
        api_keys.ELECT_LEADERS,
        api_keys.ALTER_USER_SCRAM_CREDENTIALS,
        api_keys.CREATE_ACLS,
        api_keys.DELETE_ACLS,
        # client quotas
        api_keys.ALTER_CLIENT_QUOTAS,
    }
)
# What a broker never answers itself in a quorum: the admin writes, and DescribeQuorum (only the
# leader can describe the quorum).
FORWARDED = ADMIN_WRITES | {api_keys.DESCRIBE_QUORUM}
NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
UNKNOWN_SERVER_ERROR = errors.BY_NAME["UNKNOWN_SERVER_ERROR"].code


def admin_handlers(services: Any) -> dict[int, ListenerHandler]:
    """Controller-listener handlers (api key -> async (version, request) -> response body)."""
    handlers = {key: _serving(services, key) for key in sorted(ADMIN_WRITES)}
    handlers[api_keys.ENVELOPE] = _envelope(services)
    return handlers


def _serving(services: Any, key: int) -> ListenerHandler:
    async def serve(version: int, request: Any, conn: Connection) -> Any:
        header = RequestHeader(key, version, 0, "controller-listener")
        ctx = RequestContext(services, header, conn.peer, conn.attributes)  # its principal
        result = HANDLERS[key](ctx, request)
        return await future_of(result) if isinstance(result, Pending) else result

    return serve


def _peer(address: bytes) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return "?"


def _forwarded_state(req: Any, peer: str) -> dict[str, Any]:
    """The connection state the forwarded request is handled with: the client's principal and
    address (`peer`), as the Envelope names them (ANONYMOUS when it names none)."""
    state: dict[str, Any] = {CLIENT_HOST: peer}
    if req.request_principal:
        set_principal(state, principal_data.deserialize(bytes(req.request_principal)))
    return state


def _envelope(services: Any) -> ListenerHandler:
    async def serve(version: int, req: Any, _conn: Connection) -> Any:
        if not services.store.is_active():
            return EnvelopeResponse(error_code=NOT_CONTROLLER)
        try:
            header, body = codec.decode_request(memoryview(req.request_data))
        except ProtocolError as exc:
            log.warning("a forwarded request is malformed or of a version not served: %s", exc)
            return EnvelopeResponse(error_code=errors.INVALID_REQUEST)
        key, inner_version = header.request_api_key, header.request_api_version
        if key not in FORWARDED:
            log.warning("an Envelope carried %s, which is not forwarded", api_keys.name_of(key))
            return EnvelopeResponse(error_code=errors.INVALID_REQUEST)
        peer = _peer(bytes(req.client_host_address))
        try:
            connection = _forwarded_state(req, peer)
        except ValueError as exc:
            log.warning("an Envelope's principal cannot be read: %s", exc)
            return EnvelopeResponse(error_code=errors.PRINCIPAL_DESERIALIZATION_FAILURE)
        ctx = RequestContext(services, header, peer, connection)
        try:
            result = HANDLERS[key](ctx, body)
            if isinstance(result, Pending):
                result = await future_of(result)
            out = codec.encode_response(key, inner_version, header.correlation_id, result)
        except Exception:
            log.exception("a forwarded %s failed", api_keys.name_of(key))
            return EnvelopeResponse(error_code=UNKNOWN_SERVER_ERROR)
        return EnvelopeResponse(response_data=codec.join(out)[4:], error_code=errors.NONE)

    return serve
