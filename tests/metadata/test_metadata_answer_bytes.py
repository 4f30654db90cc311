"""Metadata answers write each topic's partitions from bytes kept per topic
(handlers/metadata_partitions.py): the bytes on the wire are those of the answer built as one
message object per partition (`topic_response`, the reference) and encoded by the generated
encoder, for every version, and stay so after each kind of change, each asked again after
the answer before it was kept: a leader moved, an ISR shrunk, a partition no longer hosted, a
topic deleted and created again, and (networked) a leader without the request's listener, a
broker registering it, a leader moved in the image."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.controller.admin import TopicSpec
from gregor.handlers import metadata
from gregor.handlers.context import LISTENER_NAME, RequestContext
from gregor.handlers.metadata_partitions import PartitionArrays
from gregor.metadata import records as r
from gregor.metadata.cluster import ClusterView
from gregor.metadata.image import EMPTY_IMAGE, MetadataImage, PartitionRegistration
from gregor.metadata.store import TopicInfo
from gregor.protocol import api_keys, codec, errors
from gregor.protocol.headers import RequestHeader
from gregor.protocol.messages import MetadataRequest, MetadataResponse
from gregor.replication.partition import CHANGES_KEPT

pytestmark = pytest.mark.unit

VERSIONS = range(api_keys.BY_KEY[api_keys.METADATA].min_version, 14)


def all_topics(version: int) -> Any:
    return MetadataRequest(topics=[] if version == 0 else None, allow_auto_topic_creation=False)


def context(services: Any, version: int, listener: str | None = None) -> RequestContext:
    header = RequestHeader(api_keys.METADATA, version, 1, "test")
    connection = {} if listener is None else {LISTENER_NAME: listener}
    return RequestContext(services, header, "127.0.0.1:1", connection)


def wire(version: int, response: Any) -> bytes:
    return codec.join(codec.encode_response(api_keys.METADATA, version, 7, response))


def reference(ctx: RequestContext, response: Any) -> Any:
    """`response` with each topic's partitions built as message objects (`topic_response`)."""
    topics = []
    for t in response.topics:
        info = ctx.services.store.topics.get(t.name) if t.error_code == errors.NONE else None
        if info is None:
            topics.append(t)
            continue
        built = metadata.topic_response(ctx, info)
        built.topic_authorized_operations = t.topic_authorized_operations
        topics.append(built)
    return MetadataResponse(
        throttle_time_ms=response.throttle_time_ms,
        brokers=response.brokers,
        cluster_id=response.cluster_id,
        controller_id=response.controller_id,
        topics=topics,
        cluster_authorized_operations=response.cluster_authorized_operations,
    )


def check_answers(services: Any, listener: str | None = None) -> list[bytes]:
    """Every version's answer for all topics, twice (the second from what the first kept), as
    the reference's bytes; their bytes. (Each against its own reference: a networked node
    names a controller at random.)"""
    out = []
    for version in VERSIONS:
        ctx = context(services, version, listener)
        first = metadata._answer(ctx, all_topics(version), [])
        again = metadata._answer(ctx, all_topics(version), [])
        expected = wire(version, reference(ctx, first))
        assert wire(version, first) == expected, f"v{version}"
        assert wire(version, again) == wire(version, reference(ctx, again)), f"v{version} kept"
        kept = [t.partitions for t in again.topics]
        assert all(x is y for x, y in zip(kept, (t.partitions for t in first.topics), strict=True))
        out.append(expected)
    return out


# -- one node -----------------------------------------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Iterator[BrokerServer]:
    b = BrokerServer(BrokerConfig.load(None, {"log.dirs": str(tmp_path / "logs")}))
    b.logs.startup()
    b.services.apply_metadata()
    for name, count in (("a", 3), ("b", 130), ("__consumer_offsets", 2)):
        b.admin.create_topic(TopicSpec(name, count, 1))
    b.services.apply_metadata()
    yield b
    b.logs.shutdown()


def test_every_version_writes_the_bytes_of_the_answer_built_per_partition(node: Any) -> None:
    before = check_answers(node.services)
    assert before == check_answers(node.services)  # nothing changed: the same answers
    # read in process, the kept partitions are the message objects of the reference
    ctx = context(node.services, 12)
    answer = metadata._answer(ctx, all_topics(12), [])
    for t in answer.topics:
        built = metadata.topic_response(ctx, node.services.store.topics[t.name])
        assert t.partitions == built.partitions and list(t.partitions) == built.partitions
        assert t.partitions[1].leader_id == node.node_id


def test_a_leader_moved_is_answered_at_once(node: Any) -> None:
    before = check_answers(node.services)
    p = node.replicas.get("a", 1)
    p.make_follower(
        PartitionRegistration(
            replicas=(node.node_id, 7), isr=(7,), leader=7,
            leader_epoch=p.leader_epoch + 1, partition_epoch=p.partition_epoch + 1,
        )
    )  # fmt: skip
    after = check_answers(node.services)
    assert all(x != y for x, y in zip(before, after, strict=True))
    answer = metadata._answer(context(node.services, 12), all_topics(12), [])
    (a,) = [t for t in answer.topics if t.name == "a"]
    assert (a.partitions[1].leader_id, a.partitions[1].isr_nodes) == (7, [7])


def test_an_isr_shrunk_and_a_partition_no_longer_hosted(node: Any) -> None:
    before = check_answers(node.services)
    node.replicas.get("b", 129).isr = []  # as an AlterPartition answer sets it
    shrunk = check_answers(node.services)
    assert all(x != y for x, y in zip(before, shrunk, strict=True))
    node.replicas.get("b", 0).leader_epoch += 1
    moved = check_answers(node.services)
    assert all(x != y for x, y in zip(moved[7:], shrunk[7:], strict=True))  # v7+ carry it
    for index in (3, 64, 65):  # a few of the topic's 130: only they are written again
        node.replicas.get("b", index).isr = []
    few = check_answers(node.services)
    assert all(x != y for x, y in zip(moved, few, strict=True))
    node.replicas.get("b", 8).isr = []  # then more changes than are listed: all written again
    for _ in range(CHANGES_KEPT + 1):
        node.replicas.get("b", 7).leader_epoch += 1
    moved = check_answers(node.services)
    assert all(x != y for x, y in zip(moved, few, strict=True))
    node.replicas.remove("a", 2)
    gone = check_answers(node.services)
    assert all(x != y for x, y in zip(moved, gone, strict=True))
    answer = metadata._answer(context(node.services, 9), all_topics(9), [])
    (a,) = [t for t in answer.topics if t.name == "a"]
    assert a.partitions[2].error_code == errors.LEADER_NOT_AVAILABLE


def test_a_topic_deleted_and_created_again(node: Any) -> None:
    before = check_answers(node.services)
    node.admin.delete_topic("a")
    node.services.apply_metadata()
    check_answers(node.services)
    node.admin.create_topic(TopicSpec("a", 3, 1))
    node.services.apply_metadata()
    again = check_answers(node.services)
    assert all(x != y for x, y in zip(before[10:], again[10:], strict=True))  # a new topic id
    assert len(again[1]) == len(before[1])


# -- networked: partitions led elsewhere, from the image ------------------------------------------


def image(
    external_on_2: bool, leader_of_0: int = 2, replicas: tuple[int, ...] = (2, 1)
) -> MetadataImage:
    """Brokers 1 (INTERNAL, EXTERNAL) and 2 (INTERNAL, and EXTERNAL if asked); topic "t" of 3
    partitions: 0 led by `leader_of_0`, 1 by broker 1, 2 by none."""
    recs: list[Any] = [r.FeatureLevelRecord(name="metadata.version", feature_level=25)]
    recs.append(registration(1, ("INTERNAL", "EXTERNAL")))
    recs.append(registration(2, ("INTERNAL",) + ("EXTERNAL",) * external_on_2))
    topic_id = uuid.UUID(int=100)
    recs.append(r.TopicRecord(name="t", topic_id=topic_id))
    for i, leader in enumerate((leader_of_0, 1, -1)):
        recs.append(
            r.PartitionRecord(
                partition_id=i, topic_id=topic_id, replicas=list(replicas), isr=list(replicas),
                leader=leader, leader_epoch=3, partition_epoch=0,
                directories=[uuid.UUID(int=0)] * len(replicas),
            )
        )  # fmt: skip
    return EMPTY_IMAGE.replay((rec, i, 1) for i, rec in enumerate(recs))


def registration(broker: int, listeners: tuple[str, ...]) -> Any:
    return r.RegisterBrokerRecord(
        broker_id=broker, incarnation_id=uuid.UUID(int=broker), broker_epoch=broker,
        end_points=[
            r.BrokerEndpoint(name=n, host=f"{n.lower()}{broker}", port=9000 + broker, security_protocol=0)
            for n in listeners
        ],
        rack=None, fenced=False, log_dirs=[uuid.UUID(int=9)],
    )  # fmt: skip


class Hosting:
    """A node hosting none of the partitions (no logs): what `PartitionArrays` reads."""

    partitions: dict[Any, Any] = {}

    def get(self, topic: str, index: int) -> Any:
        return None

    def state_stamp(self, topic: str) -> int:
        return 0

    def changed_since(self, topic: str, stamp: int) -> list[int] | None:
        return None


def networked(img: MetadataImage, replicas: tuple[int, ...] = (2, 1)) -> Any:
    info = TopicInfo("t", uuid.UUID(int=100), [list(replicas)] * 3)
    store = SimpleNamespace(
        image=img, networked=True, leader_id=None, topics={"t": info}, cluster_id="c"
    )
    services = SimpleNamespace(
        store=store, replicas=Hosting(), authorizer=None, partition_arrays=PartitionArrays(),
        node_id=3,
    )  # fmt: skip
    services.cluster = ClusterView(store, 3, quorum=True, rng=random.Random(1))
    services.cluster_brokers = services.cluster.brokers
    services.controller_id = services.cluster.controller_id
    services.cluster_id = "c"
    return services


def partition_errors(services: Any, version: int, listener: str) -> list[int]:
    answer = metadata._answer(context(services, version, listener), all_topics(version), [])
    return [p.error_code for p in answer.topics[0].partitions]


def test_networked_a_leader_without_the_listener_then_with_it() -> None:
    services = networked(image(external_on_2=False))
    for listener in ("EXTERNAL", "INTERNAL"):
        check_answers(services, listener)
    assert partition_errors(services, 12, "EXTERNAL") == [
        errors.LISTENER_NOT_FOUND, errors.NONE, errors.LEADER_NOT_AVAILABLE,
    ]  # fmt: skip
    assert partition_errors(services, 5, "EXTERNAL")[0] == errors.LEADER_NOT_AVAILABLE
    assert partition_errors(services, 12, "INTERNAL")[0] == errors.NONE
    # each change below leaves every other input as it was (the same objects)
    store = services.store
    store.image = replayed(store.image, registration(2, ("INTERNAL", "EXTERNAL")))
    check_answers(services, "EXTERNAL")
    assert partition_errors(services, 12, "EXTERNAL")[0] == errors.NONE
    change = r.PartitionChangeRecord(partition_id=0, topic_id=uuid.UUID(int=100), leader=1)
    store.image = replayed(store.image, change)  # the leader moved
    check_answers(services, "EXTERNAL")
    answer = metadata._answer(context(services, 12, "EXTERNAL"), all_topics(12), [])
    assert answer.topics[0].partitions[0].leader_id == 1
    store.topics["t"] = TopicInfo("t", uuid.UUID(int=100), [[2, 1]] * 3 + [[1, 2]])
    check_answers(services, "EXTERNAL")  # a partition the image does not know yet
    assert partition_errors(services, 12, "EXTERNAL")[3] == errors.LEADER_NOT_AVAILABLE
    store.networked = False  # (no node changes this; an input all the same)
    check_answers(services, "EXTERNAL")
    assert partition_errors(services, 12, "EXTERNAL")[1] == errors.LEADER_NOT_AVAILABLE


def replayed(img: MetadataImage, rec: Any) -> MetadataImage:
    return img.replay([(rec, img.offset + 1, 1)])


def test_an_encoded_array_of_another_version_is_written_from_its_elements() -> None:
    services = networked(image(external_on_2=True))
    info = services.store.topics["t"]
    kept = services.partition_arrays.partitions(services.replicas, services.store, info, 12, None)
    for version in VERSIONS:
        ctx = context(services, version)
        built = metadata.topic_response(ctx, info)
        carried = MetadataResponse.MetadataResponseTopic(
            error_code=0, name="t", topic_id=info.topic_id, partitions=kept
        )
        assert wire(version, MetadataResponse(topics=[carried])) == wire(
            version, MetadataResponse(topics=[built])
        ), f"v{version}"


def test_arrays_of_127_replicas_and_more() -> None:
    """A flexible array's length takes two varint bytes from 127 elements."""
    many = (2, 1) + tuple(range(10, 140))
    services = networked(image(external_on_2=True, replicas=many), many)
    check_answers(services, "EXTERNAL")
    services.store.networked = False  # the topic's replicas, no ISR
    check_answers(services, "EXTERNAL")
    answer = metadata._answer(context(services, 12, "EXTERNAL"), all_topics(12), [])
    assert list(answer.topics[0].partitions[2].replica_nodes) == list(many)
