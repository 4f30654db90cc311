"""`mm2.properties` to validated flows: MirrorMaker 2's defaults, precedence and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.mirror.config import ConfigError, MirrorMakerConfig, load
from gregor.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from gregor.properties import parse_properties

pytestmark = pytest.mark.unit

BASE = """
clusters = A, B
A.bootstrap.servers = a1:9092,a2:9092
B.bootstrap.servers = b1:9092
"""


def config(extra: str = "") -> MirrorMakerConfig:
    return MirrorMakerConfig.from_properties(parse_properties(BASE + extra))


def error(extra: str, base: str = BASE) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        MirrorMakerConfig.from_properties(parse_properties(base + extra))
    assert "\n" not in str(e.value)
    return e.value


def test_defaults() -> None:
    flow = config().flow("A", "B")
    assert not flow.enabled
    assert flow.emits_heartbeats
    assert flow.get("topics") == (".*",)
    assert flow.get("topics.exclude") == (r".*[\-\.]internal", r".*\.replica", r"__.*")
    assert flow.get("groups.exclude") == ("console-consumer-.*", "connect-.*", "__.*")
    assert flow.get("replication.factor") == 2
    assert flow.get("offset.lag.max") == 100
    assert flow.get("tasks.max") == 1
    assert flow.get("emit.heartbeats.interval.seconds") == 1
    assert flow.get("emit.checkpoints.interval.seconds") == 60
    assert flow.get("sync.group.offsets.enabled") is False
    assert flow.get("sync.group.offsets.interval.seconds") == 60
    assert flow.get("refresh.topics.interval.seconds") == 600
    assert flow.get("refresh.groups.interval.seconds") == 600
    assert flow.get("sync.topic.configs.enabled") is True
    assert flow.get("sync.topic.acls.enabled") is True
    assert flow.get("offset-syncs.topic.location") == "source"
    assert flow.get("exactly.once.support") == "requested"
    assert not flow.exactly_once
    assert type(flow.policy) is DefaultReplicationPolicy


def test_every_ordered_pair_is_a_flow() -> None:
    c = config("clusters = A, B, C\nC.bootstrap.servers = c:1\nA->C.enabled = true\n")
    assert c.clusters == ("A", "B", "C")
    assert len(c.flows) == 6
    assert [f.name for f in c.enabled_flows()] == ["A->C"]


def test_flow_overrides_top_level_overrides_default() -> None:
    c = config("topics = orders.*\ntasks.max = 4\nA->B.enabled = true\nA->B.topics = pay\n")
    assert c.flow("A", "B").get("topics") == ("pay",)
    assert c.flow("B", "A").get("topics") == ("orders.*",)
    assert c.flow("A", "B").get("tasks.max") == 4
    assert c.flow("A", "B").origin("topics") == "A->B.topics"
    assert c.flow("B", "A").origin("topics") == "topics"


def test_lists_are_comma_separated_regexes() -> None:
    flow = config("A->B.topics = orders ,  pay.* ,users\nA->B.groups.exclude =\n").flow("A", "B")
    assert flow.get("topics") == ("orders", "pay.*", "users")
    assert flow.topic_filter.accepts("payments") and not flow.topic_filter.accepts("x")
    assert flow.get("groups.exclude") == ()
    assert flow.group_filter.accepts("console-consumer-1")


def test_names_of_the_flow_topics() -> None:
    flow = config("A->B.enabled = true").flow("A", "B")
    assert flow.remote_topic("orders") == "A.orders"
    assert flow.offset_syncs_topic == "mm2-offset-syncs.B.internal"
    assert flow.checkpoints_topic == "A.checkpoints.internal"
    on_target = config("offset-syncs.topic.location = target").flow("A", "B")
    assert on_target.offset_syncs_topic == "mm2-offset-syncs.A.internal"
    custom = config("replication.policy.separator = _").flow("A", "B")
    assert custom.remote_topic("orders") == "A_orders"
    assert custom.checkpoints_topic == "A_checkpoints_internal"


def test_should_replicate_topic_uses_the_flow_settings() -> None:
    flow = config("A->B.enabled = true\nA->B.topics = orders").flow("A", "B")
    assert flow.should_replicate_topic("orders")
    assert not flow.should_replicate_topic("payments")
    assert flow.should_replicate_topic("heartbeats")
    assert not flow.should_replicate_topic("B.orders")
    quiet = config("topics = orders\nA->B.heartbeats.replication.enabled = false").flow("A", "B")
    assert not quiet.should_replicate_topic("heartbeats")


def test_replication_policy_by_short_or_full_name() -> None:
    short = config("replication.policy.class = IdentityReplicationPolicy").flow("A", "B")
    full = config(
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
    )
    assert isinstance(short.policy, IdentityReplicationPolicy)
    assert short.policy.source_cluster_alias == "A"
    assert short.remote_topic("orders") == "orders"
    assert isinstance(full.flow("B", "A").policy, IdentityReplicationPolicy)


def test_client_settings_precedence() -> None:
    c = config(
        """
security.protocol = SSL
A.security.protocol = SASL_SSL
A.consumer.fetch.min.bytes = 100
A.consumer.max.poll.records = 50
A->B.consumer.max.poll.records = 7
A->B.consumer.client.rack = r1
A->B.source.consumer.fetch.min.bytes = 200
B.producer.compression.type = zstd
B.producer.bootstrap.servers = b-internal:9092
consumer.poll.timeout.ms = 500
admin.timeout.ms = 9000
"""
    )
    flow = c.flow("A", "B")
    consumer = flow.client_config("source", "consumer")
    assert consumer["bootstrap.servers"] == "a1:9092,a2:9092"
    assert consumer["security.protocol"] == "SASL_SSL"
    assert consumer["max.poll.records"] == "50"  # A.consumer.* over A->B.consumer.*
    assert consumer["client.rack"] == "r1"
    assert consumer["fetch.min.bytes"] == "200"  # A->B.source.consumer.* over all
    assert consumer["enable.auto.commit"] == "false"
    assert consumer["auto.offset.reset"] == "earliest"
    assert "poll.timeout.ms" not in consumer
    assert "timeout.ms" not in flow.client_config("source", "admin")
    producer = flow.client_config("target", "producer")
    assert producer["bootstrap.servers"] == "b-internal:9092"
    assert producer["compression.type"] == "zstd"
    assert producer["security.protocol"] == "SSL"  # B has none of its own: the top-level one
    assert flow.client_config("target", "admin")["bootstrap.servers"] == "b1:9092"
    assert c.cluster_client_config("A", "admin")["security.protocol"] == "SASL_SSL"


def test_top_level_bootstrap_serves_every_cluster() -> None:
    c = MirrorMakerConfig.from_properties(
        parse_properties("clusters = A, B\nbootstrap.servers = x:1")
    )
    assert c.flow("A", "B").client_config("target", "producer")["bootstrap.servers"] == "x:1"


def test_exactly_once_is_set_per_target_cluster() -> None:
    c = config("B.exactly.once.source.support = enabled\nA->B.enabled = true\nB->A.enabled = true")
    assert c.flow("A", "B").exactly_once
    assert not c.flow("B", "A").exactly_once


def test_exactly_once_required_needs_the_target_enabled() -> None:
    e = error("A->B.enabled = true\nA->B.exactly.once.support = required")
    assert e.key == "A->B.exactly.once.support"
    ok = config(
        "A->B.enabled = true\nA->B.exactly.once.support = required\nB.exactly.once.source.support = enabled"
    )
    assert ok.flow("A", "B").exactly_once


@pytest.mark.parametrize(
    "extra,key,words",
    [
        ("A->C.enabled = true", "A->C.enabled", "unknown cluster 'C'"),
        ("C->A.topics = x", "C->A.topics", "unknown cluster 'C'"),
        ("A->A.enabled = true", "A->A.enabled", "two different clusters"),
        ("C.bootstrap.servers = c:1", "C.bootstrap.servers", "unknown cluster"),
        ("A->B.topics = orders, (", "A->B.topics", "bad regex"),
        ("topics.exclude = [", "topics.exclude", "bad regex"),
        ("A->B.groups = *x", "A->B.groups", "bad regex"),
        ("A->B.enabled = yes", "A->B.enabled", "true or false"),
        ("tasks.max = 0", "tasks.max", "at least 1"),
        ("A->B.offset.lag.max = lots", "A->B.offset.lag.max", "whole number"),
        ("replication.factor = 0", "replication.factor", "-1"),
        (
            "offset-syncs.topic.location = elsewhere",
            "offset-syncs.topic.location",
            "source, target",
        ),
        (
            "replication.policy.class = com.example.Mine",
            "replication.policy.class",
            "unknown replication policy",
        ),
        ("A->B.replication.policy.separator =", "A->B.replication.policy.separator", "empty"),
        ("exactly.once.support = enabled", "exactly.once.support", "requested, required"),
        (
            "B.exactly.once.source.support = on",
            "B.exactly.once.source.support",
            "enabled, preparing",
        ),
    ],
)
def test_bad_values_name_their_key(extra: str, key: str, words: str) -> None:
    e = error(extra)
    assert e.key == key
    assert str(e).startswith(f"{key}: ") and words in str(e)


def test_missing_clusters() -> None:
    assert error("", base="A.bootstrap.servers = x").key == "clusters"
    assert error("", base="clusters = ").key == "clusters"
    assert "alias" in str(error("", base="clusters = A, B # comment"))


def test_missing_bootstrap() -> None:
    e = error("", base="clusters = A, B\nA.bootstrap.servers = x")
    assert e.key == "B.bootstrap.servers"


IDENTITY_LOOP = "A->B.enabled = true\nB->A.enabled = true\nreplication.policy.class = IdentityReplicationPolicy\n"


def test_identity_loop_without_provenance_is_refused() -> None:
    e = error(IDENTITY_LOOP + "replication.policy.provenance.header.enabled = false")
    assert e.key == "replication.policy.provenance.header.enabled"
    assert "A->B->A" in str(e)


def test_identity_loop_through_three_clusters() -> None:
    extra = (
        "clusters = A, B, C\nC.bootstrap.servers = c:1\n"
        "A->B.enabled = true\nB->C.enabled = true\nC->A.enabled = true\n"
        "B->C.replication.policy.class = IdentityReplicationPolicy\n"
        "B->C.replication.policy.provenance.header.enabled = false\n"
    )
    e = error(extra)
    assert e.key == "B->C.replication.policy.provenance.header.enabled"
    assert "B->C->A->B" in str(e)


def test_identity_without_a_loop_or_with_provenance_is_fine() -> None:
    config(IDENTITY_LOOP)  # provenance headers on by default
    one_way = "A->B.enabled = true\nreplication.policy.class = IdentityReplicationPolicy\n"
    config(one_way + "replication.policy.provenance.header.enabled = false")
    default_loop = "A->B.enabled = true\nB->A.enabled = true\n"
    config(default_loop)


def test_load_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(BASE + "A->B.enabled = true\nA->B.topics = orders, \\\n   payments\n")
    assert load(path).flow("A", "B").get("topics") == ("orders", "payments")
    with pytest.raises(ConfigError, match="mm2.properties"):
        load(tmp_path / "missing" / "mm2.properties")
    path.write_text("a = \\u12")
    with pytest.raises(ConfigError, match="line 1"):
        load(path)


PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="mirror" password="p w d";'
)


def test_java_client_settings_are_given_to_librdkafka_under_its_names() -> None:
    c = config(
        f"""
B.security.protocol = SASL_SSL
B.sasl.mechanism = PLAIN
B.sasl.jaas.config = {PLAIN_JAAS}
B.ssl.truststore.type = PEM
B.ssl.truststore.location = /etc/ca.pem
B.ssl.endpoint.identification.algorithm =
B.producer.sasl.username = producer-only
A.ssl.keystore.type = PKCS12
A.ssl.keystore.location = /etc/a.p12
A.ssl.keystore.password = s
"""
    )
    flow = c.flow("A", "B")
    consumer = flow.client_config("target", "consumer")
    assert consumer["sasl.username"] == "mirror" and consumer["sasl.password"] == "p w d"
    assert consumer["ssl.ca.location"] == "/etc/ca.pem"
    assert consumer["ssl.endpoint.identification.algorithm"] == "none"
    java_only = {"sasl.jaas.config", "ssl.truststore.type", "ssl.truststore.location"}
    assert not java_only & set(consumer)
    # librdkafka's own name, where given, wins over the JAAS option
    assert flow.client_config("target", "producer")["sasl.username"] == "producer-only"
    source = flow.client_config("source", "admin")
    assert source["ssl.keystore.location"] == "/etc/a.p12" and "ssl.keystore.type" not in source
    assert c.cluster_client_config("B", "admin")["sasl.password"] == "p w d"
    scram = config(
        "B.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="s" password="t";'
    )
    assert scram.flow("A", "B").client_config("target", "admin")["sasl.username"] == "s"


@pytest.mark.parametrize(
    "extra,key,words",
    [
        ("B.ssl.truststore.location = /etc/t.jks", "B.ssl.truststore.location", "JKS"),
        (
            "B.ssl.truststore.type = PKCS12\nB.ssl.truststore.location = /t.p12",
            "B.ssl.truststore.type",
            "PKCS12 truststores",
        ),
        ("A.ssl.keystore.type = JKS", "A.ssl.keystore.type", "JKS keystores"),
        ("B.sasl.jaas.config = nonsense", "B.sasl.jaas.config", "must end with ';'"),
        (
            "A->B.producer.sasl.jaas.config = com.example.Krb5LoginModule required;",
            "A->B.producer.sasl.jaas.config",
            "is not read here",
        ),
        (
            "B.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="u";',
            "B.sasl.jaas.config",
            "needs password",
        ),
    ],
)
def test_client_settings_librdkafka_cannot_take_name_their_key(
    extra: str, key: str, words: str
) -> None:
    e = error(extra)
    assert e.key == key
    assert str(e).startswith(f"{key}: ") and words in str(e)
    assert "p w" not in str(e)
