"""Produce and Fetch through their handlers over a `BrokerServer` built but not listening:
what can be answered at once is (acks=1, acks=all on one broker, a fetch with data ready) and
never enters the purgatory; what cannot is a Pending in the purgatory, completed by the
partition's events or expired at its deadline, leaving no operation behind. And a metadata write
in a quorum, answered once committed."""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.controller.admin import TopicSpec
from gregor.handlers import controller_writes, fetch, produce
from gregor.handlers.context import RequestContext
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.headers import RequestHeader
from gregor.protocol.messages import FetchRequest, ProduceRequest
from gregor.replication.partition import Partition, ReplicaState
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory

from .helpers import records

FOLLOWER = 2


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    b = BrokerServer(BrokerConfig.load(None, {"log.dirs": str(tmp_path / "logs")}))
    b.logs.startup()
    b.services.apply_metadata()
    b.admin.create_topic(TopicSpec("t", 1, 1))
    b.services.apply_metadata()
    yield b
    b.logs.shutdown()


def ctx(b: BrokerServer, key: int, version: int) -> RequestContext:
    return RequestContext(b.services, RequestHeader(key, version, 1, "test"), "127.0.0.1:1")


def send_produce(b: BrokerServer, acks: int, n: int = 3, timeout_ms: int = 5_000) -> Any:
    request = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records(n))],
            )
        ],
    )
    return produce.handle(ctx(b, api_keys.PRODUCE, 9), request)


def send_fetch(b: BrokerServer, offset: int, max_wait_ms: int = 500, min_bytes: int = 1) -> Any:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
    return fetch.handle(ctx(b, api_keys.FETCH, 11), request)


def partition(b: BrokerServer) -> Partition:
    p = b.replicas.get("t", 0)
    assert p is not None
    return p


def fetched(response: Any) -> tuple[int, int]:
    """(error code, bytes of records) of the one partition; closes its file."""
    part = response.responses[0].partitions[0]
    size = len(part.records) if part.records is not None else 0
    fetch._close(response.responses)
    return part.error_code, size


@pytest.mark.parametrize("acks", [1, -1])
def test_a_produce_on_one_broker_is_answered_at_once(broker: BrokerServer, acks: int) -> None:
    for _ in range(3):
        response = send_produce(broker, acks)
        assert not isinstance(response, Pending)
        assert response.responses[0].partition_responses[0].error_code == errors.NONE
    p = partition(broker)
    assert broker.purgatory.delayed() == 0 and p.fetches.watchers == [] and p.commits.watchers == []


def test_acks_all_waits_in_the_purgatory_for_the_follower(broker: BrokerServer) -> None:
    p = partition(broker)
    p.replicas, p.isr = [broker.node_id, FOLLOWER], [broker.node_id, FOLLOWER]
    p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}
    answer = send_produce(broker, -1)
    assert isinstance(answer, Pending) and not answer.done
    assert broker.purgatory.delayed() == 1 and len(p.commits.watchers) == 1
    p.update_follower_fetch_state(p.followers[FOLLOWER], 3, 0, 0, p.log.log_end_offset, -1)
    assert answer.done
    assert answer.value.responses[0].partition_responses[0].error_code == errors.NONE
    assert broker.purgatory.delayed() == 0 and broker.purgatory.keys() == 0
    assert len(p.commits.watchers) == 1, "the purgatory's watcher stays until the next event"
    late = send_produce(broker, -1, timeout_ms=100)
    assert isinstance(late, Pending)
    broker.purgatory.expire(broker.now_ms() + 100)
    assert late.value.responses[0].partition_responses[0].error_code == errors.REQUEST_TIMED_OUT


def test_waiting_writes_wake_on_high_watermark_moves_not_on_every_append(
    broker: BrokerServer,
) -> None:
    p = partition(broker)
    p.replicas, p.isr = [broker.node_id, FOLLOWER], [broker.node_id, FOLLOWER]
    p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}
    woken: list[str] = []
    p.commits.watch(lambda: woken.append("commits"))
    p.watch(lambda: woken.append("fetches"))
    first = send_produce(broker, -1)
    assert isinstance(first, Pending) and woken == ["fetches"]  # the HW stayed at 0
    second = send_produce(broker, -1)
    assert isinstance(second, Pending) and not first.done
    p.update_follower_fetch_state(p.followers[FOLLOWER], 3, 0, 0, p.log.log_end_offset, -1)
    assert woken == ["fetches", "commits"] and first.done and not second.done
    p.update_follower_fetch_state(p.followers[FOLLOWER], 6, 0, 0, p.log.log_end_offset, -1)
    assert second.done and broker.purgatory.keys() == 0
    assert len(p.commits.watchers) == 1, "one watcher, the purgatory's, left for the next write"


def test_a_fetch_with_data_ready_is_answered_at_once(broker: BrokerServer) -> None:
    send_produce(broker, 1)
    response = send_fetch(broker, 0)
    assert not isinstance(response, Pending) and fetched(response)[1] > 0
    assert broker.purgatory.delayed() == 0


def test_a_small_answer_is_read_into_the_response_a_large_one_sent_from_the_file(
    broker: BrokerServer,
) -> None:
    send_produce(broker, 1)
    small = send_fetch(broker, 0).responses[0].partitions[0]
    assert isinstance(small.records, bytes)
    assert small.records == partition(broker).log.read_bytes(0, 1 << 20)
    send_produce(broker, 1, n=3000)
    large = send_fetch(broker, 3)
    records = large.responses[0].partitions[0].records
    assert not isinstance(records, bytes) and records.length > fetch.COPY_MAX
    assert records.read() == partition(broker).log.read_bytes(3, 1 << 20)
    fetch._close(large.responses)


def test_a_waiting_fetch_is_woken_by_an_append(broker: BrokerServer) -> None:
    answer = send_fetch(broker, 0, max_wait_ms=5_000)
    assert isinstance(answer, Pending) and not answer.done
    assert broker.purgatory.delayed() == 1 and len(partition(broker).commits.watchers) == 1
    send_produce(broker, 1)  # (one replica: the append moves the high watermark)
    assert answer.done and fetched(answer.value)[1] > 0
    assert broker.purgatory.delayed() == 0 and broker.purgatory.keys() == 0
    assert len(partition(broker).commits.watchers) == 1, "the purgatory's, for the next Fetch"


def test_a_consumers_waiting_fetch_is_not_tried_at_an_append_below_the_high_watermark(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It reads to the high watermark: an append that leaves it where it was cannot change
    the answer, so the fetch waits on the high watermark's moves only, and is answered then."""
    p = partition(broker)
    p.replicas, p.isr = [broker.node_id, FOLLOWER], [broker.node_id, FOLLOWER]
    p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}
    answer = send_fetch(broker, 0, max_wait_ms=5_000)
    assert isinstance(answer, Pending)
    assert broker.purgatory.watched(p.commits) == 1 and broker.purgatory.watched(p) == 0
    tried: list[Any] = []
    original = fetch.DelayedFetch.try_complete_after

    def counted(op: fetch.DelayedFetch, key: Any) -> bool:
        tried.append(key)
        return original(op, key)

    monkeypatch.setattr(fetch.DelayedFetch, "try_complete_after", counted)
    send_produce(broker, 1)  # the follower has not fetched it: the high watermark stays at 0
    assert tried == [] and not answer.done
    p.update_follower_fetch_state(p.followers[FOLLOWER], 3, 0, 0, p.log.log_end_offset, -1)
    assert tried == [p.commits] and answer.done and fetched(answer.value)[1] > 0


def test_an_answered_fetch_lets_go_of_its_request_before_its_deadline(
    broker: BrokerServer,
) -> None:
    """The operation waits in the purgatory's timer heap until its deadline, long after it is
    answered: by then it holds no more than its answer (no request, context or pass)."""
    context = ctx(broker, api_keys.FETCH, 11)
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=60_000,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[FetchRequest.FetchPartition(partition=0, partition_max_bytes=1 << 20)],
            )
        ],
    )
    answer = fetch.handle(context, request)
    assert isinstance(answer, Pending) and not answer.done
    alive = weakref.ref(context)
    del context, request
    gc.disable()  # (freed by reference counts alone, not by a collection)
    try:
        send_produce(broker, 1)
        assert answer.done and fetched(answer.value)[1] > 0
        assert broker.purgatory._timeouts, "the answered operation is still in the heap"
        assert alive() is None, "the answered operation still holds its request's context"
    finally:
        gc.enable()


def test_a_fetch_short_of_min_bytes_is_answered_at_max_wait(broker: BrokerServer) -> None:
    answer = send_fetch(broker, 0, max_wait_ms=500, min_bytes=1 << 20)
    assert isinstance(answer, Pending)
    send_produce(broker, 1)
    assert not answer.done, "fewer than min_bytes: it waits on"
    deadline = broker.purgatory.next_deadline_ms()
    assert deadline is not None
    broker.purgatory.expire(deadline - 1)
    assert not answer.done
    broker.purgatory.expire(deadline)
    assert answer.done and fetched(answer.value)[1] > 0, "what there is, at max_wait_ms"
    assert broker.purgatory.keys() == 0 and broker.purgatory.delayed() == 0


def test_a_waiting_fetch_of_a_partition_led_elsewhere_now_answers_the_error(
    broker: BrokerServer,
) -> None:
    answer = send_fetch(broker, 0, max_wait_ms=5_000)
    p = partition(broker)
    reg = p.registration
    assert reg is not None and isinstance(answer, Pending)
    p.make_follower(replace(reg, leader=FOLLOWER, leader_epoch=reg.leader_epoch + 1))
    assert answer.done and fetched(answer.value)[0] == errors.NOT_LEADER_OR_FOLLOWER


# -- metadata writes awaiting their commit (handlers/controller_writes.py) ------------------------


class Commit:
    """The commit a `wait_committed` callback waits for; `finish` calls it back."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def finish(self, error: KafkaError | None) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for fn in callbacks:
            fn(error)


class Item:
    error_code, error_message = 0, None


class QuorumStore:
    networked = True
    last_appended = 10
    applied = 9
    active = True

    def __init__(self) -> None:
        self.commit = Commit()

    def wait_committed(self, offset: int, done: Any) -> None:
        """As the metadata store's: at once when committed, or when no longer leading."""
        assert offset == 10
        if offset <= self.applied:
            done(None)
        elif not self.active:
            done(KafkaError(controller_writes.NOT_CONTROLLER, "not the active controller"))
        else:
            self.commit.callbacks.append(done)


class Services:
    def __init__(self) -> None:
        self.store = QuorumStore()
        self.purgatory = DelayedOperationPurgatory("test")

    @staticmethod
    def now_ms() -> int:
        return 1_000


def write(s: Services) -> tuple[Any, Item]:
    item = Item()
    c = RequestContext(s, RequestHeader(api_keys.CREATE_TOPICS, 7, 1, "t"), "x")
    return controller_writes.answer_after_commit(c, 9, "response", [item]), item


def test_a_metadata_write_is_answered_once_committed() -> None:
    s = Services()
    answer, item = write(s)
    assert isinstance(answer, Pending) and not answer.done and s.purgatory.delayed() == 1
    s.store.commit.finish(None)
    assert answer.value == "response" and item.error_code == 0 and s.purgatory.delayed() == 0


def test_a_metadata_write_fails_with_leadership_or_times_out() -> None:
    s = Services()
    answer, item = write(s)
    s.store.commit.finish(KafkaError(controller_writes.NOT_CONTROLLER, "moved"))
    assert answer.done and item.error_code == controller_writes.NOT_CONTROLLER
    s = Services()
    answer, item = write(s)
    assert s.purgatory.next_deadline_ms() == 1_000 + controller_writes.COMMIT_TIMEOUT_MS
    s.purgatory.expire(1_000 + controller_writes.COMMIT_TIMEOUT_MS)
    assert answer.done and item.error_code == controller_writes.REQUEST_TIMED_OUT
    s.store.commit.finish(None)  # a commit after the deadline changes nothing
    assert item.error_code == controller_writes.REQUEST_TIMED_OUT and s.purgatory.delayed() == 0
    s = Services()
    s.store.active = False  # leadership lost before the write waits: answered at once
    answer, item = write(s)
    assert answer == "response" and item.error_code == controller_writes.NOT_CONTROLLER
    assert s.purgatory.delayed() == 0


def test_a_write_that_appended_nothing_waits_for_what_is_still_uncommitted() -> None:
    """ "Topic exists" may rest on a creation appended but not yet committed: an answer that
    wrote nothing waits for the last offset appended, and is given at once when it is in."""
    s = Services()
    s.store.applied = 9  # offset 10, appended by an earlier request, not committed yet
    c = RequestContext(s, RequestHeader(api_keys.CREATE_TOPICS, 7, 1, "t"), "x")
    item = Item()
    answer = controller_writes.answer_after_commit(c, 10, "exists", [item])
    assert isinstance(answer, Pending) and not answer.done and s.purgatory.delayed() == 1
    s.store.commit.finish(None)
    assert answer.value == "exists" and s.purgatory.delayed() == 0
    s = Services()
    s.store.applied = 10
    c = RequestContext(s, RequestHeader(api_keys.CREATE_TOPICS, 7, 1, "t"), "x")
    assert controller_writes.answer_after_commit(c, 10, "exists", [item]) == "exists"
