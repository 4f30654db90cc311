"""The composition root of a broker node: it builds the node's services, cores and drivers in
order, starts them, and stops them in the reverse order. It decides nothing itself.

    BrokerServer(config).run()       # until SIGTERM/SIGINT

Build: the metadata (metadata_node.py: meta.properties, the metadata log and its controller,
the quorum member in a cluster), the log manager, the replica manager and the partitions it
hosts (replication/hosting.py), the coordinators, and the one `Services` object handlers get
(handlers/context.py). Start: open the log dirs (recovering after a crash), host the partitions
the metadata names, listen (dispatch.py), join the quorum, start the timers (runtime/timers.py).
Stop: hand leaderships over while still serving (controlled shutdown), stop accepting, finish
in-flight requests, flush, write checkpoints and the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import gregor.handlers  # noqa: F401  (registers every handler)
from gregor.broker.alter_partition import AlterPartitionSender
from gregor.broker.auto_create import auto_creator
from gregor.broker.cleaner_thread import CleanerThreads
from gregor.broker.config import BrokerConfig
from gregor.broker.dispatch import Dispatcher
from gregor.broker.forwarding import Forwarder
from gregor.broker.inter_broker import InterBroker
from gregor.broker.marker_sender import MarkerSender
from gregor.broker.metadata_node import open_metadata
from gregor.broker.replica_fetcher import ReplicaFetcherManager
from gregor.broker.txn_verifier import TxnVerifier
from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.controller.admin import Admin
from gregor.controller.producer_ids import ProducerIdManager
from gregor.coordinator.runtime import GroupCoordinator
from gregor.coordinator.txn.runtime import TransactionCoordinator
from gregor.handlers.context import Services
from gregor.handlers.txn_markers import write_marker
from gregor.metadata.cluster import ClusterView, registered_epoch
from gregor.metadata.config_view import BrokerConfigView
from gregor.protocol import codec
from gregor.replication.hosting import PartitionHosting
from gregor.replication.partition import ReplicaManager
from gregor.runtime.client import NetworkClient
from gregor.runtime.log_io import checkpoint_in_background, flush_after_roll
from gregor.runtime.process import serve_until_signalled, write_ready_file
from gregor.runtime.server import Server, bind, connection_limits
from gregor.runtime.timers import drive, every
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.broker")


class BrokerServer:
    def __init__(
        self, config: BrokerConfig, ready_file: str | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        membership = config.membership()  # a bad combination of roles is refused before anything
        if not membership.is_broker:
            raise ValueError("a controller-only node runs as a ControllerServer")
        self.config, self.node_id, self.ready_file, self.clock = (
            config,
            config.node_id,
            ready_file,
            clock,
        )
        self.listen_host, self.listen_port = config.listener()
        host, port = config.advertised()
        # Port 0: bound now, so the registration below names the port clients will use.
        self._listen_sock = bind(*config.listener()) if self.listen_port == 0 else None
        if self._listen_sock is not None:
            self.listen_port = self._listen_sock.getsockname()[1]
            port = port or self.listen_port
        node = open_metadata(config, membership, clock, host, port, broker=self)
        self.store, self.controller, self.member = node.store, node.controller, node.member
        self.meta_properties = node.meta_properties
        self.cluster = ClusterView(
            self.store, self.node_id, quorum=membership.networked, host=host, port=port,
            rack=config.get_str("broker.rack"),
            inter_broker_listener=config.get_str("inter.broker.listener.name"),
        )  # fmt: skip
        self.config_view = BrokerConfigView(self.store, self.node_id, config.values)
        self.logs = LogManager(config.log_dirs, config_for=self.config_view.log_config_for)
        self.logs.roll_flusher = flush_after_roll
        self.replicas = ReplicaManager(
            self.node_id, self.logs, liveness=self.cluster.liveness,
            local_broker_epoch=self._broker_epoch,
            replica_lag_time_max_ms=int(self.config_value("replica.lag.time.max.ms")),
        )  # fmt: skip
        self.hosting = PartitionHosting(
            self.node_id, self.store, self.replicas, self.logs, self.config_view, clock
        )
        self.hosting.ready = self.member is None  # in a quorum: once the logs are open
        self._build_cluster_parts()
        self.services = self._build_services()
        if self.member is not None:
            self.member.serve_admin(self.services)
        self.server: Server | None = None
        self._timers: list[asyncio.Task[None]] = []

    def _build_cluster_parts(self) -> None:
        """In a quorum, follower partitions fetch from their leaders, leaders send their ISR
        changes to the active controller, and admin writes are forwarded there."""
        self.fetchers, self.isr_sender = None, None
        if self.member is not None:
            self.fetchers = ReplicaFetcherManager(self)
            self.isr_sender = AlterPartitionSender(self, self.member)
            self.replicas.on_isr_update = self.isr_sender.submit
            self.hosting.on_followers = self.fetchers.apply
        ids = self.cluster.active_broker_ids if self.member is not None else [self.node_id]
        self.admin = Admin(self.store, self.controller, ids, self.config.values, self.node_id)
        self.forwarder = Forwarder(self)
        if self.member is not None:  # topics made off the controller: a CreateTopics sent there
            self.admin.forward_create = self.forwarder.create_topic_later
        self.links = None
        if self.member is not None:  # markers and transaction checks with other brokers
            client = NetworkClient(client_id=f"broker-{self.node_id}")
            self.links = InterBroker(self.node_id, lambda: self.store.image, client)

    def _build_services(self) -> Services:
        apply, value = self.hosting.apply, self.config_value
        # a cluster node gets its producer-id blocks from the active controller
        producer_ids = ProducerIdManager(self.member or self.controller)
        self.cleaner = CleanerThreads(self.logs, self.config_view.cleaner_config(), self.now_ms)
        groups = GroupCoordinator(self.node_id, self.store, self.replicas, self.admin, value, apply)
        self.markers = MarkerSender(
            self.node_id, lambda: self.store.image, self._write_marker_here, self.links
        )
        transactions = TransactionCoordinator(
            self.node_id, self.store, self.replicas, self.admin, value, apply,
            producer_ids.next_id, self.markers.write_markers,
        )  # fmt: skip
        self.hosting.on_applied += [groups.on_metadata, transactions.on_metadata]
        self.hosting.on_broker_config = self._reconfigure
        return Services(
            self.node_id, self.clock, self.config_view, self.store, self.cluster, self.admin,
            self.replicas, self.logs, producer_ids, groups, transactions,
            TxnVerifier(self.node_id, transactions, self.links), apply,
            auto_creator(self.config_view, self.admin, apply),
        )  # fmt: skip

    def _write_marker_here(self, topic: str, index: int, *marker: Any) -> int:
        """A marker to a partition hosted here (one in `__consumer_offsets` also settles the
        transaction's offset commits in that partition)."""
        groups = self.services.groups
        return write_marker(self.replicas, groups, self.now_ms(), topic, index, *marker)

    def _reconfigure(self) -> None:
        """Dynamic broker configs may have changed: connection limits and the cleaner."""
        if self.server is not None:
            self.server.reconfigure(connection_limits(self.config_view.value))
        asyncio.ensure_future(self.cleaner.reconfigure(self.config_view.cleaner_config()))

    # What the cluster drivers not yet given their own narrow dependencies read of the broker.
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def config_value(self, key: str) -> Any:
        return BrokerConfigView(self.store, self.node_id, self.config.values).value(key)

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return self.cluster.broker_endpoint(broker_id)

    @property
    def host(self) -> str:
        return self.cluster.host

    @property
    def port(self) -> int:
        return self.cluster.port

    def _broker_epoch(self) -> int:
        if self.member is not None:
            return self.member.broker_epoch
        return registered_epoch(self.store.image, self.node_id)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        codec.compile_all()
        self.logs.call_soon_on_owner = asyncio.get_running_loop().call_soon_threadsafe
        self.logs.startup()
        self.hosting.apply()
        value = self.config_value
        self.server = Server(
            Dispatcher(self.services, self.forwarder), host=self.listen_host,
            port=self.listen_port, sock=self._listen_sock,
            max_request_bytes=int(value("socket.request.max.bytes")),
            max_queued_requests=int(value("queued.max.requests")),
            max_queued_request_bytes=int(value("queued.max.request.bytes")),
            max_idle_ms=int(value("connections.max.idle.ms")),
            limits=connection_limits(self.config_view.value),
        )  # fmt: skip
        await self.server.start()
        if self.cluster.port == 0 or self.listen_port == 0:
            self.cluster.port = self.server.port
        self.hosting.schedule = asyncio.get_running_loop().call_soon
        if self.member is not None:
            self.hosting.ready = True
            self.store.on_replayed = self.hosting.apply
            await self.member.start()
            if self.isr_sender is not None:
                self.isr_sender.start()
            self.hosting.apply()
        self._start_timers()
        self.cleaner.start()  # log compaction: cleaner_thread.py
        where = ", ".join(self.logs.log_dirs)
        log.info(
            "gregor broker %d ready on %s:%d (cluster %s, data in %s)",
            self.node_id, self.host, self.port, self.store.cluster_id, where,
        )  # fmt: skip
        if self.ready_file:
            write_ready_file(self.ready_file, self.host, self.port)

    def _start_timers(self) -> None:
        s, value, logs = self.services, self.config_value, self.logs
        periodic: list[tuple[float, Callable[[], Any]]] = [
            (1.0, self._flush_and_purge),
            (value("log.flush.offset.checkpoint.interval.ms") / 1000, lambda: checkpoint_in_background(logs)),
            (value("log.retention.check.interval.ms") / 1000, lambda: logs.enforce_retention(self.now_ms())),
            (value("producer.id.expiration.check.interval.ms") / 1000, self._expire_producers),
        ]  # fmt: skip
        if self.member is not None:  # Kafka's isr-expiration task
            lag_s = value("replica.lag.time.max.ms") / 1000
            periodic.append((lag_s / 2, lambda: self.replicas.maybe_shrink_isr(self.now_ms())))
        # Producers idle past producer.id.expiration.ms are forgotten at once (state loaded
        # from snapshots may be old), then every check interval (producer_state.py).
        self._expire_producers()
        self._timers = [asyncio.ensure_future(every(sec, fn)) for sec, fn in periodic]
        for core, what in ((s.groups, "group"), (s.transactions, "txn"), (self.store, "metadata")):
            self._timers.append(asyncio.ensure_future(drive(core, self.clock, what)))

    def _flush_and_purge(self) -> None:
        now = self.now_ms()
        self.logs.flush_due(now)
        self.logs.purge_deleted(now)

    def _expire_producers(self) -> None:
        expiration_ms = int(self.config_value("producer.id.expiration.ms"))
        if n := self.logs.remove_expired_producers(self.now_ms(), expiration_ms):
            log.info(
                "forgot %d partition producer state(s) idle for %d ms or more", n, expiration_ms
            )

    async def stop(self) -> None:
        log.info("shutting down")
        for t in self._timers:
            t.cancel()
        if self.member is not None:
            # Hand leaderships over while still serving (Kafka's order): followers finish
            # catching up, waiting acks=all produces are answered, clients move on.
            await self.member.leave()
        if self.server is not None:
            await self.server.stop()
        await self.forwarder.close()
        if self.links is not None:
            await self.links.close()
        for part in (self.member, self.fetchers, self.isr_sender):
            if part is not None:
                await part.stop()
        await self.cleaner.stop()  # before the logs close: no swap may reach a closed log
        self.logs.shutdown()
        self.store.close()
        log.info("shut down cleanly")

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly."""
        await serve_until_signalled(self.start, self.stop)
