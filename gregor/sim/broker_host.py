"""A broker of the data-plane simulation: the real ReplicaManager over a real LogManager (files
in the run's directory), the real FollowerFetchers, and thin drivers for what the broker's
loops do (registration and heartbeats, metadata, the fetcher loops, AlterPartition, delayed
produce and fetch). Every decision is the cores'; this module only moves their requests.

    metadata      fetched from a controller every METADATA_MS (or at once while more is
                  there), replayed into the broker's own image; applied to the partitions
                  only once the broker has caught up with the committed log since it started
                  (as Kafka's broker publishes metadata after its initial catch-up)
    lifecycle     register (a new incarnation id each start), then heartbeat every
                  HEARTBEAT_MS with the metadata offset replayed; a stale epoch registers again
    fetchers      one FollowerFetcher per leader, one Fetch in flight each; the leader parks a
                  Fetch that finds nothing until the partition changes or max_wait_ms passes
    ISR changes   queued per partition, one AlterPartition in flight, sent again after a
                  backoff when it gets no answer or a top-level error
    produce       acks=all: append as leader, answer when `acks_all_status` says so (woken by
                  the partition), or REQUEST_TIMED_OUT after PRODUCE_TIMEOUT_MS
    flush         every `flush_interval_ms` the logs are flushed and checkpointed: the OS
                  writeback; only flushed bytes survive a crash (files.py)
"""

from __future__ import annotations

import os
import random
import uuid
from typing import Any

from gregor.controller.quorum_controller import (
    BrokerHeartbeat,
    BrokerRegistration,
    HeartbeatResponse,
    IsrChange,
    IsrChangeResult,
    RegistrationResponse,
)
from gregor.metadata.image import EMPTY_IMAGE, TOPIC_RESOURCE, MetadataImage
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import FetchRequest, FetchResponse
from gregor.replication.follower import FetcherConfig, FollowerFetcher
from gregor.replication.partition import BrokerLiveness, IsrUpdate, Partition, ReplicaManager
from gregor.sim.coordinator_host import Coordinators
from gregor.sim.files import FileDisk
from gregor.sim.rpc import (
    AlterPartition,
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
HEARTBEAT_MS = 500
CONTROLLER_TIMEOUT_MS = 1000
RETRY_MS = 200
FETCH_TIMEOUT_MS = 3000
PRODUCE_TIMEOUT_MS = 3000
CONSUMER_MAX_BYTES = 16 * 1024
_code = errors.BY_NAME
NOT_CONTROLLER = _code["NOT_CONTROLLER"].code
REQUEST_TIMED_OUT = _code["REQUEST_TIMED_OUT"].code
RE_REGISTER = frozenset({_code["STALE_BROKER_EPOCH"].code, _code["BROKER_ID_NOT_REGISTERED"].code})


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

    # -- life --------------------------------------------------------------------------------

    def boot(self) -> None:
        self.incarnation_id = uuid.UUID(int=self.sim.rng.getrandbits(128))
        self.broker_epoch = -1
        self.registering = False
        self.image: MetadataImage = EMPTY_IMAGE
        self.metadata_offset = 0  # the next metadata offset to read
        self.caught_up = False
        self.controller = self.sim.controller_ids[0]
        self.fetchers: dict[int, FollowerFetcher] = {}
        self.fetching: set[int] = set()  # leaders with a Fetch in flight
        self.isr_queue: dict[tuple[uuid.UUID, int], tuple[Partition, IsrUpdate]] = {}
        self.isr_in_flight = False
        self.parked: list[Any] = []  # delayed fetches and produces: callables, True when done
        self.wake_scheduled = False
        os.makedirs(self.root, exist_ok=True)
        logs = LogManager([self.root], self.log_config, clock=self.clock)
        logs.roll_flusher = self._roll_flush
        logs.truncation_listeners.append(lambda tp, _base: self.disk.on_truncation(logs, *tp))
        logs.startup()  # recovers what the last crash left
        self.logs = logs
        self.replicas = self.replica_manager_class(
            self.node_id,
            logs,
            liveness=self._liveness,
            local_broker_epoch=lambda: self.broker_epoch,
            replica_lag_time_max_ms=self.lag_ms,
        )
        self.replicas.on_isr_update = self._submit_isr
        self.coordinators = self.coordinators_class(self) if self.sim.config.coordinators else None
        self.timer_register()
        self.timer_metadata()
        self.sim.timer(self, self.sim.now + self.lag_ms // 2, "shrink")
        self.sim.timer(self, self.sim.now + self.sim.flush_interval_ms, "flush")

    def crash(self, rng: random.Random, torn_rate: float, power_loss: bool) -> int:
        """Stop without a clean shutdown; on a power loss, lose what the disk did not keep."""
        self.close_files()
        self.replicas = None
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

    # -- the controller ----------------------------------------------------------------------

    def _to_controller(self, body: Any, on_answer: Any) -> None:
        def answered(response: Any) -> None:
            if response is None or isinstance(response, NotController):
                hint = None if response is None else response.leader_id
                ids = self.sim.controller_ids
                self.controller = (
                    hint if hint is not None else ids[(ids.index(self.controller) + 1) % len(ids)]
                )
            on_answer(response)

        self.request(self.controller, body, answered, CONTROLLER_TIMEOUT_MS)

    def timer_register(self) -> None:
        if self.registering:
            return
        self.registering = True
        self.broker_epoch = -1
        request = BrokerRegistration(self.node_id, self.incarnation_id)
        self._to_controller(request, self._registered)

    def _registered(self, response: Any) -> None:
        self.registering = False
        if isinstance(response, RegistrationResponse) and response.error_code == errors.NONE:
            self.broker_epoch = response.broker_epoch
            self.sim.record("registered", self.node_id, self.broker_epoch)
            if self.caught_up and self.sim.config.apply_after_registration:
                self.maybe_apply_metadata()
            self.sim.timer(self, self.sim.now + HEARTBEAT_MS, "heartbeat", self.broker_epoch)
        else:
            self.sim.timer(self, self.sim.now + RETRY_MS, "register")

    def timer_heartbeat(self, epoch: int) -> None:
        if epoch != self.broker_epoch:
            return
        request = BrokerHeartbeat(self.node_id, epoch, self.metadata_offset - 1)

        def answered(response: Any) -> None:
            if epoch != self.broker_epoch:
                return
            if isinstance(response, HeartbeatResponse) and response.error_code in RE_REGISTER:
                self.timer_register()
                return
            self.sim.timer(self, self.sim.now + HEARTBEAT_MS, "heartbeat", epoch)

        self._to_controller(request, answered)

    def _submit_isr(self, p: Partition, update: IsrUpdate) -> None:
        self.isr_queue[(update.topic_id, update.partition)] = (p, update)
        self._maybe_send_isr()

    def _maybe_send_isr(self) -> None:
        if self.isr_in_flight or not self.isr_queue or self.broker_epoch < 0:
            return
        batch, self.isr_queue = self.isr_queue, {}
        changes = tuple(
            IsrChange(
                u.topic_id,
                u.partition,
                u.leader_epoch,
                u.partition_epoch,
                u.new_isr,
                dict(zip(u.new_isr, u.broker_epochs, strict=True)),
            )
            for _p, u in batch.values()
        )
        self.isr_in_flight = True
        incarnation = self.incarnation
        self._to_controller(
            AlterPartition(self.node_id, self.broker_epoch, changes),
            lambda response: self._isr_answered(incarnation, batch, response),
        )

    def _isr_answered(self, incarnation: int, batch: dict[Any, Any], response: Any) -> None:
        if incarnation != self.incarnation:
            return
        self.isr_in_flight = False
        retry = {}
        if isinstance(response, list):
            for (key, (p, update)), result in zip(batch.items(), response, strict=True):
                assert isinstance(result, IsrChangeResult)
                again = p.on_alter_partition_result(
                    update,
                    result.error_code,
                    result.leader_epoch,
                    result.partition_epoch,
                    result.isr,
                    self.now_ms(),
                )
                if again:
                    retry[key] = (p, update)
        else:  # no answer, NOT_CONTROLLER or a top-level error: all again, if still wanted
            retry = {k: (p, u) for k, (p, u) in batch.items() if p.pending is u}
        for key, item in retry.items():
            self.isr_queue.setdefault(key, item)
        if retry:
            self.sim.timer(self, self.sim.now + RETRY_MS, "isr_retry")
        else:
            self._maybe_send_isr()

    def timer_isr_retry(self) -> None:
        self._maybe_send_isr()

    def timer_shrink(self) -> None:
        self.sim.timer(self, self.sim.now + self.lag_ms // 2, "shrink")
        if self.replicas is not None:
            self.replicas.maybe_shrink_isr(self.now_ms())

    # -- metadata ----------------------------------------------------------------------------

    def timer_metadata(self) -> None:
        incarnation = self.incarnation
        self._to_controller(
            MetadataFetch(self.metadata_offset),
            lambda response: self._metadata(incarnation, response),
        )

    def _metadata(self, incarnation: int, response: Any) -> None:
        if incarnation != self.incarnation:
            return
        more = False
        if isinstance(response, MetadataEntries):
            entries = [e for e in response.entries if e[1] >= self.metadata_offset]
            if entries:
                self.image = self.image.replay(entries)
                self.metadata_offset = entries[-1][1] + 1
            more = len(response.entries) > 0 and self.metadata_offset < response.high_watermark
            just_caught_up = not self.caught_up and not more and response.from_leader
            if just_caught_up:
                self.caught_up = True
                self.sim.record("caught up", self.node_id, self.metadata_offset)
            if entries and self.caught_up or just_caught_up:
                self.maybe_apply_metadata()
        self.sim.timer(self, self.sim.now + (1 if more else METADATA_MS), "metadata")

    def maybe_apply_metadata(self) -> None:
        """As gregor's broker (replication/hosting.py) and Kafka's: once registered and caught
        up to the registration, so a broker back from a crash takes up no partition before the
        controller has moved it off everything it held. Without `apply_after_registration`:
        as soon as caught up, the broken order the simulation found."""
        if self.sim.config.apply_after_registration and not (
            0 <= self.broker_epoch < self.metadata_offset
        ):
            return
        self.apply_metadata()

    def apply_metadata(self) -> None:
        rm = self.replicas
        assert rm is not None
        now = self.now_ms()
        for topic in self.image.topics_by_id.values():
            configs = self.image.config(TOPIC_RESOURCE, topic.name)
            min_isr = int(configs.get("min.insync.replicas", "1"))
            for index, reg in sorted(topic.partitions.items()):
                if self.node_id in reg.replicas:
                    rm.apply(topic.name, index, topic.topic_id, reg, self.log_config, min_isr, now)
        for change in rm.take_follower_changes():
            for existing in self.fetchers.values():
                existing.remove(change.topic, change.index)
            if change.leader is None or change.leader < 0:
                continue
            p = rm.get(change.topic, change.index)
            if p is None or p.is_leader:
                continue
            fetcher = self.fetchers.get(change.leader)
            if fetcher is None:
                config = FetcherConfig(replica_id=self.node_id)
                fetcher = self.fetchers[change.leader] = self.fetcher_class(change.leader, config)
            fetcher.add(p, change.leader_epoch)
        for leader in sorted(self.fetchers):
            if not len(self.fetchers[leader]):
                del self.fetchers[leader]
            else:
                self._maybe_fetch(leader)
        if self.coordinators is not None:
            self.coordinators.on_metadata()

    # -- replication: the follower side ------------------------------------------------------

    def _maybe_fetch(self, leader: int) -> None:
        fetcher = self.fetchers.get(leader)
        if fetcher is None or leader in self.fetching or self.broker_epoch < 0:
            return
        built = fetcher.build_request(self.now_ms(), self.broker_epoch)
        if built is None:
            ready = fetcher.next_ready_ms()
            if ready is not None:
                self.sim.timer(self, self.sim.now + max(1, ready - self.now_ms()), "fetch", leader)
            return
        request, sent = built
        self.fetching.add(leader)
        incarnation = self.incarnation

        def answered(response: Any) -> None:
            if incarnation != self.incarnation:
                return
            self.fetching.discard(leader)
            if self.fetchers.get(leader) is not fetcher:
                self._maybe_fetch(leader)
                return
            if response is None:
                fetcher.handle_error(sent, self.now_ms())
            else:
                fetcher.handle_response(sent, response, self.now_ms())
            self._maybe_fetch(leader)

        self.request(leader, request, answered, FETCH_TIMEOUT_MS)

    def timer_fetch(self, leader: int) -> None:
        self._maybe_fetch(leader)

    # -- requests ----------------------------------------------------------------------------

    def on_request(self, src: int, correlation_id: int, body: Any) -> None:
        if self.replicas is None:
            return
        if self.coordinators is not None and self.coordinators.on_request(
            src, correlation_id, body
        ):
            return
        if isinstance(body, FetchRequest):
            self._serve_follower(src, correlation_id, body, first=True, deadline=None)
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

    def _partition_by_id(self, topic_id: uuid.UUID, index: int) -> Partition | None:
        topic = self.image.topics_by_id.get(topic_id)
        if topic is None or self.replicas is None:
            return None
        return self.replicas.get(topic.name, index)

    def _serve_follower(
        self, src: int, corr: int, request: Any, first: bool, deadline: int | None
    ) -> bool:
        """Answer a follower's Fetch, or park it (False) while it finds nothing new."""
        replica = request.replica_state
        now = self.now_ms()
        topics = []
        found = False
        touched: list[Partition] = []
        for t in request.topics:
            parts = []
            for fp in t.partitions:
                pd = FetchResponse.PartitionData(partition_index=fp.partition, records=b"")
                p = self._partition_by_id(t.topic_id, fp.partition)
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
        if not found and (deadline is None or self.sim.now < deadline):
            if deadline is None:
                deadline = self.sim.now + request.max_wait_ms
                self.sim.timer(self, deadline, "wake")
            self._park(touched, lambda: self._serve_follower(src, corr, request, False, deadline))
            return False
        self.answer(src, corr, FetchResponse(error_code=errors.NONE, responses=topics))
        return True

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

    def _park(self, partitions: list[Partition], retry: Any) -> None:
        self.parked.append(retry)
        for p in partitions:
            p.watch(self._wake_soon)

    def _wake_soon(self) -> None:
        if not self.wake_scheduled:
            self.wake_scheduled = True
            self.sim.timer(self, self.sim.now, "wake")

    def timer_wake(self) -> None:
        self.wake_scheduled = False
        parked, self.parked = self.parked, []
        for retry in parked:
            retry()

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
        """Checked as a leader's write, then answered once acks=all allows (or at the timeout)."""
        epoch = p.leader_epoch
        self.sim.checker.on_leader_append(self, p, epoch)
        deadline = self.sim.now + PRODUCE_TIMEOUT_MS
        self.sim.timer(self, deadline, "wake")
        self._await_acks(src, corr, p, base, end, epoch, deadline)

    def _await_acks(
        self, src: int, corr: int, p: Partition, base: int, end: int, epoch: int, deadline: int
    ) -> bool:
        status = self.acks_status(p, end, epoch)
        if status is None:
            if self.sim.now < deadline and self.replicas is not None:
                self._park([p], lambda: self._await_acks(src, corr, p, base, end, epoch, deadline))
                return False
            status = REQUEST_TIMED_OUT
        self.answer(src, corr, ProduceResult(status, base if status == errors.NONE else -1))
        return True

    def acks_status(self, p: Partition, end: int, epoch: int) -> int | None:
        """When to answer an acks=all produce (the broken variants change this)."""
        return p.acks_all_status(end, epoch)

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
