"""The admin commands against a real broker, their JSON output checked against what the broker
holds (read back with confluent-kafka, or from the data dir)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time

import pytest
from cli_helpers import gregor, one_line_error
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from gregor.testing.broker import Broker

pytestmark = pytest.mark.client
QUIET = logging.getLogger("tests.cli.rdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})


def cli(broker, *args, stdin=None):
    return gregor(*args, "-b", broker.bootstrap, stdin=stdin)


def create(broker, topic, partitions=1):
    done = cli(broker, "topics", "create", topic, "--partitions", str(partitions))
    assert done.returncode == 0, done.stderr


def produce(broker, topic, partition, values, timestamps=None):
    """Each record's (offset, timestamp) as the broker acknowledged it."""
    acked = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "logger": QUIET})
    for i, v in enumerate(values):
        ts = {"timestamp": timestamps[i]} if timestamps else {}
        p.produce(topic, v, partition=partition, on_delivery=lambda e, m: acked.append(m), **ts)
        p.flush(10)  # one batch per record: each keeps its own timestamp and offset
    assert all(m.error() is None for m in acked)
    return [(m.offset(), m.timestamp()[1]) for m in acked]


def test_topics_add_partitions(broker, admin):
    create(broker, "ap", 2)
    done = cli(broker, "topics", "add-partitions", "ap", "--partitions", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "5 partitions now in topic ap\n"
    assert len(admin.list_topics("ap", timeout=10).topics["ap"].partitions) == 5
    [described] = cli(broker, "topics", "describe", "ap", "-o", "json").json()
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in described["partitions"])
    fewer = cli(broker, "topics", "add-partitions", "ap", "--partitions", "3")
    assert fewer.returncode == 1 and fewer.stdout == ""
    assert fewer.stderr.startswith("error: cannot add partitions to topic ap: ")
    assert fewer.stderr.count("\n") == 1 and "Traceback" not in fewer.stderr


def test_topics_describe_lists_the_topics_own_configs_only(broker, admin):
    """A cluster-wide dynamic default is not the topic's own setting (kafka-topics.sh)."""
    create(broker, "own")

    def configs(verb, *args):
        done = cli(broker, "configs", verb, *args)
        assert done.returncode == 0, done.stderr

    configs("alter", "--entity-type", "broker-defaults", "--add-config", "log.retention.ms=7200000")
    try:
        configs("alter", "--entity-type", "topics", "--entity-name", "own",
                "--add-config", "cleanup.policy=compact")  # fmt: skip
        topic = ConfigResource("topic", "own")
        held = admin.describe_configs([topic])[topic].result(timeout=15)
        assert held["retention.ms"].value == "7200000" and not held["retention.ms"].is_default
        [doc] = cli(broker, "topics", "describe", "own", "-o", "json").json()
        assert doc["configs"] == {"cleanup.policy": "compact"}
    finally:
        configs("delete", "--entity-type", "broker-defaults", "--delete-config", "log.retention.ms")


def test_topics_list_json_and_plain(broker):
    create(broker, "listed")
    assert "listed" in cli(broker, "topics", "list", "-o", "json").json()
    plain = cli(broker, "topics", "list")  # stdout is a pipe: plain, names only
    assert "listed" in plain.stdout.splitlines()
    described = cli(broker, "topics", "describe", "listed").stdout
    assert "topic\tpartition\tleader\treplicas\tisr\nlisted\t0\t1\t1\t1\n" in described
    assert not set("│┃━─┏└") & set(described)


def test_offsets_get_at_each_kind_of_time(broker):
    create(broker, "offs", 2)
    base = int(time.time() * 1000) - 60_000
    acked = produce(
        broker, "offs", 0, [b"v%d" % i for i in range(5)], [base + i * 1000 for i in range(5)]
    )
    assert [o for o, _ in acked] == [0, 1, 2, 3, 4]

    def get(*args):
        return {
            (d["topic"], d["partition"]): d
            for d in cli(broker, "offsets", "get", *args, "-o", "json").json()
        }

    latest = get("offs")
    assert {k: d["offset"] for k, d in latest.items()} == {("offs", 0): 5, ("offs", 1): 0}
    assert get("offs:0", "--time", "earliest")[("offs", 0)]["offset"] == 0
    top = get("offs:0", "--time", "max-timestamp")[("offs", 0)]
    assert (top["offset"], top["timestamp"]) == (4, base + 4000)
    at = get("offs:0", "--time", str(base + 2500))[("offs", 0)]
    assert (at["offset"], at["timestamp"]) == (3, base + 3000)
    iso = dt.datetime.fromtimestamp((base + 1500) / 1000, dt.UTC).isoformat()
    assert get("offs:0", "--time", iso)[("offs", 0)]["offset"] == 2
    assert get("offs:0", "--time", str(base + 3_600_000))[("offs", 0)]["offset"] is None
    one_line_error(
        cli(broker, "offsets", "get", "offs:7"),
        "gregor: offsets get offs:7: topic offs has no partition 7 (it has 2: 0-1)",
    )
    one_line_error(
        cli(broker, "offsets", "get", "offs", "--time", "yesterday"),
        "gregor: --time: 'yesterday' is not earliest, latest, max-timestamp, milliseconds or an "
        "ISO-8601 time (e.g. --time 2024-05-01T12:00:00)",
    )


def test_records_delete_moves_the_log_start(broker):
    create(broker, "recs")
    produce(broker, "recs", 0, [b"r%d" % i for i in range(10)])
    done = cli(broker, "records", "delete", "recs:0", "--before", "4", "-o", "json")
    assert done.json() == [{"topic": "recs", "partition": 0, "low_watermark": 4}]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "recs-check", "logger": QUIET})
    low, high = c.get_watermark_offsets(TopicPartition("recs", 0), timeout=10)
    c.close()
    assert (low, high) == (4, 10)
    one_line_error(
        cli(broker, "records", "delete", "recs", "--before", "4"),
        "gregor: records delete recs: name the partitions, e.g. recs:0",
    )
    beyond = cli(broker, "records", "delete", "recs:0", "--before", "100")
    assert (beyond.returncode, beyond.stdout) == (1, "")  # the error line only, no bare header
    assert beyond.stderr.startswith("error: cannot delete records of recs:0: ")
    assert beyond.stderr.count("\n") == 1


def test_configs_of_a_topic(broker, admin):
    create(broker, "cfg")
    one_line_error(
        cli(
            broker,
            "configs",
            "alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "cfg",
            "--add-config",
            "retention.ms=abc",
        ),
        'error: cannot alter configs of cfg: retention.ms: not a valid long ("abc")',
    )
    done = cli(
        broker,
        "configs",
        "alter",
        "--entity-type",
        "topics",
        "--entity-name",
        "cfg",
        "--add-config",
        "retention.ms=5000,cleanup.policy=[compact,delete]",
    )
    assert (done.returncode, done.stdout) == (0, "altered configs of cfg\n"), done.stderr
    res = ConfigResource("topic", "cfg")
    held = admin.describe_configs([res])[res].result()
    assert held["retention.ms"].value == "5000"
    assert held["cleanup.policy"].value == "compact,delete"
    [doc] = cli(
        broker,
        "configs",
        "describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "cfg",
        "-o",
        "json",
    ).json()
    assert doc["entity_name"] == "cfg"
    assert {c["name"]: (c["value"], c["source"]) for c in doc["configs"]} == {
        "retention.ms": ("5000", "DYNAMIC_TOPIC_CONFIG"),
        "cleanup.policy": ("compact,delete", "DYNAMIC_TOPIC_CONFIG"),
    }
    done = cli(
        broker,
        "configs",
        "delete",
        "--entity-type",
        "topics",
        "--entity-name",
        "cfg",
        "--delete-config",
        "retention.ms",
    )
    assert done.returncode == 0, done.stderr
    assert admin.describe_configs([res])[res].result()["retention.ms"].is_default
    [every] = cli(
        broker,
        "configs",
        "describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "cfg",
        "--all",
        "-o",
        "json",
    ).json()
    by_name = {c["name"]: c for c in every["configs"]}
    assert by_name["retention.ms"]["source"] != "DYNAMIC_TOPIC_CONFIG"
    assert by_name["segment.bytes"]["value"] == held["segment.bytes"].value


def test_dynamic_broker_configs(broker, admin):
    def alter(*args):
        done = cli(broker, "configs", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def own(*args):
        [doc] = cli(broker, "configs", "describe", *args, "-o", "json").json()
        return {c["name"]: (c["value"], c["source"]) for c in doc["configs"]}

    res = ConfigResource("broker", "1")
    assert (
        alter(
            "alter", "--entity-type", "broker-defaults", "--add-config", "log.retention.ms=7200000"
        )
        == "altered configs of the broker defaults\n"
    )
    assert own("--entity-type", "broker-defaults") == {
        "log.retention.ms": ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    }
    assert admin.describe_configs([res])[res].result()["log.retention.ms"].value == "7200000"
    assert (
        alter(
            "alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--add-config",
            "log.retention.ms=3600000",
        )
        == "altered configs of broker 1\n"
    )
    assert admin.describe_configs([res])[res].result()["log.retention.ms"].value == "3600000"
    assert own("--entity-type", "brokers", "--entity-name", "1") == {
        "log.retention.ms": ("3600000", "DYNAMIC_BROKER_CONFIG")
    }
    # the defaults are described as they are, not as broker 1 sees them
    assert own("--entity-type", "broker-defaults") == {
        "log.retention.ms": ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    }
    assert own("--entity-type", "brokers") == own("--entity-type", "brokers", "--entity-name", "1")
    alter(
        "delete",
        "--entity-type",
        "brokers",
        "--entity-name",
        "1",
        "--delete-config",
        "log.retention.ms",
    )
    assert admin.describe_configs([res])[res].result()["log.retention.ms"].value == "7200000"
    alter("delete", "--entity-type", "broker-defaults", "--delete-config", "log.retention.ms")
    assert own("--entity-type", "broker-defaults") == {}
    assert admin.describe_configs([res])[res].result()["log.retention.ms"].is_default
    one_line_error(
        cli(broker, "configs", "describe", "--entity-type", "brokers", "--entity-name", "7"),
        "gregor: no broker 7 in the cluster (brokers: 1)",
    )


def test_cluster_info(broker, admin):
    doc = cli(broker, "cluster", "info", "-o", "json").json()
    held = admin.describe_cluster().result()
    assert doc == {
        "cluster_id": held.cluster_id,
        "controller_id": 1,
        "brokers": [{"id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}],
    }
    plain = cli(broker, "cluster", "info").stdout
    assert f"cluster id\t{held.cluster_id}\n" in plain
    assert f"1\t127.0.0.1\t{broker.port}\t-\tyes\n" in plain


def test_log_dirs_describe(broker):
    create(broker, "dirs")
    produce(broker, "dirs", 0, [b"x" * 500] * 3)
    [d] = cli(broker, "log-dirs", "describe", "--broker", "1", "-o", "json").json()
    log_dir = os.path.join(broker.data_dir, "logs")
    assert (d["broker"], os.path.realpath(d["log_dir"]), d["error"]) == (
        1,
        os.path.realpath(log_dir),
        None,
    )
    assert d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]
    [part] = [p for p in d["partitions"] if p["topic"] == "dirs"]
    on_disk = sum(
        os.path.getsize(os.path.join(log_dir, "dirs-0", f))
        for f in os.listdir(os.path.join(log_dir, "dirs-0"))
        if f.endswith(".log")
    )
    assert part == {
        "topic": "dirs",
        "partition": 0,
        "size": on_disk,
        "offset_lag": 0,
        "is_future": False,
    }
    assert on_disk > 1500
    one_line_error(
        cli(broker, "log-dirs", "describe", "--broker", "4"),
        "gregor: --broker 4: no such broker (brokers: 1)",
    )


def test_leader_election(broker):
    create(broker, "elect", 2)
    done = cli(
        broker,
        "leader-election",
        "--election-type",
        "preferred",
        "--topic",
        "elect",
        "--partition",
        "1",
        "-o",
        "json",
    )
    assert done.json() == [
        {"topic": "elect", "partition": 1, "result": "not_needed", "error": None}
    ]
    everything = cli(
        broker,
        "leader-election",
        "--election-type",
        "preferred",
        "--all-topic-partitions",
        "-o",
        "json",
    )
    assert all(d["result"] != "error" for d in everything.json())
    missing = cli(
        broker,
        "leader-election",
        "--election-type",
        "unclean",
        "--topic",
        "nope",
        "--partition",
        "0",
        "-o",
        "json",
    )
    assert missing.returncode == 1
    [d] = json.loads(missing.stdout)
    assert (d["topic"], d["partition"], d["result"]) == ("nope", 0, "error")
    assert missing.stderr.startswith("error: cannot elect a leader (unclean) for nope:0: ")
    one_line_error(
        cli(broker, "leader-election", "--election-type", "preferred", "--topic", "elect"),
        "gregor: name the partitions: --topic T --partition P, or --all-topic-partitions "
        "(e.g. gregor leader-election --election-type preferred --topic orders --partition 0)",
    )


def test_quorum_describe_json(broker):
    doc = cli(broker, "quorum", "describe", "-o", "json").json()
    assert doc["leader_id"] == 1 and doc["leader_epoch"] >= 1 and doc["high_watermark"] > 0
    [me] = doc["replicas"]
    assert (me["node"], me["role"], me["lag"]) == (1, "Leader", 0)
    assert me["log_end_offset"] >= doc["high_watermark"]


def test_describe_of_a_group_that_does_not_exist(broker):
    missing = cli(broker, "groups", "describe", "no-such-group")
    one_line_error(missing, "error: consumer group 'no-such-group' does not exist")
    assert missing.stdout == ""
    assert cli(broker, "groups", "describe", "no-such-group", "-o", "json").stdout == "[]\n"


def test_an_acl_refused_is_named_in_words(broker):
    """This broker has no authorizer: the refusal names the ACL as kafka-acls.sh would, not as
    confluent-kafka's repr of it."""
    added = cli(broker, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                "--topic", "orders", "-o", "json")  # fmt: skip
    assert (added.returncode, added.stdout) == (1, "[]\n")
    assert added.stderr == (
        "error: cannot add ACL TOPIC orders (LITERAL): principal=User:alice host=* "
        "operation=READ permission=ALLOW: no Authorizer is configured\n"
    )
    removed = cli(broker, "acls", "remove", "--topic", "orders", "-o", "json")
    assert (removed.returncode, removed.stdout) == (1, "[]\n")
    assert removed.stderr == (
        "error: cannot remove ACLs matching TOPIC orders (LITERAL): principal=ANY host=ANY "
        "operation=ANY permission=ANY: no Authorizer is configured\n"
    )
    table = cli(broker, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                "--topic", "orders")  # fmt: skip
    assert (table.returncode, table.stdout) == (1, "")  # the error line only, no bare header
    table = cli(broker, "acls", "remove", "--topic", "orders")
    assert (table.returncode, table.stdout) == (1, "")
