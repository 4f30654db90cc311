"""`LocalCluster`: several gregor nodes on loopback, each a child process (`gregor.Broker`),
forming one KRaft quorum, with listeners on ports picked by binding port 0 first.

    with LocalCluster(3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(cluster.active_controller())      # SIGKILL the Raft leader
        cluster.start_node(2)                           # same ports, same data

By default every node is broker and controller (`process.roles` default), with a client and a
controller listener; node ids are 1..n. With `controllers=c`, nodes 1..c are controller-only
(`process.roles=controller`, a controller listener only: the voters) and nodes c+1..c+n
broker-only (`process.roles=broker`, a client listener only), which find the controllers through
`controller.quorum.voters`, or through `controller.quorum.bootstrap.servers` for the broker ids
in `bootstrap_only`. With `extra_listener`, each broker serves a second client listener. Node i
keeps its data in `<base_dir>/node-<i>` (its log in `broker.log` there). `gregor cluster up`
runs one in the foreground.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

from gregor.clock import SYSTEM_CLOCK
from gregor.metadata.meta_properties import random_id
from gregor.testing.broker import Broker
from gregor.testing.managed import Managed
from gregor.testing.ports import free_ports

__all__ = ["LocalCluster", "free_ports"]


class LocalCluster(Managed):
    def __init__(
        self,
        nodes: int = 3,
        *,
        base_dir: str | None = None,
        host: str = "127.0.0.1",
        config: dict[str, str] | None = None,
        log_level: str = "INFO",
        cluster_id: str | None = None,
        controllers: int = 0,
        bootstrap_only: Collection[int] = (),
        die_with_parent: bool = False,
        client_listener: str = "PLAINTEXT",
        extra_listener: str | None = None,
    ) -> None:
        """`client_listener`: the brokers' listener name (its protocol: `config`'s
        listener.security.protocol.map, or the name's own, e.g. SASL_SSL); `extra_listener`:
        the name of a second client listener each broker serves, on a port of its own
        (`extra_ports`, `extra_bootstrap`)."""
        self.base_dir = self._directory(base_dir, "gregor-cluster-")
        self.host = host
        self.cluster_id = cluster_id or random_id()
        dedicated = controllers > 0
        self.ids = list(range(1, nodes + controllers + 1))
        self.controller_ids = self.ids[:controllers] if dedicated else list(self.ids)
        self.broker_ids = self.ids[controllers:]
        extra = len(self.broker_ids) if extra_listener else 0
        ports = iter(free_ports(len(self.controller_ids) + len(self.broker_ids) + extra, host))
        self.broker_ports = {i: next(ports) for i in self.broker_ids}
        self.controller_ports = {i: next(ports) for i in self.controller_ids}
        self.extra_ports = {i: next(ports) for i in self.broker_ids} if extra_listener else {}
        self.voters = ",".join(
            f"{i}@{host}:{self.controller_ports[i]}" for i in self.controller_ids
        )
        quorum_bootstrap = ",".join(
            f"{host}:{self.controller_ports[i]}" for i in self.controller_ids
        )
        self.nodes: dict[int, Broker] = {}
        for i in self.ids:
            os.makedirs(f"{self.base_dir}/node-{i}", exist_ok=True)
            listeners = []
            if i in self.broker_ports:
                listeners.append(f"{client_listener}://{host}:{self.broker_ports[i]}")
            if i in self.extra_ports:
                listeners.append(f"{extra_listener}://{host}:{self.extra_ports[i]}")
            if i in self.controller_ports:
                listeners.append(f"CONTROLLER://{host}:{self.controller_ports[i]}")
            quorum = (
                {"controller.quorum.bootstrap.servers": quorum_bootstrap}
                if i in bootstrap_only
                else {"controller.quorum.voters": self.voters}
            )
            roles = {}
            if dedicated:
                roles = {"process.roles": "broker" if i in self.broker_ports else "controller"}
            node_config = {
                "node.id": str(i),
                "cluster.id": self.cluster_id,
                **roles,
                **quorum,
                "listeners": ",".join(listeners),
                "controller.listener.names": "CONTROLLER",
                "default.replication.factor": "1",
                **(config or {}),
            }
            self.nodes[i] = Broker(
                node_config,
                data_dir=f"{self.base_dir}/node-{i}",
                host=host,
                port=self.broker_ports.get(i, self.controller_ports.get(i, 0)),
                log_level=log_level,
                client_listener=i in self.broker_ports,
                die_with_parent=die_with_parent,
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.broker_ports[i]}" for i in self.broker_ids)

    @property
    def extra_bootstrap(self) -> str:
        """The brokers' `extra_listener` addresses."""
        return ",".join(f"{self.host}:{self.extra_ports[i]}" for i in self.broker_ids)

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

    def leader_known_to(self, node_id: int, timeout_s: float = 5.0) -> int:
        """The Raft leader as controller `node_id` knows it (-1: none): DescribeQuorum on its controller
        listener (the leader answers; a follower names its leader in NOT_LEADER_OR_FOLLOWER).
        Metadata's `controller_id` cannot tell: brokers name a live broker there."""
        from gregor.protocol import api_keys
        from gregor.protocol.messages import DescribeQuorumRequest
        from gregor.testing.raw_client import RawClient

        partition = DescribeQuorumRequest.PartitionData(partition_index=0)
        request = DescribeQuorumRequest(
            topics=[
                DescribeQuorumRequest.TopicData(
                    topic_name="__cluster_metadata", partitions=[partition]
                )
            ]
        )
        with RawClient(f"{self.host}:{self.controller_ports[node_id]}", timeout_s=timeout_s) as raw:
            answer = raw.call(api_keys.DESCRIBE_QUORUM, 1, request)
        return int(answer.topics[0].partitions[0].leader_id)

    def active_controller(self, timeout_s: float = 30.0) -> int:
        """The leader every running controller agrees on, once they do (TimeoutError
        otherwise)."""
        deadline = SYSTEM_CLOCK.monotonic_s() + timeout_s
        while SYSTEM_CLOCK.monotonic_s() < deadline:
            try:
                seen = {
                    self.leader_known_to(i) for i in self.running() if i in self.controller_ports
                }
            except OSError:
                seen = set()
            if len(seen) == 1 and -1 not in seen:
                return seen.pop()
            SYSTEM_CLOCK.sleep(0.1)
        raise TimeoutError(f"no leader all running nodes agree on within {timeout_s} s")

    def brokers_seen_by(self, node_id: int, timeout_s: float = 5.0) -> set[int]:
        """The brokers broker `node_id` names in Metadata: registered and unfenced (as the
        controller committed them and this broker replayed them)."""
        from gregor.protocol import api_keys
        from gregor.protocol.messages import MetadataRequest
        from gregor.testing.raw_client import RawClient

        with RawClient(self.bootstrap_of(node_id), timeout_s=timeout_s) as raw:
            answer = raw.call(api_keys.METADATA, 12, MetadataRequest(topics=[]))
        return {int(b.node_id) for b in answer.brokers}

    def wait_for_brokers(
        self, timeout_s: float = 60.0, stop: Callable[[], bool] = lambda: False
    ) -> bool:
        """Until every broker names every broker registered and unfenced: then a topic of
        replication factor len(broker_ids) can be made at once. False if `stop()` said so first;
        TimeoutError after `timeout_s`."""
        wanted = set(self.broker_ids)
        deadline = SYSTEM_CLOCK.monotonic_s() + timeout_s
        while not stop():
            try:
                if all(self.brokers_seen_by(i) == wanted for i in self.broker_ids):
                    return True
            except OSError:
                pass  # not listening yet, or restarting
            if SYSTEM_CLOCK.monotonic_s() > deadline:
                raise TimeoutError(
                    f"the brokers were not all registered and unfenced within {timeout_s:g} s"
                )
            SYSTEM_CLOCK.sleep(0.1)
        return False

    def running(self) -> list[int]:
        return [
            i for i, b in self.nodes.items() if b.process is not None and b.process.poll() is None
        ]

    def stop(self) -> None:
        """Brokers first, so that they can still ask a controller to fence them."""
        for i in sorted(self.ids, key=lambda i: i in self.controller_ids):
            self.nodes[i].stop()
