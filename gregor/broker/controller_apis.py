"""Admin writes served on the controller listener, as Kafka's ControllerApis serves them:
CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and IncrementalAlterConfigs. A
broker-only node relays its clients' admin writes here (controller_relay.py), since no broker
of such a cluster is ever the active controller.

    driver.handlers.update(admin_handlers(services))

Each runs the handler the client listener runs (gregor/handlers), with the node's services:
the BrokerServer on a combined node; on a controller-only node the ControllerServer, which has
what those handlers use (the store, Admin, the static config, the node id) and hosts no
partitions. Off the active controller they answer NOT_CONTROLLER, as on the client listener;
on it, once the records are committed.
"""

from __future__ import annotations

from typing import Any

import gregor.handlers  # noqa: F401  (registers every handler)
from gregor.handlers.context import RequestContext
from gregor.handlers.registry import HANDLERS
from gregor.protocol import api_keys
from gregor.protocol.codegen import Data
from gregor.protocol.headers import RequestHeader
from gregor.runtime.raft_driver import ListenerHandler

ADMIN_WRITES = frozenset(
    {
        api_keys.CREATE_TOPICS,
        api_keys.DELETE_TOPICS,
        api_keys.CREATE_PARTITIONS,
        api_keys.ALTER_CONFIGS,
        api_keys.INCREMENTAL_ALTER_CONFIGS,
    }
)


def admin_handlers(services: Any) -> dict[int, ListenerHandler]:
    """Controller-listener handlers (api key -> async (version, request) -> response body)."""
    return {key: _serving(services, key) for key in sorted(ADMIN_WRITES)}


def _serving(services: Any, key: int) -> ListenerHandler:
    async def serve(version: int, request: Any) -> Any:
        header = RequestHeader(key, version, 0, "controller-listener")
        result = HANDLERS[key](RequestContext(services, header, "controller listener"), request)
        return result if isinstance(result, Data) else await result

    return serve
