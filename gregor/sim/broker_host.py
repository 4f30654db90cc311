"""A broker of the data-plane simulation: the real ReplicaManager over a real LogManager (files
in the run's directory), and the broker's own sans-I/O cores, built as broker/cores.py builds
them and driven over the simulated network and clock (core_driver.py):

    node/lifecycle.BrokerLifecycleCore        registration (a new incarnation id each start),
                                              heartbeats, producer-id blocks
    replication/isr_sender.IsrChangeSender    the leaders' ISR changes, as AlterPartition
    replication/fetcher_session.ReplicaFetchers  the followers' Fetches, one per leader
    replication/hosting.PartitionHosting      which partitions are hosted, as what, once
                                              registered and caught up to the registration
    replication/purgatory                     delayed produce (handlers/delayed_produce.py)
                                              and a follower's Fetch parked until its
                                              partitions change or max_wait_ms passes
    replication/fetch_sessions                the followers' incremental fetch sessions
                                              (KIP-227), lost with the process

What is the simulation's own: the metadata is read from a controller every METADATA_MS (or at
once while more is there) and replayed into the broker's image (metadata_view.py), caught up
once it has read up to what the active controller had committed; and every
`flush_interval_ms` the logs are flushed and checkpointed: the OS writeback; only flushed bytes
survive a crash (files.py). Every decision is the cores'; this module only moves requests.
"""

from __future__ import annotations

import os
import random
import uuid
from typing import Any

from gregor.handlers.delayed_produce import AwaitingWrite, DelayedProduce
from gregor.metadata.cluster import broker_endpoint
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.image import Endpoint, MetadataImage
from gregor.node.lifecycle import BrokerLifecycleCore, LifecycleConfig
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import FetchRequest, FetchResponse, ProduceResponse
from gregor.protocol.outbound import Outbound
from gregor.replication.fetch_sessions import FetchContext, FetchSessionCache
from gregor.replication.fetcher_session import ReplicaFetchers
from gregor.replication.follower import FetcherConfig, FollowerFetcher
from gregor.replication.hosting import PartitionHosting
from gregor.replication.isr_sender import IsrChangeSender
from gregor.replication.partition import BrokerLiveness, Partition, ReplicaManager
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory
from gregor.sim.coordinator_host import Coordinators
from gregor.sim.core_driver import NoAnswer, OnAnswer, SimCoreDriver, SimPurgatoryDriver
from gregor.sim.files import FileDisk
from gregor.sim.metadata_view import MetadataView
from gregor.sim.rpc import (
    ConsumerFetch,
    ConsumerRecords,
    Metadata,
    MetadataEntries,
    MetadataFetch,
    MetadataResult,
    NotController,
    Produce,
    ProduceResult,
    SimContext,
    SimHost,
    WriteTxnMarker,
)
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

METADATA_MS = 200
HEARTBEAT_MS = 500  # broker.heartbeat.interval.ms
DIR_FAILURE_TIMEOUT_MS = 30_000  # log.dir.failure.timeout.ms (no log dir fails here)
CONTROLLER_TIMEOUT_MS = 1000
FETCH_TIMEOUT_MS = 3000  # replica.fetch.wait.max.ms + replica.socket.timeout.ms
PRODUCE_TIMEOUT_MS = 3000
CONSUMER_MAX_BYTES = 16 * 1024
PORT = 9092


class BrokerHost(SimHost):
    fetcher_class: type[FollowerFetcher] = FollowerFetcher
    replica_manager_class: type[ReplicaManager] = ReplicaManager

    def __init__(
        self, sim: SimContext, node_id: int, root: str, log_config: LogConfig, lag_ms: int
    ) -> None:
        super().__init__(sim, node_id)
        self.root = root
        self.log_config = log_config
        self.lag_ms = lag_ms
        self.disk = FileDisk(root)
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.slow_disk = False
        self.drivers: dict[str, SimCoreDriver | SimPurgatoryDriver] = {}

    # -- life --------------------------------------------------------------------------------

    def boot(self) -> None:
        self.incarnation_id = uuid.UUID(int=self.sim.rng.getrandbits(128))
        self.metadata = MetadataView()
        self.controller = self.sim.controller_ids[0]
        os.makedirs(self.root, exist_ok=True)
        logs = LogManager([self.root], self.log_config, clock=self.clock)
        logs.roll_flusher = self._roll_flush
        logs.truncation_listeners.append(lambda tp, _base: self.disk.on_truncation(logs, *tp))
        logs.startup()  # recovers what the last crash left
        self.logs = logs
        self.replicas = replicas = self.replica_manager_class(
            self.node_id,
            logs,
            liveness=self._liveness,
            local_broker_epoch=lambda: self.broker_epoch,
            replica_lag_time_max_ms=self.lag_ms,
        )
        self._build_cores(logs, replicas)
        self.coordinators = self.coordinators_class(self) if self.sim.config.coordinators else None
        if self.coordinators is not None:
            coordinators = self.coordinators
            self.hosting.on_applied.append(lambda _now, _changed: coordinators.on_metadata())
        self.timer_metadata()
        self.sim.timer(self, self.sim.now + self.lag_ms // 2, "shrink")
        self.sim.timer(self, self.sim.now + self.sim.flush_interval_ms, "flush")

    def _build_cores(self, logs: LogManager, replicas: ReplicaManager) -> None:
        """The broker's cores, wired as broker/cores.py wires them, each with its driver."""
        node_id, metadata = self.node_id, self.metadata
        self.lifecycle = BrokerLifecycleCore(
            LifecycleConfig(node_id, HEARTBEAT_MS, DIR_FAILURE_TIMEOUT_MS, incarnation_id=self.incarnation_id),
            metadata, controller_id=lambda: self.controller,
            advertised=lambda: [Endpoint("PLAINTEXT", f"broker-{node_id}", PORT, 0)],
            offline_dirs=dict, on_fatal=self._fatal,
        )  # fmt: skip
        isr_sender = IsrChangeSender(node_id, lambda: self.broker_epoch)
        replicas.on_isr_update = isr_sender.submit
        config = FetcherConfig(replica_id=node_id)
        fetchers = ReplicaFetchers(
            config, partition_of=replicas.get, broker_epoch=lambda: self.broker_epoch,
            endpoint_of=lambda leader: broker_endpoint(metadata.image, leader),
            socket_timeout_ms=FETCH_TIMEOUT_MS - config.max_wait_ms, fetcher=self.fetcher_class,
            stamp=replicas.stamp,
        )  # fmt: skip
        static = {"log.segment.bytes": str(self.log_config.segment_bytes)}
        self.hosting = PartitionHosting(
            node_id,
            metadata,
            replicas,
            logs,
            BrokerConfigView(metadata, node_id, static),
            self.clock,
        )
        self.hosting.on_followers = fetchers.apply
        if self.sim.config.apply_after_registration:
            self.hosting.registered = lambda: 0 <= self.broker_epoch <= metadata.applied
        self.purgatory = DelayedOperationPurgatory(f"broker-{node_id}")
        # ids drawn from this incarnation's own stream (the run's stream is left as it was)
        self.fetch_sessions = FetchSessionCache(rng=random.Random(self.incarnation_id.int))
        self.drivers = {
            "lifecycle": SimCoreDriver(self, self.lifecycle, "lifecycle", self._send),
            "alter-partition": SimCoreDriver(self, isr_sender, "alter-partition", self._send),
            "replica-fetchers": SimCoreDriver(self, fetchers, "replica-fetchers", self._send),
            "purgatory": SimPurgatoryDriver(self, self.purgatory),
        }
        for driver in self.drivers.values():
            if isinstance(driver, SimCoreDriver):
                driver.start()

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    @property
    def image(self) -> MetadataImage:
        """The metadata as this broker replayed it."""
        return self.metadata.image

    def _fatal(self, reason: str) -> None:
        raise AssertionError(f"broker {self.node_id} shut itself down: {reason}")

    def crash(self, rng: random.Random, torn_rate: float, power_loss: bool) -> int:
        """Stop without a clean shutdown; on a power loss, lose what the disk did not keep."""
        self.close_files()
        self.replicas = None
        self.drivers = {}
        return self.disk.crash(rng, torn_rate) if power_loss else 0

    def close_files(self) -> None:
        """Close the logs' fds and maps (a process's exit would): raw fds are not closed by
        the garbage collector, and a soak of thousands of runs would run out of them."""
        if self.logs is not None:
            for _tp, log_ in self.logs.partitions():
                log_.close_handles()
        self.logs = None

    def _roll_flush(self, log_: Log, offset: int) -> None:
        Log.flush(log_, offset)
        assert self.logs is not None
        self.disk.mark_durable(self.logs)

    def _liveness(self, broker_id: int) -> BrokerLiveness:
        reg = self.image.brokers.get(broker_id)
        if reg is None:
            return BrokerLiveness(-1, False)
        return BrokerLiveness(reg.epoch, not reg.fenced and not reg.in_controlled_shutdown)

    def timer_flush(self) -> None:
        self.sim.timer(self, self.sim.now + self.sim.flush_interval_ms, "flush")
        if self.slow_disk or self.logs is None:
            return  # a slow disk's writeback falls behind
        for _tp, log_ in self.logs.partitions():
            log_.flush()
        self.disk.mark_durable(self.logs)
        self.logs.checkpoint()

    def timer_shrink(self) -> None:
        self.sim.timer(self, self.sim.now + self.lag_ms // 2, "shrink")
        if self.replicas is not None:
            self.replicas.maybe_shrink_isr(self.now_ms())

    # -- the cores' timers and requests ------------------------------------------------------

    def sim_time_of(self, at_ms: int) -> int:
        return max(self.sim.now, self.sim.now + at_ms - self.now_ms())

    def schedule_core(self, at: int, name: str, token: int) -> None:
        self.sim.timer(self, at, "core", name, token)

    def timer_core(self, name: str, token: int) -> None:
        self.drivers[name].fire(token)

    def live_timer(self, name: str, args: tuple[Any, ...]) -> bool:
        """A superseded core timer is no event (its driver set a sooner one since)."""
        if name != "core":
            return True
        driver = self.drivers.get(args[0])
        return driver is not None and driver.timer.live(args[1])

    def _send(self, out: Outbound, on_answer: OnAnswer) -> None:
        """A core's request; NOT_CONTROLLER reaches it as no answer (its channel's failure)."""
        if out.destination is None:

            def answered(response: Any) -> None:
                on_answer(
                    NoAnswer("NOT_CONTROLLER") if isinstance(response, NotController) else response
                )

            self._to_controller(out.body, answered, out.timeout_ms or CONTROLLER_TIMEOUT_MS)
        else:
            self.request(out.destination, out.body, on_answer, out.timeout_ms or FETCH_TIMEOUT_MS)

    def _to_controller(
        self, body: Any, on_answer: OnAnswer, timeout_ms: int = CONTROLLER_TIMEOUT_MS
    ) -> None:
        """To the active controller, as the broker's controller channel: no answer (None) or
        NOT_CONTROLLER moves it on (to the leader named, else the next controller)."""

        def answered(response: Any) -> None:
            if response is None or isinstance(response, NotController):
                self._controller_moved(None if response is None else response.leader_id)
            on_answer(response)

        self.request(self.controller, body, answered, timeout_ms)

    def _controller_moved(self, hint: int | None) -> None:
        ids = self.sim.controller_ids
        self.controller = (
            hint if hint is not None else ids[(ids.index(self.controller) + 1) % len(ids)]
        )
        self.lifecycle.on_leader_change()

    # -- metadata ----------------------------------------------------------------------------

    def timer_metadata(self) -> None:
        incarnation = self.incarnation
        self.request(
            self.controller,
            MetadataFetch(self.metadata.next_offset),
            lambda response: self._metadata(incarnation, response),
            CONTROLLER_TIMEOUT_MS,
        )

    def _metadata(self, incarnation: int, response: Any) -> None:
        if incarnation != self.incarnation:
            return
        more = False
        if response is None:
            self._controller_moved(None)
        elif isinstance(response, MetadataEntries):
            view = self.metadata
            entries = [e for e in response.entries if e[1] >= view.next_offset]
            if entries:
                view.replay(entries)
            more = len(response.entries) > 0 and view.next_offset < response.high_watermark
            just_caught_up = not view.caught_up and not more and response.from_leader
            if just_caught_up:
                view.caught_up = True
                self.sim.record("caught up", self.node_id, view.next_offset)
            elif not view.caught_up and not response.from_leader:
                self._controller_moved(None)  # only the leader knows what is committed
            if entries or just_caught_up:
                self.hosting.apply()
        self.sim.timer(self, self.sim.now + (1 if more else METADATA_MS), "metadata")

    def maybe_apply_metadata(self) -> None:
        """Take up what the metadata asks of this broker now (the coordinators call it once a
        topic they need exists)."""
        self.hosting.apply()

    # -- requests ----------------------------------------------------------------------------

    def on_request(self, src: int, correlation_id: int, body: Any) -> None:
        if self.replicas is None:
            return
        if self.coordinators is not None and self.coordinators.on_request(
            src, correlation_id, body
        ):
            return
        if isinstance(body, FetchRequest):
            self._serve_follower(src, correlation_id, body)
        elif isinstance(body, Produce):
            self._produce(src, correlation_id, body)
        elif isinstance(body, ConsumerFetch):
            self._consumer_fetch(src, correlation_id, body)
        elif isinstance(body, WriteTxnMarker):
            self._write_marker(src, correlation_id, body)
        elif isinstance(body, Metadata):
            leaders = {
                (t.name, i): reg.leader
                for t in self.image.topics_by_id.values()
                for i, reg in t.partitions.items()
            }
            self.answer(src, correlation_id, MetadataResult(leaders))
        else:
            raise AssertionError(f"unknown request {body!r}")

    def _serve_follower(self, src: int, corr: int, request: Any) -> None:
        """Answer a follower's Fetch in its fetch session (as handlers/fetch.py: every
        partition of the session read, the changed answered), or park it in the purgatory
        while it finds nothing new."""
        forgotten = [(f.topic_id, i) for f in request.forgotten_topics_data for i in f.partitions]
        context = self.fetch_sessions.new_context(
            request.session_id, request.session_epoch, True, True, request.topics, forgotten,
            self.now_ms(),
        )  # fmt: skip
        if context.error:
            self.answer(src, corr, FetchResponse(error_code=context.error, responses=[]))
            return
        read = SessionRead(request.replica_state, context)
        response, found, touched = self._follower_read(read, first=True)
        if found:
            self.answer(src, corr, in_session(context, response, self.now_ms()))
            return
        deadline = self.now_ms() + request.max_wait_ms
        self.purgatory.watch(FollowerFetchWait(self, src, corr, read, deadline), touched)

    def _follower_read(self, request: Any, first: bool) -> tuple[Any, bool, list[Partition]]:
        """The answer to a follower's Fetch now, whether it says anything (records, an error,
        a divergence), and the partitions it reads."""
        replica = request.replica_state
        now = self.now_ms()
        topics = []
        found = False
        touched: list[Partition] = []
        topics_by_id, replicas = self.image.topics_by_id, self.replicas
        for t in request.topics:
            parts = []
            topic = topics_by_id.get(t.topic_id)
            for fp in t.partitions:
                pd = FetchResponse.PartitionData(partition_index=fp.partition, records=b"")
                p = (
                    None
                    if topic is None or replicas is None
                    else replicas.get(topic.name, fp.partition)
                )
                if p is None:
                    pd.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
                    found = True
                else:
                    touched.append(p)
                    found |= self._read_for_follower(p, replica, fp, pd, now, first)
                parts.append(pd)
            topics.append(
                FetchResponse.FetchableTopicResponse(topic_id=t.topic_id, partitions=parts)
            )
        return FetchResponse(error_code=errors.NONE, responses=topics), found, touched

    def _read_for_follower(
        self, p: Partition, replica: Any, fp: Any, pd: Any, now: int, first: bool
    ) -> bool:
        """Fill `pd` from `p`; True if it has something to say (records, an error, a
        divergence)."""
        lg = p.log
        pd.high_watermark, pd.log_start_offset = lg.high_watermark, lg.log_start_offset
        try:
            read = p.fetch_for_follower(
                replica.replica_id, replica.replica_epoch, fp.fetch_offset, fp.last_fetched_epoch,
                fp.current_leader_epoch, fp.log_start_offset, fp.partition_max_bytes, True, now,
                update_fetch_state=first,
            )  # fmt: skip
        except KafkaError as exc:
            pd.error_code = exc.code
            return True
        pd.high_watermark, pd.log_start_offset = read.high_watermark, read.log_start_offset
        if read.diverging_epoch is not None:
            pd.diverging_epoch = FetchResponse.EpochEndOffset(
                epoch=read.diverging_epoch[0], end_offset=read.diverging_epoch[1]
            )
            return True
        if read.records is not None:
            pd.records = bytearray(read.records.read())
            return len(pd.records) > 0
        return False  # nothing new: park (as Kafka, a move of the HW alone answers nothing)

    def _produce(self, src: int, corr: int, body: Produce) -> None:
        rm = self.replicas
        assert rm is not None
        try:
            p = rm.leader(body.topic, body.partition)
            info = p.append_as_leader(bytearray(body.records), body.acks, self.now_ms())
        except KafkaError as exc:
            self.answer(src, corr, ProduceResult(exc.code))
            return
        self._after_leader_append(src, corr, p, info.first_offset, info.last_offset + 1)

    def _after_leader_append(self, src: int, corr: int, p: Partition, base: int, end: int) -> None:
        """Checked as a leader's write, then answered once acks=all allows (or at the timeout),
        as the broker's delayed produce (handlers/delayed_produce.py) answers."""
        epoch = p.leader_epoch
        self.sim.checker.on_leader_append(self, p, epoch)
        response = ProduceResponse.PartitionProduceResponse(
            index=p.index, error_code=errors.NONE, base_offset=base
        )
        waiting = AwaitingWrite(response, p, end, epoch)
        op = DelayedProduce(response, [waiting], PRODUCE_TIMEOUT_MS, self.now_ms())
        op.answer.add_done_callback(
            lambda r: self.answer(src, corr, ProduceResult(r.error_code, r.base_offset))
        )
        self.purgatory.try_complete_else_watch(op, [p])

    def _write_marker(self, src: int, corr: int, body: WriteTxnMarker) -> None:
        """WriteTxnMarkers for one partition, answered once the marker is replicated."""
        rm = self.replicas
        assert rm is not None
        try:
            p = rm.leader(body.topic, body.partition)
            info = p.write_txn_marker(
                body.producer_id, body.producer_epoch, 0, body.committed, self.now_ms()
            )
        except KafkaError as exc:
            self.answer(src, corr, ProduceResult(exc.code))
            return
        self._after_leader_append(src, corr, p, info.first_offset, info.last_offset + 1)

    def _consumer_fetch(self, src: int, corr: int, body: ConsumerFetch) -> None:
        rm = self.replicas
        assert rm is not None
        aborted: tuple[tuple[int, int], ...] = ()
        try:
            p = rm.leader(body.topic, body.partition)
            lso = p.log.last_stable_offset
            data = p.read(
                body.offset,
                CONSUMER_MAX_BYTES,
                committed_only=True,
                read_committed=body.read_committed,
            )
            if body.read_committed and data is not None:
                found = p.log.collect_aborted_transactions(body.offset, lso)
                aborted = tuple((a.producer_id, a.first_offset) for a in found)
        except KafkaError as exc:
            self.answer(src, corr, ConsumerRecords(exc.code))
            return
        records = data.read() if data is not None else b""
        hw = p.log.high_watermark
        self.answer(src, corr, ConsumerRecords(errors.NONE, records, hw, aborted))

    # -- the coordinators (coordinator_host.py) ----------------------------------------------

    coordinators_class: type[Coordinators] = Coordinators
    coordinators: Coordinators | None = None

    def timer_coordinators(self, token: int) -> None:
        if self.coordinators is not None:
            self.coordinators.poll(token)


class SessionRead:
    """What a follower's Fetch reads: the partitions of its session context."""

    __slots__ = ("replica_state", "context", "topics")

    def __init__(self, replica_state: Any, context: FetchContext) -> None:
        self.replica_state, self.context, self.topics = replica_state, context, context.topics


def in_session(context: FetchContext, response: Any, now_ms: int) -> Any:
    """The answer of the partitions read, as the session context picks it."""
    parts = [t.partitions for t in response.responses]
    error, session_id, kept = context.respond(parts, now_ms)
    if error:
        return FetchResponse(error_code=error, session_id=session_id, responses=[])
    response.session_id = session_id
    if kept is not None:
        for t, answered in zip(response.responses, kept, strict=True):
            t.partitions = answered
        response.responses = [t for t in response.responses if t.partitions]
    return response


class FollowerFetchWait(DelayedOperation):
    """A follower's Fetch that found nothing new: read again at each change of its
    partitions, answered once there is something to say, or at its max_wait_ms."""

    __slots__ = ("host", "src", "corr", "request", "response")

    def __init__(self, host: BrokerHost, src: int, corr: int, request: Any, deadline_ms: int):
        super().__init__(deadline_ms)
        self.host, self.src, self.corr, self.request = host, src, corr, request
        self.response: Any = None

    def try_complete(self) -> bool:
        response, found, _ = self.host._follower_read(self.request, first=False)
        if found:
            self.response = response
        return found

    def on_expiration(self) -> None:
        self.response = self.host._follower_read(self.request, first=False)[0]

    def on_complete(self) -> None:
        response = in_session(self.request.context, self.response, self.host.now_ms())
        self.host.answer(self.src, self.corr, response)
