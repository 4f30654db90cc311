"""The coordinators of a simulated broker: the real group and transaction coordinators (one
`CoordinatorRuntime` each) over the broker's own ReplicaManager, and the real marker channel
(coordinator/txn/markers.py) sending WriteTxnMarkers to partition leaders over the simulated
network. This module only moves their requests and drives their `poll`.

    coordinators = Coordinators(broker)      # at each boot, once the replica manager exists
    coordinators.on_metadata()               # after each metadata apply: load / unload shards
    coordinators.on_request(src, corr, body) # True if it was a coordinator's request

`__consumer_offsets` and `__transaction_state` are ordinary replicated partitions of the
simulation (the admin creates them, replication factor 3); a broker coordinates exactly the
partitions it leads, in the leader epoch it loaded them at, as a real broker does after each
metadata change. Answers wait for the records they rest on to be replicated (the runtime's
held answers, woken by the partition's high watermark), and markers for their ISR (the
WriteTxnMarkers handler's delayed markers, in this broker's marker purgatory).

A broker hears one client's requests in the order they were sent, each once, as over one TCP
connection: a request older than one already heard from that client is dropped (the
simulated network reorders and duplicates; Kafka's connections do not).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gregor.controller.admin import TopicSpec
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.group.results import OffsetCommitRequest, TxnOffsetCommitRequest
from gregor.coordinator.runtime import OFFSETS_TOPIC, GroupCoordinator
from gregor.coordinator.txn.markers import MarkerChannel
from gregor.coordinator.txn.runtime import TRANSACTION_TOPIC, TransactionCoordinator
from gregor.handlers.txn_markers import write_marker, write_markers
from gregor.metadata import config_defs
from gregor.metadata.image import TOPIC_RESOURCE, MetadataImage
from gregor.metadata.store import TopicInfo
from gregor.protocol import errors
from gregor.protocol.messages import WriteTxnMarkersRequest
from gregor.protocol.outbound import Outbound
from gregor.replication.partition import ReplicaManager
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.sim.coordinator_rpc import (
    GROUP,
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    CoordinatorFound,
    EndTxn,
    FindCoordinator,
    InitProducerId,
    OffsetFetch,
    OffsetsRead,
)
from gregor.sim.rpc import SimContext

OFFSETS_PARTITIONS = 2
TRANSACTION_PARTITIONS = 1
MARKER_TIMEOUT_MS = 3000
CONFIG = {
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "transaction.state.log.num.partitions": str(TRANSACTION_PARTITIONS),
}
INTERNAL_TOPICS = ((OFFSETS_TOPIC, OFFSETS_PARTITIONS), (TRANSACTION_TOPIC, TRANSACTION_PARTITIONS))
COORDINATOR_NOT_AVAILABLE = errors.BY_NAME["COORDINATOR_NOT_AVAILABLE"].code


def config_value(key: str) -> Any:
    """A broker config: Kafka's default, but the internal topics' small partition counts."""
    d = config_defs.BROKER_CONFIGS[key]
    return d.parse(CONFIG.get(key, d.default))


class Broker(Protocol):
    """What the coordinators use of their simulated broker (broker_host.py)."""

    sim: SimContext
    node_id: int
    incarnation: int
    up: bool
    replicas: ReplicaManager | None

    @property
    def image(self) -> MetadataImage: ...

    def now_ms(self) -> int: ...

    def request(self, dst: int, body: Any, on_answer: Any, timeout_ms: int) -> None: ...

    def answer(self, dst: int, correlation_id: int, body: Any) -> None: ...

    def maybe_apply_metadata(self) -> None: ...


class ImageTopics:
    """The broker's metadata image as the coordinators read topics (`TopicSource`)."""

    def __init__(self, image: Callable[[], MetadataImage]) -> None:
        self.image = image
        self._seen: MetadataImage | None = None
        self._topics: dict[str, TopicInfo] = {}

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        image = self.image()
        if image is not self._seen:
            self._seen = image
            self._topics = {
                t.name: TopicInfo(
                    t.name,
                    t.topic_id,
                    [list(reg.replicas) for _i, reg in sorted(t.partitions.items())],
                    dict(image.config(TOPIC_RESOURCE, t.name)),
                )
                for t in image.topics_by_id.values()
            }
        return self._topics

    def leader_of(self, topic: str, partition: int) -> int:
        t = self.image().topic(topic)
        reg = t.partitions.get(partition) if t is not None else None
        return reg.leader if reg is not None else -1


class NoTopicCreation:
    """The simulation's admin creates the internal topics before any client looks for them."""

    broker_ids: tuple[int, ...] = ()

    def create_topic(self, spec: TopicSpec) -> TopicInfo:
        raise AssertionError(f"{spec.name} is created by the simulation's admin")


class Coordinators:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.incarnation = broker.incarnation
        rm = broker.replicas
        assert rm is not None
        self.replicas = rm
        topics = ImageTopics(lambda: broker.image)
        rng = random.Random(broker.sim.rng.getrandbits(64))
        apply = broker.maybe_apply_metadata
        self.groups = GroupCoordinator(
            broker.node_id, topics, rm, NoTopicCreation(), config_value, apply, rng
        )
        self.markers = MarkerChannel(
            broker.node_id, lambda: broker.image, self._write_local, self._reachable
        )
        self.txns = TransactionCoordinator(
            broker.node_id, topics, rm, NoTopicCreation(), config_value, apply,
            self._new_producer_id, self.markers.write_markers,
        )  # fmt: skip
        self.groups.wakeup = self.txns.wakeup = self.markers.wakeup = self.wake
        self.purgatory = DelayedOperationPurgatory("markers")  # markers awaiting their ISR
        self.purgatory.wakeup = self.wake
        self.producer_ids = 0
        self.token = 0
        self.scheduled_at: int | None = None
        self.polling = False
        self.again = False
        self.heard: dict[int, int] = {}  # client -> the last correlation id handled
        self.handlers: dict[type, Callable[[Any, int], Any]] = {
            FindCoordinator: self._find,
            OffsetCommitRequest: self.groups.commit_offsets,
            OffsetFetch: self._fetch_offsets,
            InitProducerId: self._init_producer_id,
            AddPartitionsToTxn: self._add_partitions,
            AddOffsetsToTxn: self._add_offsets,
            TxnOffsetCommitRequest: self.groups.txn_offset_commit,
            EndTxn: self._end_txn,
        }

    # -- leadership and time -----------------------------------------------------------------

    def on_metadata(self) -> None:
        now = self.broker.now_ms()
        self.groups.on_metadata(now)
        self.txns.on_metadata(now)
        self.wake()

    def _new_producer_id(self) -> int:
        """Unique over the run: this broker's, this incarnation's (the controller hands out
        blocks in Kafka; the simulation's controller host does not serve that request)."""
        self.producer_ids += 1
        return 10_000_000 * self.broker.node_id + 10_000 * self.incarnation + self.producer_ids

    def wake(self) -> None:
        """Poll at once (after the current event)."""
        if self.polling:
            self.again = True
        elif self.scheduled_at is None or self.scheduled_at > self.broker.sim.now:
            self._schedule(self.broker.sim.now)

    def _schedule(self, at: int) -> None:
        self.token += 1
        self.scheduled_at = at
        self.broker.sim.timer(self.broker, at, "coordinators", self.token)  # type: ignore[arg-type]

    def poll(self, token: int) -> None:
        if token != self.token or self.broker.replicas is not self.replicas:
            return
        self.scheduled_at = None
        now = self.broker.now_ms()
        self.polling, self.again = True, False
        try:
            self.purgatory.expire(now)
            deadline = _earliest(self.groups.poll(now), self.txns.poll(now))
            deadline = _earliest(deadline, self.purgatory.next_deadline_ms())
            for out in self.markers.poll(now).outbound:
                self._send_markers(out)
        finally:
            self.polling = False
        if self.again:
            deadline = now
        if deadline is not None:
            self._schedule(self.broker.sim.now + max(1, deadline - now))

    # -- markers -----------------------------------------------------------------------------

    def _reachable(self, broker_id: int) -> bool:
        return broker_id in self.broker.image.brokers

    def _write_local(
        self, topic: str, index: int, pid: int, epoch: int, coordinator_epoch: int, commit: bool
    ) -> int | Pending:
        return write_marker(
            self.replicas, self.groups, self.purgatory, self.broker.now_ms(), topic, index, pid,
            epoch, coordinator_epoch, commit,
        )  # fmt: skip

    def _send_markers(self, out: Outbound) -> None:
        assert out.destination is not None

        def answered(response: Any) -> None:
            if self.broker.replicas is not self.replicas:
                return
            now = self.broker.now_ms()
            if response is None:
                self.markers.on_error(out, TimeoutError("no answer"), now)
            else:
                self.markers.on_response(out, response, now)

        self.broker.request(out.destination, out.body, answered, MARKER_TIMEOUT_MS)

    # -- requests ----------------------------------------------------------------------------

    def on_request(self, src: int, corr: int, body: Any) -> bool:
        """Serve `body` if it is a coordinator's request (True), answering now or once the
        coordinator's answer is released."""
        now = self.broker.now_ms()
        if isinstance(body, WriteTxnMarkersRequest):
            result = write_markers(self.replicas, self.groups, self.purgatory, now, body)
        else:
            handler = self.handlers.get(type(body))
            if handler is None:
                return False
            if corr <= self.heard.get(src, 0):
                return True  # late or again: that connection is gone
            self.heard[src] = corr
            result = handler(body, now)
        if isinstance(result, Pending):
            result.add_done_callback(lambda value: self._answer(src, corr, value))
        else:
            self._answer(src, corr, result)
        return True

    def _answer(self, src: int, corr: int, value: Any) -> None:
        if self.broker.up and self.broker.replicas is self.replicas:
            self.broker.answer(src, corr, value)

    def _find(self, body: FindCoordinator, now: int) -> CoordinatorFound:
        runtime = self.groups.runtime if body.key_type == GROUP else self.txns.runtime
        n = runtime.num_partitions
        if n is None:
            return CoordinatorFound(COORDINATOR_NOT_AVAILABLE)
        reg = self.broker.image.partition(runtime.topic.name, partition_for(body.key, n))
        if reg is None or reg.leader < 0:
            return CoordinatorFound(COORDINATOR_NOT_AVAILABLE)
        return CoordinatorFound(errors.NONE, reg.leader)

    def _fetch_offsets(self, body: OffsetFetch, now: int) -> Any:
        topics = [(t, list(ps)) for t, ps in body.topics]
        result = self.groups.fetch_offsets(body.group_id, topics, now_ms=now)
        index = self.groups.partition_for(body.group_id)

        def read(value: Any) -> OffsetsRead:
            return OffsetsRead(value, self._leads_now(OFFSETS_TOPIC, index))

        if not isinstance(result, Pending):
            return read(result)
        answer = Pending("offsets read")
        result.add_done_callback(lambda value: answer.complete(read(value)))
        return answer

    def _leads_now(self, topic: str, index: int) -> bool:
        """This broker leads the partition in the committed metadata's leader epoch."""
        reg = self.broker.sim.checker.image.partition(topic, index)
        p = self.replicas.get(topic, index)
        return (
            reg is not None and p is not None and p.is_leader and reg.leader == p.leader_id
            and reg.leader == self.broker.node_id and reg.leader_epoch == p.leader_epoch
        )  # fmt: skip

    def _init_producer_id(self, body: InitProducerId, now: int) -> Any:
        return self.txns.init_producer_id(body.transactional_id, body.timeout_ms, -1, -1, now)

    def _add_partitions(self, body: AddPartitionsToTxn, now: int) -> Any:
        return self.txns.add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch, body.partitions, now
        )

    def _add_offsets(self, body: AddOffsetsToTxn, now: int) -> Any:
        return self.txns.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id, now
        )

    def _end_txn(self, body: EndTxn, now: int) -> Any:
        return self.txns.end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, body.committed, 0, now
        )


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
