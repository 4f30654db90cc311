"""The composition root of a controller-only node (`process.roles=controller`): a voter of the
metadata quorum and nothing else.

    ControllerServer(config).run()       # until SIGTERM/SIGINT

It keeps `meta.properties` and the metadata log (`__cluster_metadata-0`) in the first log dir,
and runs a ClusterMember with no broker: the Raft driver on the controller listener, which
serves the Raft RPCs, DescribeQuorum, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
AlterPartition and the admin writes brokers forward (controller_apis.py), and the controller's
tick (node/active_controller.py, driven by runtime/controller_driver.py). It has no
client listener (a listener that is not a controller listener is a config error), hosts no
partitions, runs no group or transaction coordinator, and never registers as a broker: Metadata
responses never name it, and partitions are never placed on it.

The admin handlers it serves get a `Services` with the metadata parts only (store, admin,
config, clock, and a purgatory for writes awaiting their commit; `apply_metadata` does nothing:
there are no partitions here). The ready file,
when asked for, gets the controller listener's host:port.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, cast

from gregor.broker.cluster_member import ClusterMember, networked_controller
from gregor.broker.config import BrokerConfig
from gregor.broker.listener_security import node_security
from gregor.broker.node_metrics import NodeMetrics, node_metrics
from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.controller.admin import Admin
from gregor.handlers.context import Services
from gregor.metadata import meta_properties
from gregor.metadata import records as metadata_records
from gregor.metadata.cluster import ClusterView
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metrics.collectors import BrokerSources
from gregor.metrics.health import NodeHealth
from gregor.protocol import codec
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.runtime.connection import write_deferred_now
from gregor.runtime.log_io import in_thread
from gregor.runtime.process import (
    halt_on_metadata_log_failure,
    serve_until_signalled,
    write_ready_file,
)
from gregor.runtime.purgatory_driver import PurgatoryDriver
from gregor.security.authorizer import live_authorizer

log = logging.getLogger("gregor.controller")


class ControllerServer:
    def __init__(
        self, config: BrokerConfig, ready_file: str | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        membership = config.membership()
        if membership.roles != {"controller"}:
            raise ValueError(f"a controller-only node, not {sorted(membership.roles)}")
        self.config = config
        self.static_config = config.values
        self.node_id = config.node_id
        self.ready_file = ready_file
        self.clock = clock
        data_dirs = config.log_dirs
        for d in data_dirs:
            os.makedirs(d, exist_ok=True)
        self.meta_properties = meta_properties.ensure(
            data_dirs,
            self.node_id,
            config.get_str("cluster.id"),
            joins_quorum=config.joins_quorum(),
        )
        cluster_id = self.meta_properties[data_dirs[0]].cluster_id
        assert membership.voters is not None
        self.store, raft_log, quorum_state, raft_config = RaftMetadataStore.open_networked(
            data_dirs[0],
            self.node_id,
            cluster_id,
            list(membership.voters),
            clock=clock,
            configs=config.values,
        )
        self.store.on_log_failure(halt_on_metadata_log_failure(data_dirs[0]))
        self.controller = networked_controller(self.store, self.node_id, config)
        self.purgatory = DelayedOperationPurgatory("controller")  # writes awaiting their commit
        self.purgatory_driver = PurgatoryDriver(self.purgatory, clock.now_ms)
        cluster = ClusterView(self.store, self.node_id, quorum=True, host="", port=0)
        self.admin = Admin(
            self.store, self.controller, cluster.active_broker_ids, config.values, self.node_id
        )
        self.member = ClusterMember(
            self.node_id,
            self.store,
            self.controller,
            membership,
            raft_log,
            quorum_state,
            raft_config,
            clock=clock,
            security=node_security(config, membership),
            config_view=BrokerConfigView(self.store, self.node_id, config.values),
        )
        # dynamic configs may have changed: the controller listener's connection limits
        self.store.on_replayed = self.member.reconfigure_connections
        self.store.on_answered = write_deferred_now  # before the replay: see the store
        self.member.serve_admin(_metadata_services(self, cluster))
        self.started = self.stopping = False
        self.metrics = self._build_metrics()

    def _build_metrics(self) -> NodeMetrics | None:
        """`metrics.listener` on a controller-only node: the controller's and Raft's metrics,
        its listener's connections, the process; ready once the quorum has a leader."""
        store, member = self.store, self.member

        def of_server(read: Callable[[Any], Any]) -> Any:
            server = member.driver.server if member.driver is not None else None
            return None if server is None else read(server)

        def by_listener(read: Callable[[Any], Any]) -> dict[str, Any]:
            value = of_server(read)
            return {} if value is None else {self._listener_name: value}

        sources = BrokerSources(
            self.node_id, None, None, None, image=lambda: store.image,
            raft=lambda: store.raft_node, active_controller=store.is_active,
            connections=lambda: by_listener(lambda s: len(s.connections)),
            socket_bytes=lambda: by_listener(lambda s: s.socket_bytes()),
            connection_totals=lambda: by_listener(lambda s: s.connection_totals()),
            connection_rates=lambda: by_listener(lambda s: s.connection_rates()),
            accept_rate=lambda: by_listener(
                lambda s: s.quotas.accept_rates(s.clock()).get(s.listener, 0.0)
            ),
            broker_accept_rate=lambda: of_server(lambda s: s.quotas.broker_accept_rate(s.clock())),
            accept_throttle=lambda: by_listener(
                lambda s: s.quotas.throttle_time_ms(s.clock()).get(s.listener, 0.0)
            ),
            acceptor_blocked=lambda: by_listener(lambda s: s.blocked_ns),
        )  # fmt: skip
        value = self.config.get_str("metrics.listener")
        metrics = node_metrics(value, sources, self._health, broker=False)
        if metrics is not None:
            store.on_commit_latency = sources.commit_latency.record
        return metrics

    @property
    def _listener_name(self) -> str:
        return self.config.controller_listener_config().name

    def _health(self) -> NodeHealth:
        """A controller registers nowhere: ready once it knows the quorum's leader and the
        committed metadata."""
        knows = self.store.leader_id is not None and self.store.caught_up
        return NodeHealth(self.started, self.stopping, 0, False, knows)

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.metrics is not None:  # first: live while the quorum forms
            await self.metrics.start(self.ready_file)
        codec.compile_all()
        metadata_records.compile_all()
        self.purgatory_driver.start()
        self.store.in_thread = in_thread  # metadata snapshots written off the loop
        await self.member.start()
        server = self.member.driver.server
        assert server is not None
        log.info(
            "gregor controller %d ready on %s:%d (cluster %s, metadata in %s)",
            self.node_id,
            server.host,
            server.port,
            self.cluster_id,
            self.config.log_dirs[0],
        )
        self.started = True
        if self.ready_file:
            write_ready_file(self.ready_file, server.host, server.port)

    async def stop(self) -> None:
        log.info("shutting down")
        self.stopping = True
        await self.member.stop()  # the active controller resigns first
        self.purgatory_driver.stop()
        self.store.close()
        if self.metrics is not None:
            await self.metrics.stop()
        log.info("shut down cleanly")

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly."""
        await serve_until_signalled(self.start, self.stop)


def _metadata_services(server: ControllerServer, cluster: ClusterView) -> Services:
    """What the admin handlers of a controller-only node run with: no partitions, coordinators
    or producer ids here (they never use them)."""
    absent = cast(Any, None)
    return Services(
        server.node_id, server.clock, BrokerConfigView(server.store, server.node_id,
        server.config.values), server.store, cluster, server.admin, absent, absent, absent,
        absent, absent, absent, server.purgatory, lambda: None, lambda _topic: None,
        authorizer=live_authorizer(server.config.values, lambda: server.store.image.acls),
    )  # fmt: skip
