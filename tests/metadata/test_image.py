"""MetadataImage built by replay: brokers, topics, partition changes, configs, features."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gregor.metadata import records as r
from gregor.metadata.image import (
    BROKER_RESOURCE,
    DIRECTORY_MIGRATING,
    EMPTY_IMAGE,
    TOPIC_RESOURCE,
    MetadataImage,
    MetadataReplayError,
    replay_bytes,
)

T1 = uuid.UUID(int=101)
T2 = uuid.UUID(int=102)
DIRS = [uuid.UUID(int=0)] * 3


def replay(image: MetadataImage, *records: Any, epoch: int = 1) -> MetadataImage:
    start = image.offset + 1
    return image.replay((rec, start + i, epoch) for i, rec in enumerate(records))


def register(broker_id: int, epoch: int, fenced: bool = True) -> Any:
    return r.RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id * 1000 + epoch),
        broker_epoch=epoch,
        end_points=[
            r.BrokerEndpoint(name="PLAINTEXT", host=f"h{broker_id}", port=9092, security_protocol=0)
        ],
        rack=None,
        fenced=fenced,
        log_dirs=[uuid.UUID(int=9)],
    )


def topic_with_partition(name: str = "t", topic_id: uuid.UUID = T1) -> list[Any]:
    return [
        r.TopicRecord(name=name, topic_id=topic_id),
        r.PartitionRecord(
            partition_id=0,
            topic_id=topic_id,
            replicas=[1, 2, 3],
            isr=[1, 2, 3],
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
            directories=DIRS,
        ),
    ]


def cluster() -> MetadataImage:
    return replay(
        EMPTY_IMAGE,
        r.FeatureLevelRecord(name="metadata.version", feature_level=25),
        register(1, 1),
        register(2, 2),
        register(3, 3),
        r.UnfenceBrokerRecord(id=1, epoch=1),
        r.UnfenceBrokerRecord(id=2, epoch=2),
        r.UnfenceBrokerRecord(id=3, epoch=3),
        *topic_with_partition(),
    )


def test_replay_builds_brokers_topics_and_offsets() -> None:
    image = cluster()
    assert image.offset == 8 and image.epoch == 1
    assert image.features == {"metadata.version": 25}
    assert image.unfenced_brokers() == [1, 2, 3]
    b1 = image.brokers[1]
    assert (b1.epoch, b1.listeners[0].host, b1.listeners[0].port, b1.fenced) == (
        1,
        "h1",
        9092,
        False,
    )
    p = image.partition("t", 0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == (
        (1, 2, 3),
        (1, 2, 3),
        1,
        0,
        0,
    )
    assert image.topic("t").topic_id == T1  # type: ignore[union-attr]


def test_replay_is_deterministic_and_leaves_the_old_image_alone() -> None:
    a, b = cluster(), cluster()
    assert a == b
    after = replay(a, r.FenceBrokerRecord(id=2, epoch=2))
    assert a.brokers[2].fenced is False and after.brokers[2].fenced is True
    assert a == b and after != a
    with pytest.raises(TypeError):
        a.brokers[9] = a.brokers[1]  # type: ignore[index]


def test_replay_copies_only_what_the_records_touch() -> None:
    a = cluster()
    config = r.ConfigRecord(
        resource_type=TOPIC_RESOURCE, resource_name="t", name="retention.ms", value="5"
    )
    b = replay(a, config)
    assert b.brokers is a.brokers and b.topics_by_id is a.topics_by_id, "untouched: shared"
    assert (
        b.configs is not a.configs
        and a.configs == {}
        and b.config(TOPIC_RESOURCE, "t") == {"retention.ms": "5"}
    )
    c = replay(b, *topic_with_partition("u", T2))
    assert c.configs is b.configs and c.topics_by_id is not b.topics_by_id
    assert set(b.topics_by_name) == {"t"} and set(c.topics_by_name) == {"t", "u"}
    assert a.topic("t") is c.topic("t"), "a topic nothing touched is the same object"
    with pytest.raises(MetadataReplayError):  # a failed replay leaves the image as it was
        replay(c, r.RemoveTopicRecord(topic_id=T2), r.RemoveTopicRecord(topic_id=T2))
    assert set(c.topics_by_name) == {"t", "u"} and c.partition("u", 0) is not None


def test_replay_bytes_decodes_framed_records() -> None:
    entries = [(r.encode(rec), i, 3) for i, rec in enumerate(topic_with_partition())]
    image = replay_bytes(EMPTY_IMAGE, entries)
    assert image.partition("t", 0).leader == 1  # type: ignore[union-attr]
    assert (image.offset, image.epoch) == (1, 3)


def test_a_new_incarnation_replaces_the_registration() -> None:
    image = replay(cluster(), register(2, 20))
    assert image.brokers[2].epoch == 20 and image.brokers[2].fenced
    with pytest.raises(MetadataReplayError, match="epoch 20"):
        replay(image, r.UnfenceBrokerRecord(id=2, epoch=2))
    image = replay(image, r.UnregisterBrokerRecord(broker_id=2, broker_epoch=20))
    assert 2 not in image.brokers


def test_broker_registration_change_record() -> None:
    image = replay(
        cluster(), r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=1)
    )
    assert image.brokers[1].fenced
    image = replay(
        image,
        r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=1),
    )
    assert image.brokers[1].fenced and image.brokers[1].in_controlled_shutdown
    image = replay(image, r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=-1))
    assert not image.brokers[1].fenced


def test_partition_change_absent_fields_keep_their_values() -> None:
    image = replay(cluster(), r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1, 2]))
    p = image.partition("t", 0)
    assert p is not None
    # ISR shrink: leader and leader epoch unchanged, partition epoch bumped.
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == (
        (1, 2, 3),
        (1, 2),
        1,
        0,
        1,
    )


def test_partition_change_leader_change_bumps_the_leader_epoch() -> None:
    image = replay(
        cluster(), r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=2, isr=[2, 3])
    )
    p = image.partition("t", 0)
    assert p is not None and (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (
        2,
        (2, 3),
        1,
        1,
    )
    # -1: no leader, still a leader change.
    image = replay(image, r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1))
    p = image.partition("t", 0)
    assert p is not None and (p.leader, p.has_leader(), p.leader_epoch, p.partition_epoch) == (
        -1,
        False,
        2,
        2,
    )
    # The same leader written again also bumps the epoch (how the controller asks for a bump).
    image = replay(image, r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1))
    p = image.partition("t", 0)
    assert p is not None and (p.leader_epoch, p.partition_epoch) == (3, 3)


def test_partition_change_replicas_and_recovery_state() -> None:
    image = replay(
        cluster(),
        r.PartitionChangeRecord(
            partition_id=0,
            topic_id=T1,
            replicas=[3, 1],
            isr=[3],
            leader=3,
            leader_recovery_state=1,
        ),
    )
    p = image.partition("t", 0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.leader_recovery_state) == ((3, 1), (3,), 3, 1)
    assert p.directories == (DIRECTORY_MIGRATING,) * 2  # replicas changed without directories
    image = replay(image, r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[3, 1]))
    assert image.partition("t", 0).leader_recovery_state == 1  # type: ignore[union-attr]


def test_remove_topic_removes_partitions_and_configs() -> None:
    image = replay(
        cluster(),
        *topic_with_partition("u", T2),
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE, resource_name="t", name="retention.ms", value="5"
        ),
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE, resource_name="u", name="retention.ms", value="6"
        ),
        r.RemoveTopicRecord(topic_id=T1),
    )
    assert image.topic("t") is None and T1 not in image.topics_by_id
    assert image.config(TOPIC_RESOURCE, "t") == {}
    assert image.config(TOPIC_RESOURCE, "u") == {"retention.ms": "6"}
    # A topic of the same name can be created again, with a new id.
    image = replay(image, *topic_with_partition("t", uuid.UUID(int=7)))
    assert image.topic("t").topic_id == uuid.UUID(int=7)  # type: ignore[union-attr]
    with pytest.raises(MetadataReplayError):
        replay(image, r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=2))


def test_configs_set_and_delete() -> None:
    image = replay(
        EMPTY_IMAGE,
        r.ConfigRecord(
            resource_type=BROKER_RESOURCE, resource_name="", name="log.retention.ms", value="1"
        ),
        r.ConfigRecord(
            resource_type=BROKER_RESOURCE, resource_name="1", name="log.retention.ms", value="2"
        ),
        r.ConfigRecord(
            resource_type=BROKER_RESOURCE, resource_name="", name="log.retention.ms", value=None
        ),
    )
    assert image.config(BROKER_RESOURCE, "") == {}
    assert (BROKER_RESOURCE, "") not in image.configs
    assert image.config(BROKER_RESOURCE, "1") == {"log.retention.ms": "2"}


def test_producer_ids_and_features() -> None:
    image = replay(
        EMPTY_IMAGE,
        r.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=1000),
        r.FeatureLevelRecord(name="kraft.version", feature_level=1),
        r.FeatureLevelRecord(name="kraft.version", feature_level=0),
        r.NoOpRecord(),
    )
    assert image.next_producer_id == 1000 and image.features == {} and image.offset == 3
    with pytest.raises(MetadataReplayError, match="below"):
        replay(image, r.ProducerIdsRecord(broker_id=1, next_producer_id=10))


def test_records_for_unknown_things_are_refused() -> None:
    with pytest.raises(MetadataReplayError, match="not registered"):
        replay(EMPTY_IMAGE, r.FenceBrokerRecord(id=1, epoch=0))
    with pytest.raises(MetadataReplayError, match="no topic"):
        replay(EMPTY_IMAGE, r.PartitionRecord(partition_id=0, topic_id=T1, replicas=[1], isr=[1]))
    with pytest.raises(MetadataReplayError, match="exists"):
        replay(cluster(), r.TopicRecord(name="t", topic_id=T2))


def test_a_topic_created_and_removed_in_one_replay_leaves_the_others_changes() -> None:
    """One replay: a topic created and removed again, and a partition change of another
    topic; the change is in the new image (a creation's own partitions need no second view;
    another topic's do)."""
    image = replay(
        cluster(),
        *topic_with_partition("gone", T2),
        r.RemoveTopicRecord(topic_id=T2),
        r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1, 2]),
    )
    assert image.topic("gone") is None
    assert image.partition("t", 0).isr == (1, 2)
    assert image.topics_by_id[T1].partitions[0].isr == (1, 2)
