"""The composition root of a controller-only node (`process.roles=controller`): a voter of the
metadata quorum and nothing else.

    ControllerServer(config).run()       # until SIGTERM/SIGINT

It keeps `meta.properties` and the metadata log (`__cluster_metadata-0`) in the first log dir,
and runs a ClusterMember with no broker: the Raft driver on the controller listener, which
serves the Raft RPCs, DescribeQuorum, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds
and the admin writes brokers forward (controller_apis.py), and the controller timer. It has no
client listener (a listener that is not a controller listener is a config error), hosts no
partitions, runs no group or transaction coordinator, and never registers as a broker: Metadata
responses never name it, and partitions are never placed on it.

For the admin handlers it serves, it offers what they use of a broker (`store`, `admin`,
`static_config`, `node_id`, `now_ms`, `cluster_id`, `purgatory` for writes awaiting their
commit; `apply_metadata` does nothing: there are no partitions here). The ready file, when asked for, gets the controller listener's host:port.
"""

from __future__ import annotations

import logging
import os
import time

from gregor.broker.cluster_member import ClusterMember, networked_controller
from gregor.broker.config import BrokerConfig
from gregor.controller.admin import Admin
from gregor.metadata import meta_properties
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol import codec
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.runtime.process import (
    halt_on_metadata_log_failure,
    serve_until_signalled,
    write_ready_file,
)
from gregor.runtime.purgatory_driver import PurgatoryDriver

log = logging.getLogger("gregor.controller")


class ControllerServer:
    def __init__(self, config: BrokerConfig, ready_file: str | None = None) -> None:
        membership = config.membership()
        if membership.roles != {"controller"}:
            raise ValueError(f"a controller-only node, not {sorted(membership.roles)}")
        self.config = config
        self.static_config = config.values
        self.node_id = config.node_id
        self.ready_file = ready_file
        data_dirs = config.log_dirs
        for d in data_dirs:
            os.makedirs(d, exist_ok=True)
        self.meta_properties = meta_properties.ensure(
            data_dirs, self.node_id, config.get_str("cluster.id")
        )
        cluster_id = self.meta_properties[data_dirs[0]].cluster_id
        assert membership.voters is not None
        self.store, raft_log, quorum_state, raft_config = RaftMetadataStore.open_networked(
            data_dirs[0], self.node_id, cluster_id, list(membership.voters), configs=config.values
        )
        self.store.on_log_failure(halt_on_metadata_log_failure(data_dirs[0]))
        self.controller = networked_controller(self.store, self.node_id, config)
        self.admin = Admin(
            self.store, self.controller, self._active_broker_ids, config.values, self.node_id
        )
        self.purgatory = DelayedOperationPurgatory("controller")
        self.purgatory_driver = PurgatoryDriver(self.purgatory, self.now_ms)
        self.member = ClusterMember(
            self.node_id,
            self.store,
            self.controller,
            membership,
            raft_log,
            quorum_state,
            raft_config,
            clock=self.now_ms,
            services=self,
        )

    # -- what the admin handlers use ------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def apply_metadata(self) -> None:
        """Nothing to bring in line: a controller hosts no partitions."""

    def _active_broker_ids(self) -> list[int]:
        """The brokers new partitions may be placed on: registered and unfenced."""
        return sorted(b for b, reg in self.store.image.brokers.items() if not reg.fenced)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        codec.compile_all()
        self.purgatory_driver.start()
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
        if self.ready_file:
            write_ready_file(self.ready_file, server.host, server.port)

    async def stop(self) -> None:
        log.info("shutting down")
        await self.member.stop()  # the active controller resigns first
        self.purgatory_driver.stop()
        self.store.close()
        log.info("shut down cleanly")

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly."""
        await serve_until_signalled(self.start, self.stop)
