"""A one-voter broker makes new partitions' files on a worker thread (replication/hosting.py)
and holds the answer of the request that made them until it hosts them
(handlers/controller_writes.py `answer_once_hosted`): CreateTopics, CreatePartitions, a
FindCoordinator creating `__consumer_offsets`, a Metadata auto-creating a topic. The client
told "created" may produce at once, as when they were made inline. Over a `BrokerServer` built
but not listening, its hosting wired as a serving broker's, its worker's jobs run by the test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.handlers import groups, metadata, produce, topics
from gregor.handlers.context import RequestContext
from gregor.protocol import api_keys, errors
from gregor.protocol.headers import RequestHeader
from gregor.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
)
from gregor.replication.pending import Pending

from .helpers import produce_request

pytestmark = pytest.mark.unit

Job = tuple[Callable[[], object], Callable[[object], None]]


class Serving:
    """A broker whose hosting runs as while serving; `settle()` runs its worker's jobs and its
    scheduled applies until none is left, as the loop would."""

    def __init__(self, tmp_path: Path) -> None:
        config = {"log.dirs": str(tmp_path / "logs"), "offsets.topic.num.partitions": "5"}
        self.b = b = BrokerServer(BrokerConfig.load(None, config))
        b.logs.startup()
        self.scheduled: list[Callable[[], None]] = []
        self.jobs: list[Job] = []
        b.hosting.schedule = self.scheduled.append
        b.hosting.on_broker_config = lambda: None
        b.hosting.in_thread = lambda work, done: self.jobs.append((work, done))

    def call(self, key: int, version: int, request: Any) -> Any:
        header = RequestHeader(key, version, 1, "test")
        handler = {
            api_keys.CREATE_TOPICS: topics.create_topics,
            api_keys.CREATE_PARTITIONS: topics.create_partitions,
            api_keys.FIND_COORDINATOR: groups.find_coordinator,
            api_keys.METADATA: metadata.handle,
            api_keys.PRODUCE: produce.handle,
        }[key]
        return handler(RequestContext(self.b.services, header, "127.0.0.1:1"), request)

    def settle(self) -> None:
        while self.jobs or self.scheduled:
            if self.jobs:
                run_job(self.jobs.pop(0))
            else:
                self.scheduled.pop(0)()

    def produce(self, topic: str, index: int) -> int:
        request = produce_request(topic, index)
        answer = self.call(api_keys.PRODUCE, 9, request)
        return int(answer.responses[0].partition_responses[0].error_code)


def run_job(job: Job) -> None:
    """A worker's job: its work on a thread, its answer on this one."""
    work, done = job
    made: list[object] = []
    worker = threading.Thread(target=lambda: made.append(work()))
    worker.start()
    worker.join()
    done(made[0])


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = Serving(tmp_path)
    yield n
    n.b.logs.shutdown()


def waits_until_hosted(node: Serving, answer: Any) -> Any:
    assert isinstance(answer, Pending) and not answer.done, "answered before hosting"
    assert node.jobs, "the files are made by the worker, not by the handler"
    node.settle()
    assert answer.done
    return answer.value


def test_create_topics_answers_once_its_partitions_are_hosted(node: Serving) -> None:
    topic = CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=40, replication_factor=1, assignments=[], configs=[]
    )
    request = CreateTopicsRequest(topics=[topic], timeout_ms=0, validate_only=False)
    answer = node.call(api_keys.CREATE_TOPICS, 7, request)
    assert not (Path(node.b.logs.log_dirs[0]) / "t-0").exists()
    value = waits_until_hosted(node, answer)
    assert value.topics[0].error_code == errors.NONE
    assert [node.produce("t", i) for i in range(40)] == [errors.NONE] * 40
    again = node.call(api_keys.CREATE_TOPICS, 7, request)  # made nothing: answered at once
    assert again.topics[0].error_code == errors.TOPIC_ALREADY_EXISTS
    more = CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=45, assignments=None)
        ],
        timeout_ms=0,
        validate_only=False,
    )
    value = waits_until_hosted(node, node.call(api_keys.CREATE_PARTITIONS, 3, more))
    assert value.results[0].error_code == errors.NONE
    assert [node.produce("t", i) for i in range(40, 45)] == [errors.NONE] * 5


def test_the_first_find_coordinator_answers_once_the_offsets_topic_is_hosted(node: Serving) -> None:
    request = FindCoordinatorRequest(key="g", key_type=0)
    value = waits_until_hosted(node, node.call(api_keys.FIND_COORDINATOR, 3, request))
    assert value.error_code == errors.NONE and value.node_id == node.b.node_id
    again = node.call(api_keys.FIND_COORDINATOR, 3, request)
    assert not isinstance(again, Pending) and again.error_code == errors.NONE


def test_a_metadata_that_auto_creates_a_topic_names_its_leaders(node: Serving) -> None:
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="auto")],
        allow_auto_topic_creation=True,
    )
    value = waits_until_hosted(node, node.call(api_keys.METADATA, 9, request))
    (topic,) = value.topics
    assert topic.error_code == errors.NONE and topic.partitions
    assert all(p.error_code == errors.NONE for p in topic.partitions)
    assert all(p.leader_id == node.b.node_id for p in topic.partitions)
    assert node.produce("auto", 0) == errors.NONE
