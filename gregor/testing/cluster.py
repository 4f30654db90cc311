"""`LocalCluster`: several gregor nodes on loopback, each a child process (`gregor.Broker`),
forming one KRaft quorum: every node is broker and controller (`process.roles` default), with a
client listener and a controller listener on ports picked by binding port 0 first.

    with LocalCluster(3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(cluster.active_controller())      # SIGKILL
        cluster.start_node(2)                           # same ports, same data

Node ids are 1..n; node i keeps its data in `<base_dir>/node-<i>` (its log in `broker.log`
there). `gregor cluster up` runs one in the foreground.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from types import TracebackType

from gregor.metadata.meta_properties import random_id
from gregor.testing.broker import Broker


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the OS hands out for port 0, all held until every one is picked (so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalCluster:
    def __init__(
        self,
        nodes: int = 3,
        *,
        base_dir: str | None = None,
        host: str = "127.0.0.1",
        config: dict[str, str] | None = None,
        log_level: str = "INFO",
        cluster_id: str | None = None,
    ) -> None:
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="gregor-cluster-")
        self.host = host
        self.cluster_id = cluster_id or random_id()
        ports = free_ports(2 * nodes, host)
        self.ids = list(range(1, nodes + 1))
        self.broker_ports = {i: ports[2 * k] for k, i in enumerate(self.ids)}
        self.controller_ports = {i: ports[2 * k + 1] for k, i in enumerate(self.ids)}
        self.voters = ",".join(f"{i}@{host}:{self.controller_ports[i]}" for i in self.ids)
        self.nodes: dict[int, Broker] = {}
        for i in self.ids:
            os.makedirs(f"{self.base_dir}/node-{i}", exist_ok=True)
            node_config = {
                "node.id": str(i),
                "cluster.id": self.cluster_id,
                "controller.quorum.voters": self.voters,
                "listeners": f"PLAINTEXT://{host}:{self.broker_ports[i]},CONTROLLER://{host}:{self.controller_ports[i]}",
                "controller.listener.names": "CONTROLLER",
                "default.replication.factor": "1",
                **(config or {}),
            }
            self.nodes[i] = Broker(
                node_config,
                data_dir=f"{self.base_dir}/node-{i}",
                host=host,
                port=self.broker_ports[i],
                log_level=log_level,
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.broker_ports[i]}" for i in self.ids)

    def bootstrap_of(self, node_id: int) -> str:
        return f"{self.host}:{self.broker_ports[node_id]}"

    def data_dir(self, node_id: int) -> str:
        return self.nodes[node_id].data_dir

    def start(self) -> LocalCluster:
        for i in self.ids:
            self.nodes[i].start()
        return self

    def start_node(self, node_id: int) -> None:
        self.nodes[node_id].start()

    def kill(self, node_id: int) -> None:
        """SIGKILL: a crash."""
        self.nodes[node_id].kill()

    def stop_node(self, node_id: int) -> None:
        self.nodes[node_id].stop()

    def running(self) -> list[int]:
        return [i for i, b in self.nodes.items() if b.process is not None and b.process.poll() is None]

    def stop(self) -> None:
        for b in self.nodes.values():
            b.stop()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
