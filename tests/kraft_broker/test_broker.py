"""`gregor serve` keeps its metadata in the KRaft log: real brokers (gregor.Broker), real clients.

Topics, configs and producer ids survive clean restarts and a SIGKILL right after an acknowledged
CreateTopics; the records in `__cluster_metadata-0` are what was done; a pre-KRaft data dir is
migrated with its topic ids; meta.properties of another cluster or node is refused; `gregor
storage format` decides the cluster id; DescribeQuorum and `gregor quorum describe` name this
node as the leader; the metadata log is no topic to clients."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from gregor import Broker
from gregor.cli.main import main as cli_main
from gregor.metadata import meta_properties
from gregor.metadata.store import FILE_NAME, MIGRATED_SUFFIX, MetadataStore
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    CreateTopicsRequest,
    DescribeLogDirsRequest,
    DescribeQuorumRequest,
    InitProducerIdRequest,
    MetadataRequest,
)
from gregor.raft.storage_log import DIR_NAME
from gregor.testing.broker import BrokerStartError

from .helpers import Raw, metadata_records

TIMEOUT = 15


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(data_dir=str(tmp_path)) as b:
        yield b


def logs_dir(b: Broker) -> str:
    return os.path.join(b.data_dir, "logs")


def create(admin: AdminClient, *topics: NewTopic) -> None:
    for f in admin.create_topics(list(topics), request_timeout=TIMEOUT).values():
        f.result()


def topic_ids(bootstrap: str) -> dict[str, uuid.UUID]:
    with Raw(bootstrap) as raw:
        md = raw.call(
            api_keys.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False)
        )
    return {t.name: t.topic_id for t in md.topics}


def init_producer_id(bootstrap: str) -> int:
    with Raw(bootstrap) as raw:
        body = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
        )
        resp = raw.call(api_keys.INIT_PRODUCER_ID, 4, body)
    assert resp.error_code == errors.NONE
    return int(resp.producer_id)


def topic_configs(admin: AdminClient, topic: str, keys: tuple[str, ...]) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    cfg = admin.describe_configs([res], request_timeout=TIMEOUT)[res].result()
    return {k: cfg[k].value for k in keys}


def test_topics_configs_and_producer_ids_survive_restarts_via_the_log(broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create(
        admin,
        NewTopic("orders", 3, 1, config={"cleanup.policy": "compact", "retention.ms": "3600000"}),
    )
    res = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result()
    ids = topic_ids(broker.bootstrap)
    first_pid = init_producer_id(broker.bootstrap)

    for clean in (True, False):
        broker.restart(clean=clean)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert topic_ids(broker.bootstrap)["orders"] == ids["orders"]
        assert len(admin.list_topics(timeout=TIMEOUT).topics["orders"].partitions) == 3
        assert topic_configs(admin, "orders", ("cleanup.policy", "retention.ms")) == {
            "cleanup.policy": "compact",
            "retention.ms": "3600000",
        }
        res = ConfigResource(ResourceType.BROKER, "1")
        cfg = admin.describe_configs([res], request_timeout=TIMEOUT)[res].result()
        assert cfg["log.retention.ms"].value == "7200000"
        pid = init_producer_id(broker.bootstrap)
        assert pid >= first_pid + 1000, "a restart takes a fresh block: no id is handed out twice"
        first_pid = pid
    broker.stop()

    recs = [rec for _, rec in metadata_records(logs_dir(broker))]
    kinds = [type(rec).__name__ for rec in recs]
    assert kinds[0] == "FeatureLevelRecord" and kinds.count("RegisterBrokerRecord") == 3
    [topic] = [rec for rec in recs if type(rec).__name__ == "TopicRecord" and rec.name == "orders"]
    assert topic.topic_id == ids["orders"]
    parts = [
        rec
        for rec in recs
        if type(rec).__name__ == "PartitionRecord" and rec.topic_id == topic.topic_id
    ]
    assert [p.partition_id for p in parts] == [0, 1, 2] and all(p.replicas == [1] for p in parts)
    configs = {
        (rec.resource_name, rec.name): rec.value
        for rec in recs
        if type(rec).__name__ == "ConfigRecord"
    }
    assert configs[("orders", "retention.ms")] == "3600000"
    assert configs[("1", "log.retention.ms")] == "7200000"
    assert kinds.count("ProducerIdsRecord") == 3
    assert not os.path.exists(os.path.join(logs_dir(broker), FILE_NAME))


def test_a_sigkill_right_after_an_acknowledged_create_topics_loses_nothing(broker: Broker) -> None:
    ids = {}
    with Raw(broker.bootstrap) as raw:
        for i in range(5):
            made = raw.call(
                api_keys.CREATE_TOPICS,
                7,
                CreateTopicsRequest(
                    topics=[
                        CreateTopicsRequest.CreatableTopic(
                            name=f"t{i}", num_partitions=2, replication_factor=1
                        )
                    ],
                ),
            )
            [result] = made.topics
            assert result.error_code == errors.NONE
            ids[result.name] = result.topic_id
        broker.kill()  # the moment the last CreateTopics is answered
    broker.start()
    after = topic_ids(broker.bootstrap)
    assert {name: after.get(name) for name in ids} == ids


def test_the_metadata_log_is_no_topic_to_clients(broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create(admin, NewTopic("visible", 1, 1))
    assert "__cluster_metadata" not in admin.list_topics(timeout=TIMEOUT).topics
    with Raw(broker.bootstrap) as raw:
        md = raw.call(
            api_keys.METADATA,
            12,
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="__cluster_metadata")],
                allow_auto_topic_creation=True,
            ),
        )
        assert [t.error_code for t in md.topics] == [errors.UNKNOWN_TOPIC_OR_PARTITION]
        dirs = raw.call(api_keys.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
        listed = {t.name for result in dirs.results for t in result.topics}
        assert "visible" in listed and "__cluster_metadata" not in listed
        made = raw.call(
            api_keys.CREATE_TOPICS,
            7,
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name="__cluster_metadata", num_partitions=1, replication_factor=1
                    )
                ],
            ),
        )
        assert [t.error_code for t in made.topics] == [errors.INVALID_REQUEST]
    broker.restart(clean=False)
    assert os.path.isdir(os.path.join(logs_dir(broker), DIR_NAME)), (
        "not deleted as an unknown partition"
    )
    assert "visible" in topic_ids(broker.bootstrap)


def test_a_pre_kraft_data_dir_is_migrated_with_its_topic_ids(tmp_path: Path) -> None:
    data = tmp_path / "logs"
    data.mkdir()
    old = MetadataStore(str(data), "Yp6Kc2WfQ3m9o6sXb0XnZg")
    old.create_topic("orders", [[1], [1]], {"retention.ms": "3600000"})
    old.create_topic("events", [[1]], {})
    old.set_broker_configs("", {"log.retention.ms": "7200000"})
    old.allocate_producer_ids(1000)
    with Broker(data_dir=str(tmp_path), log_level="INFO") as b:
        ids = topic_ids(b.bootstrap)
        assert {n: ids[n] for n in ("orders", "events")} == {
            n: t.topic_id for n, t in old.topics.items()
        }
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert admin.list_topics(timeout=TIMEOUT).cluster_id == "Yp6Kc2WfQ3m9o6sXb0XnZg"
        assert topic_configs(admin, "orders", ("retention.ms",)) == {"retention.ms": "3600000"}
        res = ConfigResource(ResourceType.BROKER, "1")  # the cluster default, as broker 1 sees it
        cfg = admin.describe_configs([res], request_timeout=TIMEOUT)[res].result()
        assert cfg["log.retention.ms"].value == "7200000"
        assert init_producer_id(b.bootstrap) >= 1000
        assert "migrated" in b.read_log() and FILE_NAME in b.read_log()
        b.restart()
        assert topic_ids(b.bootstrap)["orders"] == old.topics["orders"].topic_id
    assert not os.path.exists(data / FILE_NAME)
    assert os.path.exists(data / (FILE_NAME + MIGRATED_SUFFIX))
    assert meta_properties.read(str(data)) == meta_properties.MetaProperties(
        "Yp6Kc2WfQ3m9o6sXb0XnZg",
        1,
        meta_properties.read(str(data)).directory_id,  # type: ignore[union-attr]
    )


def test_meta_properties_of_another_node_or_cluster_is_refused(tmp_path: Path) -> None:
    with Broker(data_dir=str(tmp_path)):
        pass
    path = os.path.join(tmp_path, "logs", "meta.properties")
    with pytest.raises(BrokerStartError) as exc:
        Broker(config={"node.id": "2"}, data_dir=str(tmp_path)).start()
    assert path in str(exc.value) and "node.id=1" in str(exc.value)
    with pytest.raises(BrokerStartError) as exc:
        Broker(config={"cluster.id": "J8qXRwI-Qyi2G0guFTiuYw"}, data_dir=str(tmp_path)).start()
    assert path in str(exc.value) and "J8qXRwI-Qyi2G0guFTiuYw" in str(exc.value)


def test_storage_format_then_serve_uses_the_formatted_cluster_id(tmp_path: Path) -> None:
    cluster_id = subprocess.run(
        [sys.executable, "-m", "gregor", "storage", "random-uuid"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    data = str(tmp_path / "logs")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor",
            "storage",
            "format",
            "--data-dir",
            data,
            "--cluster-id",
            cluster_id,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert cluster_id in out and data in out
    again = subprocess.run(
        [sys.executable, "-m", "gregor", "storage", "format", "--data-dir", data],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "already formatted" in again.stderr
    with Broker(data_dir=str(tmp_path)) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert admin.list_topics(timeout=TIMEOUT).cluster_id == cluster_id


def describe_quorum(bootstrap: str, version: int) -> Any:
    request = DescribeQuorumRequest(
        topics=[
            DescribeQuorumRequest.TopicData(
                topic_name="__cluster_metadata",
                partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
            )
        ]
    )
    with Raw(bootstrap) as raw:
        return raw.call(api_keys.DESCRIBE_QUORUM, version, request)


def test_describe_quorum_and_gregor_quorum_describe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Broker(config={"node.id": "3"}, data_dir=str(tmp_path)) as b:
        create(AdminClient({"bootstrap.servers": b.bootstrap}), NewTopic("t", 1, 1))
        for version in (0, 1, 2):
            resp = describe_quorum(b.bootstrap, version)
            assert resp.error_code == errors.NONE
            [topic] = resp.topics
            [part] = topic.partitions
            assert (topic.topic_name, part.partition_index, part.error_code) == (
                "__cluster_metadata",
                0,
                0,
            )
            assert part.leader_id == 3 and part.leader_epoch == 1 and part.high_watermark > 0
            assert [(v.replica_id, v.log_end_offset) for v in part.current_voters] == [
                (3, part.high_watermark)
            ]
            assert part.observers == []
        with Raw(b.bootstrap) as raw:
            wrong = raw.call(
                api_keys.DESCRIBE_QUORUM,
                2,
                DescribeQuorumRequest(
                    topics=[
                        DescribeQuorumRequest.TopicData(
                            topic_name="t",
                            partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
                        )
                    ]
                ),
            )
        assert [p.error_code for p in wrong.topics[0].partitions] == [
            errors.UNKNOWN_TOPIC_OR_PARTITION
        ]

        assert cli_main(["quorum", "describe", "-b", b.bootstrap]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines[0] == "Leader id\t3"
        assert lines[1] == "Leader epoch\t1"
        assert lines[2] == f"High watermark\t{part.high_watermark}"
        assert lines[4].split("\t")[:4] == ["node", "role", "log end offset", "lag"]
        row = lines[5].split("\t")
        assert row[:4] == ["3", "Leader", str(part.high_watermark), "0"]
    assert cli_main(["quorum", "describe", "-b", b.bootstrap, "--timeout", "2"]) == 1
    assert capsys.readouterr().err == f"gregor: cannot reach {b.bootstrap} (connection refused)\n"


def written_off_the_loop(b: Broker) -> None:
    """The broker's log says a metadata snapshot was written off the event loop (the broker
    gave its store `in_thread`); the line follows the file's rename by a moment."""
    for _ in range(200):
        if "off the event loop" in b.read_log():
            return
        time.sleep(0.05)
    raise AssertionError("no metadata snapshot was written off the event loop")


def test_restarts_after_a_snapshot_keep_topics_configs_and_producer_ids(tmp_path: Path) -> None:
    """Tiny snapshot threshold and segments: snapshots are taken on their own, the log below
    them goes, each written off the event loop; a clean restart and a SIGKILL each load the
    snapshot and replay the rest."""
    config = {
        "metadata.log.max.record.bytes.between.snapshots": "2000",
        "metadata.log.segment.bytes": "4000",
    }
    with Broker(config=config, data_dir=str(tmp_path), log_level="INFO") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        create(
            admin,
            *[NewTopic(f"s{i}", 2, 1, config={"retention.ms": str(1000 + i)}) for i in range(30)],
        )
        first_pid = init_producer_id(b.bootstrap)
        meta_dir = os.path.join(logs_dir(b), DIR_NAME)
        assert any(n.endswith(".checkpoint") for n in os.listdir(meta_dir))
        written_off_the_loop(b)
        create(admin, NewTopic("after-snapshot", 3, 1, config={"cleanup.policy": "compact"}))
        ids = topic_ids(b.bootstrap)
        for clean in (True, False):
            if clean:
                b.restart(clean=True)
            else:
                b.kill()
                b.start()
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            assert topic_ids(b.bootstrap) == ids
            assert topic_configs(admin, "s7", ("retention.ms",)) == {"retention.ms": "1007"}
            assert topic_configs(admin, "after-snapshot", ("cleanup.policy",)) == {
                "cleanup.policy": "compact"
            }
            assert len(admin.list_topics(timeout=TIMEOUT).topics["after-snapshot"].partitions) == 3
            pid = init_producer_id(b.bootstrap)
            assert pid >= first_pid + 1000, "the producer id high water mark survived"
            first_pid = pid
        assert "00000000000000000000.log" not in os.listdir(meta_dir), "the log start moved up"
