"""The composition root: one broker, and the controller of its one-voter KRaft quorum, wired
together.

    BrokerServer(config).run()       # until SIGTERM/SIGINT

Construction: check (or write) meta.properties in every log dir, open the metadata log
(`__cluster_metadata-0` in the first log dir) and lead its one-voter quorum, replay it, and
commit this broker's registration (bootstrapping a new log, migrating a pre-KRaft
`__cluster_metadata.json`: controller/local.py). Start: open the log dirs (recovering after a
crash), create the partitions the metadata names, listen. Every request frame goes through `dispatch`: peek the header, refuse what we
do not serve, decode, call the registered handler, encode (the handler may return an awaitable
for requests that wait). Timers: flush logs whose flush.ms has passed, write the recovery-point
and log-start checkpoints, remove deleted segment files, enforce retention; the log cleaner
runs on its own threads (cleaner_thread.py); the group and transaction coordinators are polled
at their deadlines, and so is the metadata log's Raft node. Stop: stop accepting, finish in-flight requests, flush, write checkpoints and
the clean-shutdown marker.

In a cluster (`controller.quorum.voters`, cluster_member.py) partition data is replicated: the
replica fetchers (replica_fetcher.py) keep follower partitions copying their leaders, the
AlterPartition sender (alter_partition.py) takes the leaders' ISR changes to the active
controller, a timer checks for ISR shrinks every replica.lag.time.max.ms / 2, and `stop`
first hands this broker's leaderships over (controlled shutdown) while it still serves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import gregor.handlers  # noqa: F401  (registers every handler)
from gregor.broker.alter_partition import AlterPartitionSender
from gregor.broker.cleaner_thread import CleanerThreads
from gregor.broker.cluster_member import ClusterMember, networked_controller
from gregor.broker.config import BrokerConfig, Membership
from gregor.broker.forwarding import Forwarder
from gregor.broker.inter_broker import InterBroker
from gregor.broker.marker_sender import MarkerSender
from gregor.broker.replica_fetcher import ReplicaFetcherManager
from gregor.broker.txn_verifier import TxnVerifier
from gregor.controller.admin import Admin, TopicSpec
from gregor.controller.local import LocalController
from gregor.controller.producer_ids import ProducerIdManager
from gregor.controller.quorum_controller import Listener
from gregor.coordinator.group.pending import Pending
from gregor.coordinator.runtime import GroupCoordinator
from gregor.coordinator.txn.runtime import TransactionCoordinator
from gregor.handlers import api_versions
from gregor.handlers.context import RequestContext
from gregor.handlers.produce import AcksZeroError
from gregor.handlers.registry import HANDLERS, NO_RESPONSE
from gregor.handlers.txn_markers import write_marker
from gregor.metadata import config_defs, meta_properties
from gregor.metadata.raft_store import MetadataLogError, RaftMetadataStore
from gregor.metadata.store import MetadataStore, TopicInfo
from gregor.protocol import api_keys, codec
from gregor.protocol.codegen import Data
from gregor.protocol.errors import KafkaError
from gregor.protocol.exceptions import CorruptFrameError
from gregor.protocol.headers import peek_request
from gregor.raft.storage_log import TOPIC as METADATA_TOPIC
from gregor.replication.partition import BrokerLiveness, ReplicaManager
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.runtime.client import NetworkClient
from gregor.runtime.connection import Connection, FrameError, Output, close_slices
from gregor.runtime.process import (
    halt_on_metadata_log_failure,
    serve_until_signalled,
    write_ready_file,
)
from gregor.runtime.purgatory_driver import PurgatoryDriver, future_of
from gregor.runtime.server import ConnectionLimits, Server, bind
from gregor.storage.cleaner import CleanerConfig
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.broker")
NEW_PARTITIONS_PER_STEP = 100
FORWARD_TIMEOUT_MS = 30_000
FORWARD_DEFAULT_TIMEOUT_MS = {api_keys.DESCRIBE_QUORUM: 5_000}  # requests with no timeout_ms


class BrokerServer:
    def __init__(self, config: BrokerConfig, ready_file: str | None = None) -> None:
        membership = config.membership()  # a bad combination of roles is refused before anything
        if not membership.is_broker:
            raise ValueError("a controller-only node runs as a ControllerServer")
        self.config = config
        self.static_config = config.values
        self.node_id = config.node_id
        self.ready_file = ready_file
        listen_host, listen_port = config.listener()
        self.listen_host, self.listen_port = listen_host, listen_port
        self.host, self.port = config.advertised()
        # Port 0: bound now, so the registration below names the port clients will use.
        self._listen_sock = bind(listen_host, listen_port) if listen_port == 0 else None
        if self._listen_sock is not None:
            self.listen_port = self._listen_sock.getsockname()[1]
            if self.port == 0:
                self.port = self.listen_port
        data_dirs = config.log_dirs
        for d in data_dirs:
            os.makedirs(d, exist_ok=True)
        legacy = MetadataStore.load(data_dirs[0])  # a data dir from before the KRaft log
        self.meta_properties = meta_properties.ensure(
            data_dirs,
            self.node_id,
            config.get_str("cluster.id"),
            legacy.cluster_id if legacy else None,
        )
        cluster_id = self.meta_properties[data_dirs[0]].cluster_id
        self.member: ClusterMember | None = None
        if not membership.networked:  # the only voter of its own quorum
            self.store = RaftMetadataStore.open(
                data_dirs[0],
                self.node_id,
                cluster_id,
                clock=self.now_ms,
                configs=self.static_config,
            )
            self.controller = LocalController(self.store, self.node_id, self.static_config)
            self.controller.start(
                [Listener("PLAINTEXT", self.host, self.port)],
                [
                    m.directory_id
                    for m in self.meta_properties.values()
                    if m.directory_id is not None
                ],
                config.get_str("broker.rack"),
                legacy,
                self.now_ms(),
            )
        else:
            self.store, self.controller, self.member = self._join_quorum(
                config, membership, cluster_id
            )
            if legacy is not None:
                raise MetadataLogError(
                    f"{legacy.path}: a pre-KRaft store cannot be migrated into a quorum of "
                    "several nodes; start this node alone (without controller.quorum.voters "
                    "or controller.quorum.bootstrap.servers) once to migrate it"
                )
        self.store.on_log_failure(halt_on_metadata_log_failure(data_dirs[0]))
        self.logs = LogManager(data_dirs, config_for=self.log_config_for)
        self.logs.roll_flusher = self._flush_after_roll
        self._unhosted: set[str] = set()  # topics apply_metadata is part way through
        self._apply_scheduled = False
        self.replicas = ReplicaManager(
            self.node_id,
            self.logs,
            liveness=self._liveness,
            local_broker_epoch=self._broker_epoch,
            replica_lag_time_max_ms=int(self.config_value("replica.lag.time.max.ms")),
        )
        # delayed produces, fetches and metadata writes, expired by the driver's timer
        self.purgatory = DelayedOperationPurgatory("broker")
        self.purgatory_driver = PurgatoryDriver(self.purgatory, self.now_ms)
        # A cluster node replicates: follower partitions fetch from their leaders, leaders send
        # their ISR changes to the active controller (replication/, replica_fetcher.py).
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr_sender: AlterPartitionSender | None = None
        if self.member is not None:
            self.fetchers = ReplicaFetcherManager(self)
            self.isr_sender = AlterPartitionSender(self, self.member)
            self.replicas.on_isr_update = self.isr_sender.submit
        self.admin = Admin(
            self.store,
            self.controller,
            self._active_broker_ids if self.member is not None else [self.node_id],
            self.static_config,
            self.node_id,
        )
        self.forwarder = Forwarder(self)
        if self.member is not None:  # topics made off the controller: a CreateTopics sent there
            self.admin.forward_create = self.forwarder.create_topic_later
        # a cluster node gets its producer-id blocks from the active controller
        self.producer_ids = ProducerIdManager(
            self.member if self.member is not None else self.controller
        )
        self.cleaner = CleanerThreads(self.logs, self._cleaner_config(), self.now_ms)
        self.groups = GroupCoordinator(
            self.node_id,
            self.store,
            self.replicas,
            self.admin,
            self.config_value,
            self.apply_metadata,
        )
        # requests to other brokers: transaction markers, and the produce path's checks with
        # transaction coordinators elsewhere
        self.links = (
            None
            if self.member is None
            else InterBroker(
                self.node_id,
                lambda: self.store.image,
                NetworkClient(client_id=f"broker-{self.node_id}"),
            )
        )
        self.markers = MarkerSender(
            self.node_id, lambda: self.store.image, self._write_marker_here, self.links
        )
        self.transactions = TransactionCoordinator(
            self.node_id,
            self.store,
            self.replicas,
            self.admin,
            self.config_value,
            self.apply_metadata,
            self.producer_ids.next_id,
            self._write_txn_markers,
        )
        self.txn_verifier = TxnVerifier(self.node_id, self.transactions, self.links)
        self.server: Server | None = None
        self._timers: list[asyncio.Task[None]] = []
        self._cleaner_reconfigured: asyncio.Future[bool] | None = None

    def _join_quorum(
        self, config: BrokerConfig, membership: Membership, cluster_id: str
    ) -> tuple[RaftMetadataStore, LocalController, ClusterMember]:
        """A combined node votes; a broker-only node observes the quorum (config.py has refused
        what cannot run). Either forwards admin writes while it is not the active controller."""
        voters = list(membership.voters or ())  # a broker-only node may know none
        store, raft_log, quorum_state, raft_config = RaftMetadataStore.open_networked(
            config.log_dirs[0], self.node_id, cluster_id, voters, configs=self.static_config
        )
        if membership.is_controller:
            controller = networked_controller(store, self.node_id, config)
        else:  # broker-only: never the active controller (its topics are made there)
            controller = LocalController(store, self.node_id, self.static_config)
        self.store, self.controller = store, controller
        member = ClusterMember(
            self.node_id,
            store,
            controller,
            membership,
            raft_log,
            quorum_state,
            raft_config,
            clock=self.now_ms,
            broker=self,
        )
        return store, controller, member

    def _active_broker_ids(self) -> list[int]:
        """The brokers new partitions may be placed on: registered and unfenced."""
        return sorted(b for b, reg in self.store.image.brokers.items() if not reg.fenced)

    def cluster_brokers(self) -> list[tuple[int, str, int, str | None]]:
        if self.member is None:
            return [(self.node_id, self.host, self.port, self.config.get_str("broker.rack"))]
        out = []
        for broker_id, reg in sorted(self.store.image.brokers.items()):
            if reg.fenced or not reg.listeners:
                continue
            endpoint = next((e for e in reg.listeners if e.name == "PLAINTEXT"), reg.listeners[0])
            out.append((broker_id, endpoint.host, endpoint.port, reg.rack))
        return out

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker serves other brokers (its PLAINTEXT listener, as registered)."""
        reg = self.store.image.brokers.get(broker_id)
        if reg is None or not reg.listeners:
            return None
        wanted = self.config.get_str("inter.broker.listener.name") or "PLAINTEXT"
        endpoint = next((e for e in reg.listeners if e.name == wanted), reg.listeners[0])
        return endpoint.host, endpoint.port

    def _liveness(self, broker_id: int) -> BrokerLiveness:
        reg = self.store.image.brokers.get(broker_id)
        if reg is None:
            return BrokerLiveness(-1, False)
        return BrokerLiveness(reg.epoch, not reg.fenced and not reg.in_controlled_shutdown)

    def _broker_epoch(self) -> int:
        if self.member is not None:
            return self.member.broker_epoch
        reg = self.store.image.brokers.get(self.node_id)
        return -1 if reg is None else reg.epoch

    def controller_id(self) -> int:
        """What Metadata and DescribeCluster name as the controller. In a quorum a live broker,
        as Kafka's KRaft brokers answer (clients cannot reach the controller listener; any
        broker forwards admin writes to the active controller): this one when it is listed,
        since the client just reached it, else a random one. Kafka picks at random each time;
        a stable answer keeps an admin client from chasing a different broker on every
        metadata refresh, some of which another node's lagging view may not list yet."""
        if self.member is None:
            return self.node_id
        alive = [b[0] for b in self.cluster_brokers()]
        if self.node_id in alive:
            return self.node_id
        return random.choice(alive) if alive else -1

    # -- services handlers use ----------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def config_value(self, key: str) -> Any:
        d = config_defs.BROKER_CONFIGS[key]
        raw = self.store.dynamic(self.node_id).get(key, self.static_config.get(key, d.default))
        return d.parse(raw)

    def _cleaner_config(self) -> CleanerConfig:
        value = self.config_value
        return CleanerConfig(
            enable=bool(value("log.cleaner.enable")),
            threads=int(value("log.cleaner.threads")),
            dedupe_buffer_size=int(value("log.cleaner.dedupe.buffer.size")),
            io_buffer_size=int(value("log.cleaner.io.buffer.size")),
            io_buffer_load_factor=float(value("log.cleaner.io.buffer.load.factor")),
            io_max_bytes_per_second=float(value("log.cleaner.io.max.bytes.per.second")),
            backoff_ms=int(value("log.cleaner.backoff.ms")),
            in_process=bool(value("log.cleaner.worker.process")),
        )

    def _connection_limits(self) -> ConnectionLimits:
        overrides = str(self.config_value("max.connections.per.ip.overrides") or "")
        return ConnectionLimits(
            int(self.config_value("max.connections")),
            int(self.config_value("max.connections.per.ip")),
            config_defs.parse_connections_per_ip_overrides(overrides),
        )

    def log_config_for(self, topic: str) -> LogConfig:
        info = self.store.topics.get(topic)
        return config_defs.log_config(
            info.configs if info else {}, self.static_config, self.store.dynamic(self.node_id)
        )

    def _min_isr(self, info: TopicInfo) -> int:
        resolved = config_defs.resolve_topic_config(
            "min.insync.replicas",
            info.configs,
            self.static_config,
            self.store.dynamic(self.node_id),
        )
        return int(resolved.value or 1)

    def apply_metadata(self) -> None:
        """Host exactly the partitions the metadata names, with their current configs. Configs
        are resolved again only for the topics changed since the last call (every topic the
        first time, and after a dynamic broker config changed): resolving them is what costs.
        While serving, at most NEW_PARTITIONS_PER_STEP partitions are created per call (about
        1 ms each: their files, then becoming leader); the rest follow on the next turns of the
        loop, so a topic of 10,000 partitions never holds every other request for seconds."""
        if not self.store.caught_up or self.server is None and self.member is not None:
            return  # networked: not before the committed prefix is known and the logs are open
        topics = self.store.topics
        changed = self.store.take_changes()
        if changed is not None:
            changed |= self._unhosted  # topics a previous call had no budget left for
        self._unhosted = set()
        self._apply_scheduled = False
        todo = topics.values() if changed is None else [topics[n] for n in changed if n in topics]
        image = self.store.image
        now = self.now_ms()
        budget = NEW_PARTITIONS_PER_STEP if self.server is not None else None
        for info in todo:
            if budget is not None and budget <= 0:
                self._unhosted.add(info.name)
                continue
            left = self._host_topic(info, image, now, budget)
            if left is not None and left < 0:
                self._unhosted.add(info.name)
            budget = left
        if self._unhosted and not self._apply_scheduled:
            self._apply_scheduled = True
            asyncio.get_running_loop().call_soon(self.apply_metadata)
        wanted = {
            (info.name, index)
            for info in topics.values()
            for index, replicas in enumerate(info.replicas)
            if self.node_id in replicas
        }
        for tp in list(self.replicas.partitions):
            if tp not in wanted:
                self.replicas.remove(*tp)
        for tp, _log in self.logs.partitions():
            if tp not in wanted:
                log.warning("deleting %s-%d: no topic in the metadata names it", *tp)
                self.logs.delete(*tp)
        changes = self.replicas.take_follower_changes()
        if self.fetchers is not None and changes:
            self.fetchers.apply(changes)
        self.groups.on_metadata(self.now_ms())
        self.transactions.on_metadata(self.now_ms())
        if changed is None and self.server is not None:  # dynamic broker configs may have changed
            self.server.reconfigure(self._connection_limits())
            self._cleaner_reconfigured = asyncio.ensure_future(
                self.cleaner.reconfigure(self._cleaner_config())
            )

    def _host_topic(self, info: TopicInfo, image: Any, now: int, budget: int | None) -> int | None:
        """Apply one topic's partitions hosted here; the budget of new partitions left (None:
        no limit), negative when it ran out before the last of them."""
        topic_image = image.topic(info.name)
        if topic_image is None:
            return budget
        cfg = self.log_config_for(info.name)
        min_isr = self._min_isr(info)
        for index, replicas in enumerate(info.replicas):
            reg = topic_image.partitions.get(index)
            if self.node_id not in replicas or reg is None:
                continue
            if self.replicas.get(info.name, index) is None and budget is not None:
                if budget <= 0:
                    return -1
                budget -= 1
            try:
                self.replicas.apply(info.name, index, info.topic_id, reg, cfg, min_isr, now)
            except KafkaError as exc:  # its log dir failed (said once, by the log manager)
                log.debug("cannot host %s-%d: %s", info.name, index, exc)
        return budget

    def maybe_auto_create(self, topic: str) -> TopicInfo | None:
        if not self.config_value("auto.create.topics.enable") or topic == METADATA_TOPIC:
            return None
        # Off the active controller of a quorum this raises LEADER_NOT_AVAILABLE once the
        # creation is sent to the controller (forwarding.py); on it, the commit is not awaited:
        # the client asks again and finds the topic.
        info = self.admin.create_topic(TopicSpec(topic))
        log.info("auto-created topic %s with %d partitions", topic, info.partitions)
        self.apply_metadata()
        return info

    # -- requests -----------------------------------------------------------------------------

    def dispatch(
        self, conn: Connection, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        try:
            key, version, correlation_id = peek_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed request: {exc}") from None
        entry = api_keys.BY_KEY.get(key)
        if key not in HANDLERS or entry is None:
            raise FrameError(f"request for API key {key}, which this broker does not serve")
        if not entry.supports(version):
            if key == api_keys.API_VERSIONS:
                return codec.encode_response(key, 0, correlation_id, api_versions.response(35))
            raise FrameError(
                f"{entry.name} v{version} is not supported (versions {entry.min_version}-"
                f"{entry.max_version}): UNSUPPORTED_VERSION"
            )
        try:
            header, request = codec.decode_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed {entry.name} v{version} request: {exc}") from None
        ctx = RequestContext(self, header, conn.peer, conn.attributes)  # type: ignore[arg-type]
        if self.forwarder.wanted(key):
            return self._forward(key, version, correlation_id, bytes(frame), ctx, request)
        try:
            result = HANDLERS[key](ctx, request)
        except AcksZeroError as exc:
            raise FrameError(f"acks=0 produce failed: {exc}") from None
        if result is NO_RESPONSE:
            return None
        if isinstance(result, Pending) and result.done:
            result = result.value
        if isinstance(result, Data):
            return codec.encode_response(key, version, correlation_id, result)
        return self._finish(key, version, correlation_id, result)  # a request that waits

    def _finish(
        self, key: int, version: int, correlation_id: int, pending: Pending
    ) -> Awaitable[Output]:
        """The response once `pending` completes; if the connection closed first, its files
        are closed instead of sent."""

        def encode(body: Any) -> Output:
            return codec.encode_response(key, version, correlation_id, body)

        return future_of(pending, encode, close_slices)

    async def _forward(
        self,
        key: int,
        version: int,
        correlation_id: int,
        frame: bytes,
        ctx: RequestContext,
        request: Any,
    ) -> Output:
        """A metadata write off the active controller: the controller's answer, forwarded; if
        none comes in time, this node's own (NOT_CONTROLLER for each item)."""
        timeout_ms = int(
            getattr(request, "timeout_ms", 0)
            or FORWARD_DEFAULT_TIMEOUT_MS.get(key, FORWARD_TIMEOUT_MS)
        )
        answer = await self.forwarder.forward(
            frame, ctx.peer, min(max(timeout_ms, 1000), FORWARD_TIMEOUT_MS)
        )
        if answer is not None:
            return answer
        result = HANDLERS[key](ctx, request)
        body: Any = await future_of(result) if isinstance(result, Pending) else result
        return codec.encode_response(key, version, correlation_id, body)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        codec.compile_all()
        self.purgatory_driver.start()
        self.logs.call_soon_on_owner = asyncio.get_running_loop().call_soon_threadsafe
        self.logs.startup()
        self.apply_metadata()
        self.server = Server(
            self.dispatch,
            host=self.listen_host,
            port=self.listen_port,
            sock=self._listen_sock,
            max_request_bytes=int(self.config_value("socket.request.max.bytes")),
            max_queued_requests=int(self.config_value("queued.max.requests")),
            max_queued_request_bytes=int(self.config_value("queued.max.request.bytes")),
            max_idle_ms=int(self.config_value("connections.max.idle.ms")),
            limits=self._connection_limits(),
        )
        await self.server.start()
        if self.port == 0 or self.listen_port == 0:
            self.port = self.server.port
        if self.member is not None:
            self.store.on_replayed = self.apply_metadata
            await self.member.start()
            if self.isr_sender is not None:
                self.isr_sender.start()
            self.apply_metadata()
            # Kafka's isr-expiration task: every replica.lag.time.max.ms / 2.
            lag_s = int(self.config_value("replica.lag.time.max.ms")) / 1000.0
            self._timers.append(
                asyncio.ensure_future(
                    self._every(lag_s / 2, lambda: self.replicas.maybe_shrink_isr(self.now_ms()))
                )
            )
        self._timers += [
            asyncio.ensure_future(self._every(1.0, self._flush_and_purge)),
            asyncio.ensure_future(
                self._every(
                    int(self.config_value("log.flush.offset.checkpoint.interval.ms")) / 1000.0,
                    self._checkpoint_in_background,
                )
            ),
            asyncio.ensure_future(
                self._every(
                    int(self.config_value("log.retention.check.interval.ms")) / 1000.0,
                    lambda: self.logs.enforce_retention(self.now_ms()),
                )
            ),
        ]
        # Producers idle past producer.id.expiration.ms are forgotten: at once (state loaded
        # from snapshots may be old), then every check interval (producer_state.py).
        self._expire_producers()
        check_s = int(self.config_value("producer.id.expiration.check.interval.ms")) / 1000.0
        self._timers.append(asyncio.ensure_future(self._every(check_s, self._expire_producers)))
        self.cleaner.start()  # log compaction: cleaner_thread.py
        self._timers.append(asyncio.ensure_future(self._drive(self.groups, "group")))
        self._timers.append(asyncio.ensure_future(self._drive(self.transactions, "transaction")))
        self._timers.append(asyncio.ensure_future(self._drive(self.store, "metadata log")))
        log.info(
            "gregor broker %d ready on %s:%d (cluster %s, data in %s)",
            self.node_id,
            self.host,
            self.port,
            self.cluster_id,
            ", ".join(self.logs.log_dirs),
        )
        if self.ready_file:
            write_ready_file(self.ready_file, self.host, self.port)

    def _expire_producers(self) -> None:
        expiration_ms = int(self.config_value("producer.id.expiration.ms"))
        n = self.logs.remove_expired_producers(self.now_ms(), expiration_ms)
        if n:
            log.info(
                "forgot %d partition producer state(s) idle for %d ms or more", n, expiration_ms
            )

    def _flush_after_roll(self, log_: Log, up_to: int) -> None:
        """fsync a rolled segment on a worker thread, as Kafka does after a roll, so the event
        loop never waits for the disk; the recovery point moves when the fsync is done."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet (opening logs): flush inline
            log_.flush(up_to)
            return
        fds = [os.dup(seg.fd) for seg in log_.segments_to_flush(up_to)]
        fds += log_.producer_state.pending_sync_fds()  # the roll's producer snapshot
        truncations = log_.truncations

        def fsync_all() -> None:
            for fd in fds:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

        def done(fut: asyncio.Future[None]) -> None:
            exc = fut.exception()
            if exc is None:
                log_.mark_flushed(up_to, truncations)
            elif isinstance(exc, OSError):
                log_.fail(exc, "flushing a rolled segment")
            else:
                log.error("background flush of %s failed: %s", log_, exc)

        loop.run_in_executor(None, fsync_all).add_done_callback(done)

    def _checkpoint_in_background(self) -> None:
        """Take the offsets on the loop; write and fsync the three files on a worker thread."""
        snapshot = self.logs.checkpoint_snapshot()
        asyncio.get_running_loop().run_in_executor(None, self.logs.write_checkpoints, snapshot)

    def _flush_and_purge(self) -> None:
        now = self.now_ms()
        self.logs.flush_due(now)
        self.logs.purge_deleted(now)

    async def _drive(
        self, coordinator: GroupCoordinator | TransactionCoordinator | RaftMetadataStore, what: str
    ) -> None:
        """A coordinator's (or the metadata log's Raft node's) timers and loading: poll at its
        next deadline, or sooner when an operation brings one forward (`wakeup`); at least every
        second, so dynamic configs are picked up."""
        wake = asyncio.Event()
        coordinator.wakeup = wake.set
        while True:
            try:
                deadline = coordinator.poll(self.now_ms())
            except Exception:
                log.exception("%s coordinator poll failed", what)
                deadline = None
            delay_ms = 1000 if deadline is None else min(1000, max(0, deadline - self.now_ms()))
            wake.clear()
            if delay_ms == 0:
                await asyncio.sleep(0)
                continue
            try:
                await asyncio.wait_for(wake.wait(), delay_ms / 1000.0)
            except TimeoutError:
                pass

    def _write_txn_markers(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: list[tuple[str, int]],
        done: Callable[[dict[tuple[str, int], int]], None],
    ) -> None:
        """The transaction coordinator's marker writer: partitions led here are written in
        place, the others sent to their leaders as WriteTxnMarkers (marker_sender.py); `done`
        gets an error code per partition, at once when all were written here."""
        self.markers.write_markers(
            transactional_id,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            committed,
            partitions,
            done,
        )

    def _write_marker_here(
        self,
        topic: str,
        index: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
    ) -> int:
        """A marker to a partition hosted here (one in `__consumer_offsets` also settles the
        transaction's offset commits in that partition)."""
        return write_marker(
            self.replicas,
            self.groups,
            self.now_ms(),
            topic,
            index,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            committed,
        )

    @staticmethod
    async def _every(seconds: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(max(seconds, 0.01))
            try:
                fn()
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

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
        self.purgatory_driver.stop()
        await self.forwarder.close()
        if self.links is not None:
            await self.links.close()
        if self.member is not None:
            await self.member.stop()
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.isr_sender is not None:
            await self.isr_sender.stop()
        await self.cleaner.stop()  # before the logs close: no swap may reach a closed log
        self.logs.shutdown()
        self.store.close()
        log.info("shut down cleanly")

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly."""
        await serve_until_signalled(self.start, self.stop)
