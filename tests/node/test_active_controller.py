"""The controller's side of a quorum node, sans I/O (node/active_controller.py), on a clock the
test moves, over a real networked metadata store and controller whose one-voter Raft node the
test polls by hand (so it decides when records commit): requests answered once what they wrote
is committed, at once when they wrote nothing, NOT_CONTROLLER when leadership goes first,
REQUEST_TIMED_OUT at the deadline; and the tick (activation, fencing) at its interval."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import PRODUCER_ID_BLOCK_SIZE
from gregor.metadata import raft_store
from gregor.metadata import records as r
from gregor.metadata.image import METADATA_VERSION, MetadataImage
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.node.active_controller import COMMIT_TIMEOUT_MS, TICK_MS, ActiveControllerCore
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import BY_NAME, KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from gregor.raft.config import RaftConfig
from gregor.raft.log import MemoryLog
from gregor.raft.node import LeaderAndEpoch, NotLeader, RaftNode
from gregor.raft.store import MemoryQuorumStateStore
from gregor.replication.pending import Pending

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"
code = {name: e.code for name, e in BY_NAME.items()}


class Quorum:
    """What the Raft driver is to the store, without I/O: a one-voter node; `run` polls it and
    hands what it committed to the store."""

    def __init__(self) -> None:
        self.now = 1_000
        self.node: RaftNode | None = RaftNode(
            1, [1], MemoryLog(), MemoryQuorumStateStore(), random.Random(0), self.now,
            RaftConfig(append_linger_ms=0), CLUSTER,
        )  # fmt: skip
        self.store = RaftMetadataStore(None, CLUSTER, clock=lambda: self.now)
        self.store.local_id = 1
        self.store.attach(self)

    def append(self, records: Sequence[bytes]) -> int | NotLeader:
        assert self.node is not None
        return self.node.append(records, self.now)

    def run(self) -> None:
        """Poll until nothing changes: what was appended is committed and replayed."""
        assert self.node is not None
        for _ in range(8):
            effects = self.node.poll(self.now)
            if effects.leader_change is not None:
                self.store.on_leader_change(effects.leader_change)
            self.store.on_committed(effects.committed)
            if not effects.committed and effects.leader_change is None:
                return


class Setup:
    def __init__(self) -> None:
        self.quorum = Quorum()
        self.store = self.quorum.store
        self.controller = LocalController(self.store, 1, {})
        self.core = ActiveControllerCore(1, self.store, self.controller)

    def activate(self) -> None:
        """Lead, tick once (the bootstrap records), commit them."""
        self.quorum.run()
        assert self.store.is_active()
        self.core.poll(self.quorum.now)
        self.quorum.run()
        assert METADATA_VERSION in self.store.image.features

    def call(self, api_key: int, request: Any, version: int = 0) -> Any:
        return self.core.handle(api_key, version, request, self.quorum.now)

    def register(self, broker_id: int = 4, cluster_id: str = CLUSTER) -> Any:
        R = BrokerRegistrationRequest
        request = R(
            broker_id=broker_id,
            cluster_id=cluster_id,
            incarnation_id=uuid.UUID(int=broker_id),
            listeners=[R.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
            features=[],
            rack=None,
            log_dirs=[uuid.UUID(int=9)],
        )
        return self.call(api_keys.BROKER_REGISTRATION, request, 3)

    def heartbeat(self, broker_epoch: int, offset: int, broker_id: int = 4) -> Any:
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            current_metadata_offset=offset,
            want_fence=False,
            want_shut_down=False,
            offline_log_dirs=[],
        )
        return self.call(api_keys.BROKER_HEARTBEAT, request, 1)

    def unfenced(self, broker_id: int = 4) -> None:
        """Registered, then caught up: a broker topics can be placed on."""
        epoch = self.registered(broker_id)
        self.heartbeat(epoch, offset=self.store.applied, broker_id=broker_id)
        self.quorum.run()
        assert not self.store.image.brokers[broker_id].fenced

    def registered(self, broker_id: int = 4) -> int:
        answer = self.register(broker_id)
        assert isinstance(answer, Pending)
        self.quorum.run()
        assert answer.done and answer.value.error_code == errors.NONE
        return int(answer.value.broker_epoch)


def test_a_registration_is_answered_once_committed() -> None:
    s = Setup()
    s.activate()
    answer = s.register()
    assert isinstance(answer, Pending) and not answer.done
    assert s.store.last_appended > s.store.applied
    s.quorum.run()
    assert answer.done and answer.value.error_code == errors.NONE
    assert answer.value.broker_epoch == s.store.image.brokers[4].epoch
    assert s.core.waiting.delayed() == 0


def test_off_the_active_controller_and_for_another_cluster_at_once() -> None:
    s = Setup()  # not leading yet: not active
    assert s.register().error_code == code["NOT_CONTROLLER"]
    s.activate()
    assert s.register(cluster_id="other").error_code == code["INCONSISTENT_CLUSTER_ID"]
    assert s.core.waiting.delayed() == 0


def test_leadership_lost_before_the_commit_is_not_controller() -> None:
    s = Setup()
    s.activate()
    answer = s.register()
    assert isinstance(answer, Pending)
    s.store.on_leader_change(LeaderAndEpoch(2, s.store.epoch + 1))
    assert answer.done and answer.value.error_code == code["NOT_CONTROLLER"]
    assert answer.value.broker_epoch == -1 and s.core.waiting.delayed() == 0


def test_no_commit_in_time_is_request_timed_out_at_the_deadline() -> None:
    s = Setup()
    s.activate()
    epoch = s.registered()
    start = s.quorum.now
    answer = s.call(
        api_keys.ALLOCATE_PRODUCER_IDS, AllocateProducerIdsRequest(broker_id=4, broker_epoch=epoch)
    )
    deadline = start + COMMIT_TIMEOUT_MS
    assert isinstance(answer, Pending) and s.core.waiting.next_deadline_ms() == deadline
    assert s.core.poll(start + TICK_MS) == start + 2 * TICK_MS  # the tick comes first
    s.core.poll(deadline - 1)
    assert not answer.done
    s.core.poll(deadline)
    assert answer.done and answer.value.error_code == code["REQUEST_TIMED_OUT"]
    assert answer.value.producer_id_len == 0
    s.quorum.run()  # the commit comes after: nothing changes
    assert answer.value.error_code == code["REQUEST_TIMED_OUT"]


def test_producer_ids_once_committed() -> None:
    s = Setup()
    s.activate()
    epoch = s.registered()
    first = s.call(
        api_keys.ALLOCATE_PRODUCER_IDS, AllocateProducerIdsRequest(broker_id=4, broker_epoch=epoch)
    )
    second = s.call(
        api_keys.ALLOCATE_PRODUCER_IDS, AllocateProducerIdsRequest(broker_id=4, broker_epoch=epoch)
    )
    assert isinstance(first, Pending) and isinstance(second, Pending)
    s.quorum.run()
    starts = [a.value.producer_id_start for a in (first, second)]
    assert [a.value.producer_id_len for a in (first, second)] == [PRODUCER_ID_BLOCK_SIZE] * 2
    assert starts[1] == starts[0] + PRODUCER_ID_BLOCK_SIZE


def test_a_heartbeat_that_writes_nothing_is_answered_at_once() -> None:
    s = Setup()
    s.activate()
    epoch = s.registered()
    behind = s.heartbeat(epoch, offset=0)  # not caught up to its registration: stays fenced
    assert not isinstance(behind, Pending)
    assert behind.error_code == errors.NONE and behind.is_fenced and not behind.is_caught_up
    unfence = s.heartbeat(epoch, offset=s.store.applied)  # caught up: an unfence record
    assert isinstance(unfence, Pending) and not unfence.done
    s.quorum.run()
    assert unfence.value.error_code == errors.NONE and not unfence.value.is_fenced
    assert s.heartbeat(epoch + 100, offset=s.store.applied).error_code == code["STALE_BROKER_EPOCH"]


def test_an_alter_partition_refused_at_the_top_is_answered_at_once() -> None:
    s = Setup()
    s.activate()
    R = AlterPartitionRequest
    request = R(broker_id=4, broker_epoch=99, topics=[])
    answer = s.call(api_keys.ALTER_PARTITION, request, 3)
    assert not isinstance(answer, Pending) and answer.error_code == code["STALE_BROKER_EPOCH"]


def test_the_tick_activates_once_per_epoch_and_fences_silent_brokers() -> None:
    s = Setup()
    s.quorum.run()
    now = s.quorum.now
    assert s.core.poll(now) == now + TICK_MS
    assert s.core.activated_epoch == s.store.epoch  # activated: bootstrap records appended
    assert s.core.poll(now + 1) == now + TICK_MS  # not due: nothing done
    s.quorum.run()
    epoch = s.registered()
    unfence = s.heartbeat(epoch, offset=s.store.applied)
    s.quorum.run()
    assert not unfence.value.is_fenced and not s.store.image.brokers[4].fenced
    s.quorum.now += 9_000  # broker.session.timeout.ms passes with no heartbeat
    s.core.poll(s.quorum.now)
    s.quorum.run()
    assert s.store.image.brokers[4].fenced


def test_a_voter_another_node_leads_does_not_tick_until_it_leads() -> None:
    s = Setup()
    woken: list[int] = []
    s.core.wakeup = lambda: woken.append(1)
    s.core.on_leader_change(2)
    assert woken  # polled again at once
    s.quorum.run()  # it leads after all (the change below is what the driver would report)
    now = s.quorum.now
    assert s.core.poll(now) is None and s.core.activated_epoch == -1
    assert s.core.poll(now + 10 * TICK_MS) is None and s.core.activated_epoch == -1
    s.core.on_leader_change(1)
    assert s.core.poll(now + 10 * TICK_MS) == now + 11 * TICK_MS
    assert s.core.activated_epoch == s.store.epoch  # the tick is back, and activates


def test_an_observer_answers_but_never_ticks() -> None:
    s = Setup()
    s.core.duties = False
    s.quorum.run()
    assert s.core.poll(s.quorum.now) is None and s.core.activated_epoch == -1


def test_a_plan_sees_what_is_appended_and_not_committed() -> None:
    s = Setup()
    s.activate()
    s.unfenced()
    s.controller.create_topic("a", [[4]], {})
    assert s.store.last_appended > s.store.applied and "a" not in s.store.topics
    with pytest.raises(KafkaError) as refused:  # "a" is in flight: planned on, not committed
        s.controller.create_topic("a", [[4]], {})
    assert refused.value.code == code["TOPIC_ALREADY_EXISTS"]
    s.controller.create_topic("b", [[4]], {})
    s.quorum.run()
    assert {"a", "b"} <= set(s.store.topics)
    with pytest.raises(KafkaError):
        s.controller.create_topic("b", [[4]], {})
    s.controller.create_topic("c", [[4]], {})
    s.quorum.run()
    assert {"a", "b", "c"} <= set(s.store.topics)


def test_what_commits_before_the_next_plan_is_never_replayed_speculatively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Setup()
    s.activate()
    s.unfenced()
    replayed: list[list[str]] = []
    real = MetadataImage.replay

    def counting(image: MetadataImage, entries: Any) -> MetadataImage:
        entries = list(entries)
        replayed.append([type(rec).__name__ for rec, _offset, _epoch in entries])
        return real(image, entries)

    monkeypatch.setattr(MetadataImage, "replay", counting)
    s.controller.create_topic("a", [[4]], {})
    appended = len(replayed)
    s.quorum.run()  # committed: the store replays it once into the committed image
    committed = len(replayed) - appended
    s.controller.create_topic("b", [[4]], {})  # planned on the committed image as it is
    assert appended == 0 and committed == 1
    assert len(replayed) == 1  # creating "b" replayed nothing
    assert "a" in s.controller.quorum.image.topics_by_name


def test_the_image_after_creations_is_a_full_replay_of_the_log() -> None:
    """The active controller replays what it appended as the records it appended (not decoded
    again): the image is the one replaying the log's bytes from the start gives, a transaction
    (its Begin and End are decoded) and a record whose committed bytes differ included."""
    s = Setup()
    s.activate()
    for b in (1, 2, 3):
        s.unfenced(b)
    decoded: list[bytes] = []
    decode = raft_store.r.decode

    def counted(data: bytes) -> Any:
        decoded.append(bytes(data))
        return decode(data)

    raft_store.r.decode = counted  # type: ignore[attr-defined]
    try:
        for i in range(5):
            s.controller.create_topic(f"t{i}", [[1 + i % 3], [2]], {"retention.ms": str(i)})
            s.quorum.run()
        assert decoded == []  # each taken as appended
        s.store.max_batch_bytes = 64  # a topic of 8 partitions takes a transaction
        s.controller.create_topic("big", [[1]] * 8, {})
        mine = s.store._appended
        first, second = list(mine)[:2]
        data, rec = mine[first]
        mine[first] = (bytearray(data), rec)  # the same bytes, not the same object: taken
        mine[second] = (b"other", r.NoOpRecord())  # not the bytes committed: decoded
        s.quorum.run()
        kinds = sorted(type(decode(d)).__name__ for d in decoded)
        assert kinds == ["BeginTransactionRecord", "EndTransactionRecord", "PartitionRecord"]
        assert s.store._appended == {}
    finally:
        raft_store.r.decode = decode  # type: ignore[attr-defined]
    assert s.store.image.topic("big") is not None
    assert s.quorum.node is not None
    log = s.quorum.node.log
    entries = [
        (decode(data), batch.base_offset + i, batch.epoch)
        for batch in log.read(log.start_offset, 1 << 30)
        if not batch.control
        for i, data in enumerate(batch.records)
    ]
    assert MetadataImage().replay(entries) == s.store.image
    assert s.store.topics["t4"].configs == {"retention.ms": "4"}
