"""The controller listener's own connection limits, as Kafka's controller applies them on its
socket server of its own: `listener.name.<controller listener>.max.connections` caps its
connections, counted apart from the client listeners'. A controller-only node alone, raw
sockets: nothing else connects to its listener; then a combined node, the limit set with
AlterConfigs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.clients.client_helpers import (
    frame,
    parse_api_versions_v0,
    recv_frame,
    request_header,
)
from tests.kraft_cluster.helpers import make_cluster, wait_for

pytestmark = pytest.mark.cluster


def ask(s: socket.socket, corr: int) -> None:
    s.sendall(frame(request_header(18, 0, corr, b"limits")))


def answered(s: socket.socket, corr: int, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return parse_api_versions_v0(recv_frame(s))[0] == corr
    except (TimeoutError, OSError):
        return False


def test_the_controller_listener_keeps_its_own_max_connections(tmp_path: Path) -> None:
    config = {"listener.name.controller.max.connections": "2", "max.connections": "1000"}
    with make_cluster(tmp_path, config, 0, controllers=1) as c:
        address = (c.host, c.controller_ports[1])
        held = [socket.create_connection(address, timeout=10) for _ in range(2)]
        for corr, s in enumerate(held):
            ask(s, corr)
            assert answered(s, corr, 10)
        waiting = socket.create_connection(address, timeout=10)  # in the listen backlog
        ask(waiting, 7)
        assert not answered(waiting, 7, 1.5), "a 3rd connection to the controller was served"
        held.pop().close()
        assert answered(waiting, 7, 20)
        log = c.nodes[1].read_log()
        assert "listener.name.controller.max.connections (2) reached" in log
        for s in held + [waiting]:
            s.close()


def _set(admin: AdminClient, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result()


def test_the_controller_listeners_limit_is_dynamic_and_apart_from_the_clients(
    tmp_path: Path,
) -> None:
    """A combined node: listener.name.controller.max.connections set with AlterConfigs holds
    the controller listener back (the node's own connections to it count; the client listener's
    do not), and raised lets the waiting connection in."""
    with make_cluster(tmp_path, {}, 1) as c:
        address = (c.host, c.controller_ports[1])
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        _set(admin, "listener.name.controller.max.connections", "1")
        probes: list[socket.socket] = []

        def held_back() -> bool:
            s = socket.create_connection(address, timeout=10)
            probes.append(s)
            ask(s, 3)
            return not answered(s, 3, 1.5)

        wait_for("the controller listener's limit applied", held_back, 30)
        # the client listener serves on: its connections are not the controller listener's
        assert admin.list_topics(timeout=15) is not None
        _set(admin, "listener.name.controller.max.connections", "1000")
        assert answered(probes[-1], 3, 20)
        for s in probes:
            s.close()
