"""The metadata store over the KRaft log, in-process: a one-voter quorum leads at once, every
write is records committed to `__cluster_metadata-0` and replayed into the views, a restart
replays the log, a pre-KRaft JSON store is migrated (ids kept, idempotently), and the log
manager leaves the metadata log alone."""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from pathlib import Path

import pytest

from gregor.clock import ManualClock
from gregor.controller.local import LocalController, MigrationError
from gregor.controller.quorum_controller import DEFAULT_METADATA_VERSION, Listener
from gregor.metadata import records as r
from gregor.metadata.image import BROKER_RESOURCE, METADATA_VERSION, TOPIC_RESOURCE
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.store import FILE_NAME, MIGRATED_SUFFIX, MetadataStore
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.raft.quorum_state import Kind
from gregor.raft.storage_log import DIR_NAME
from gregor.storage.log_manager import METADATA_LOG_DIR, LogManager

from .helpers import metadata_batches, metadata_records, names

NOW = 1_700_000_000_000
CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"
DIR_ID = uuid.UUID(int=12345)


def start(
    d: Path, node_id: int = 1, legacy: MetadataStore | None = None
) -> tuple[RaftMetadataStore, LocalController]:
    store = RaftMetadataStore.open(str(d), node_id, CLUSTER, clock=ManualClock(NOW))
    controller = LocalController(store, node_id, {})
    controller.start([Listener("PLAINTEXT", "127.0.0.1", 9092)], [DIR_ID], None, legacy, NOW)
    return store, controller


def test_a_sole_voter_leads_at_once_and_bootstraps_a_new_log(tmp_path: Path) -> None:
    store, _ = start(tmp_path)  # the clock never moves: no election timeout is waited for
    assert store.node.state is Kind.LEADER and store.epoch == 1
    image = store.image
    assert image.features[METADATA_VERSION] == DEFAULT_METADATA_VERSION
    reg = image.brokers[1]
    assert not reg.fenced and reg.log_dirs == (DIR_ID,)
    assert [(e.name, e.host, e.port) for e in reg.listeners] == [("PLAINTEXT", "127.0.0.1", 9092)]
    recs = metadata_records(str(tmp_path))
    assert names(recs) == [
        "FeatureLevelRecord",
        "RegisterBrokerRecord",
        "BrokerRegistrationChangeRecord",
    ]
    assert reg.epoch == recs[1][0], "the broker epoch is its RegisterBrokerRecord's offset"
    deadline = store.poll(NOW)  # the broker's timer drives the node; nothing is due now
    assert deadline is not None and NOW < deadline <= NOW + 1000
    assert store.node.state is Kind.LEADER and store.image is image
    with open(tmp_path / DIR_NAME / "quorum-state") as f:
        state = json.load(f)
    assert (state["leaderId"], state["leaderEpoch"], state["currentVoters"]) == (
        1,
        1,
        [{"voterId": 1}],
    )
    store.close()


def test_every_write_is_committed_records_replayed_into_the_views(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    first = len(metadata_records(str(tmp_path)))
    info = ctl.create_topic(
        "orders", [[1], [1]], {"cleanup.policy": "compact", "retention.ms": "1000"}
    )
    assert store.topics["orders"] is info and store.topic_by_id(info.topic_id) is info
    assert (info.replicas, info.configs) == (
        [[1], [1]],
        {"cleanup.policy": "compact", "retention.ms": "1000"},
    )
    assert ctl.add_partitions("orders", [[1]]) is info and info.replicas == [[1], [1], [1]]
    ctl.set_topic_configs("orders", {"cleanup.policy": "compact", "segment.ms": "5000"})
    assert store.topics["orders"] is info
    assert info.configs == {"cleanup.policy": "compact", "segment.ms": "5000"}
    ctl.set_broker_configs("", {"log.retention.ms": "7000"})
    ctl.set_broker_configs("1", {"log.retention.ms": "8000", "num.partitions": "3"})
    assert dict(store.dynamic(1)) == {"log.retention.ms": "8000", "num.partitions": "3"}
    assert store.broker_configs_of("") == {"log.retention.ms": "7000"}
    assert ctl.allocate_producer_ids(1000) == 0 and ctl.allocate_producer_ids(1000) == 1000
    doomed = ctl.create_topic("doomed", [[1]], {})
    assert ctl.delete_topic("doomed") is doomed
    assert "doomed" not in store.topics and store.topic_by_id(doomed.topic_id) is None
    store.close()

    recs = [rec for _, rec in metadata_records(str(tmp_path))[first:]]
    t = info.topic_id
    expected = [
        r.TopicRecord(name="orders", topic_id=t),
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE,
            resource_name="orders",
            name="cleanup.policy",
            value="compact",
        ),
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE, resource_name="orders", name="retention.ms", value="1000"
        ),
    ]
    expected += [
        r.PartitionRecord(
            partition_id=i,
            topic_id=t,
            replicas=[1],
            isr=[1],
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
            directories=[uuid.UUID(int=0)],
        )
        for i in range(3)
    ]
    expected += [
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE, resource_name="orders", name="retention.ms", value=None
        ),
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE, resource_name="orders", name="segment.ms", value="5000"
        ),
        r.ConfigRecord(
            resource_type=BROKER_RESOURCE, resource_name="", name="log.retention.ms", value="7000"
        ),
        r.ConfigRecord(
            resource_type=BROKER_RESOURCE, resource_name="1", name="log.retention.ms", value="8000"
        ),
        r.ConfigRecord(
            resource_type=BROKER_RESOURCE, resource_name="1", name="num.partitions", value="3"
        ),
    ]
    epoch = store.image.brokers[1].epoch
    expected += [
        r.ProducerIdsRecord(broker_id=1, broker_epoch=epoch, next_producer_id=1000),
        r.ProducerIdsRecord(broker_id=1, broker_epoch=epoch, next_producer_id=2000),
        r.TopicRecord(name="doomed", topic_id=doomed.topic_id),
        r.PartitionRecord(
            partition_id=0,
            topic_id=doomed.topic_id,
            replicas=[1],
            isr=[1],
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
            directories=[uuid.UUID(int=0)],
        ),
        r.RemoveTopicRecord(topic_id=doomed.topic_id),
    ]
    assert recs == expected


def test_a_restart_replays_the_log(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    info = ctl.create_topic("orders", [[1], [1]], {"retention.ms": "1000"})
    ctl.set_broker_configs("1", {"num.partitions": "3"})
    ctl.allocate_producer_ids(1000)
    store.close()

    again, ctl2 = start(tmp_path)
    assert again.epoch == 2, "a new epoch: the leader of epoch 1 restarts Resigned"
    back = again.topics["orders"]
    assert (back.topic_id, back.replicas, back.configs) == (
        info.topic_id,
        [[1], [1]],
        {"retention.ms": "1000"},
    )
    assert dict(again.dynamic(1)) == {"num.partitions": "3"}
    assert again.next_producer_id == 1000 and ctl2.allocate_producer_ids(1000) == 1000
    reg = again.image.brokers[1]
    assert not reg.fenced and reg.epoch > store.image.brokers[1].epoch, "a new registration"
    part = again.image.partition("orders", 0)
    assert part is not None and (part.leader, part.isr) == (1, (1,))
    again.close()


def test_not_the_leader_refuses_with_not_controller(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    store.node.resign(NOW)
    with pytest.raises(KafkaError) as exc:
        ctl.create_topic("orders", [[1]], {})
    assert exc.value.code == errors.BY_NAME["NOT_CONTROLLER"].code
    store.close()


def test_the_metadata_log_name_is_not_a_topic_name(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    with pytest.raises(KafkaError) as exc:
        ctl.create_topic("__cluster_metadata", [[1]], {})
    assert exc.value.code == errors.INVALID_REQUEST
    store.close()


def test_a_large_commit_is_split_into_batches_and_stays_whole(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    before = store.next_offset
    # A client's request may write at most 10,000 records (Kafka's MAX_RECORDS_PER_USER_OP)...
    with pytest.raises(KafkaError) as exc:
        ctl.create_topic("wide", [[1]] * 20_000, {})
    assert exc.value.code == errors.POLICY_VIOLATION and store.next_offset == before
    # ...but a commit may be larger (a migration): the store frames it as a transaction.
    topic_id = uuid.uuid4()
    partitions = [
        r.PartitionRecord(
            partition_id=i, topic_id=topic_id, replicas=[1], isr=[1], leader=1,
            leader_epoch=0, partition_epoch=0, directories=[uuid.UUID(int=0)],
        )
        for i in range(20_000)
    ]  # fmt: skip
    store.commit([r.TopicRecord(name="wide", topic_id=topic_id), *partitions], "create topic wide")
    bases = [base for base, count in metadata_batches(str(tmp_path)) if base >= before]
    assert len(bases) > 1, "more than MAX_BATCH_BYTES: several batches"
    assert sum(count for base, count in metadata_batches(str(tmp_path)) if base >= before) == 20_003
    framed = [rec for offset, rec in metadata_records(str(tmp_path)) if offset >= before]
    kinds = [type(rec).__name__ for rec in framed[1:-1]]
    assert framed[0] == r.BeginTransactionRecord(name="create topic wide"), (
        "a transaction: Begin first"
    )
    assert framed[-1] == r.EndTransactionRecord(), "End last"
    assert kinds == ["TopicRecord"] + ["PartitionRecord"] * 20_000
    store.close()
    again, _ = start(tmp_path)
    assert again.topics["wide"].partitions == 20_000
    again.close()


def test_the_log_manager_leaves_the_metadata_log_alone(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    ctl.create_topic("orders", [[1]], {})
    store.close()
    assert METADATA_LOG_DIR == DIR_NAME
    logs = LogManager([str(tmp_path)])
    logs.startup()
    assert list(logs.partitions()) == []
    with pytest.raises(ValueError):
        logs.get_or_create("__cluster_metadata", 0)
    logs.shutdown()
    assert os.path.isdir(tmp_path / DIR_NAME)


# -- migration -------------------------------------------------------------------------------------


def legacy_store(d: Path) -> MetadataStore:
    old = MetadataStore(str(d), "Yp6Kc2WfQ3m9o6sXb0XnZg")
    old.create_topic(
        "orders", [[1], [1], [1]], {"cleanup.policy": "compact", "min.insync.replicas": "1"}
    )
    old.create_topic("logs.v1", [[1]], {})
    old.set_broker_configs("", {"log.retention.ms": "60000"})
    old.set_broker_configs("1", {"num.partitions": "4"})
    old.allocate_producer_ids(1000)
    old.allocate_producer_ids(1000)
    return old


def test_migration_keeps_topic_ids_configs_and_producer_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = legacy_store(tmp_path)
    caplog.set_level(logging.INFO, logger="gregor.controller")
    store, ctl = start(tmp_path, legacy=MetadataStore.load(str(tmp_path)))
    for name, info in old.topics.items():
        new = store.topics[name]
        assert (new.topic_id, new.replicas, new.configs) == (
            info.topic_id,
            info.replicas,
            info.configs,
        )
    assert store.broker_configs_of("") == {"log.retention.ms": "60000"}
    assert dict(store.dynamic(1)) == {"log.retention.ms": "60000", "num.partitions": "4"}
    assert store.next_producer_id == 2000 and ctl.allocate_producer_ids(1000) == 2000
    assert not os.path.exists(tmp_path / FILE_NAME)
    assert os.path.exists(tmp_path / (FILE_NAME + MIGRATED_SUFFIX))
    assert any("migrated" in m and FILE_NAME in m for m in caplog.messages)
    recs = metadata_records(str(tmp_path))
    # One batch: bootstrap, registration and the migrated store together.
    assert names(recs)[:3] == [
        "FeatureLevelRecord",
        "RegisterBrokerRecord",
        "BrokerRegistrationChangeRecord",
    ]
    assert names(recs).count("TopicRecord") == 2
    store.close()

    # A crash between the commit and the rename leaves the old file: the next start writes
    # nothing twice, and renames it.
    shutil.copy(tmp_path / (FILE_NAME + MIGRATED_SUFFIX), tmp_path / FILE_NAME)
    again, _ = start(tmp_path, legacy=MetadataStore.load(str(tmp_path)))
    assert names(metadata_records(str(tmp_path))).count("TopicRecord") == 2
    assert again.topics["orders"].topic_id == old.topics["orders"].topic_id
    assert not os.path.exists(tmp_path / FILE_NAME)
    again.close()


def test_migration_refuses_a_topic_the_log_has_under_another_id(tmp_path: Path) -> None:
    store, ctl = start(tmp_path)
    ctl.create_topic("orders", [[1]], {})
    store.close()
    legacy_store(tmp_path)
    with pytest.raises(MigrationError, match="orders"):
        start(tmp_path, legacy=MetadataStore.load(str(tmp_path)))
    assert os.path.exists(tmp_path / FILE_NAME), "nothing renamed when nothing was migrated"
