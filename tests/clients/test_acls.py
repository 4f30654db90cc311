"""ACLs through real clients: CreateAcls / DescribeAcls / DeleteAcls with confluent-kafka and
kafka-python, and Kafka's authorization errors as each client sees them.

Every client is User:ANONYMOUS until authentication exists, so the broker runs with
`allow.everyone.if.no.acl.found=true` and each case puts an ACL on its own resource that
leaves ANONYMOUS out (an ACL for User:alice alone, or a DENY): a resource with ACLs and none
allowing the caller is denied. One broker for the module; the last test restarts it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import kafka
import kafka.admin as kadmin
import kafka.errors as kerrors
import pytest
from client_helpers import wait_until
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from gregor import Broker

pytestmark = pytest.mark.client

ANON = "User:ANONYMOUS"
ALICE = "User:alice"
CONFIG = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "num.partitions": "1",
}


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    b = Broker(config=CONFIG, log_level="INFO").start()
    try:
        yield b
    finally:
        print("\n".join(b.read_log().splitlines()[-60:]))
        b.close()


@pytest.fixture(scope="module")
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def acl(rtype, name, principal, op, perm=AclPermissionType.ALLOW, pattern=None) -> AclBinding:
    return AclBinding(rtype, name, pattern or ResourcePatternType.LITERAL, principal, "*", op, perm)


def create(admin: AdminClient, *bindings: AclBinding) -> None:
    for f in admin.create_acls(list(bindings), request_timeout=10).values():
        assert f.result() is None


def produce_error(bootstrap: str, topic: str) -> ck.KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    errors: list[ck.KafkaError | None] = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    assert len(errors) == 1
    return errors[0]


def test_acls_are_created_described_and_deleted_with_confluent(admin: AdminClient) -> None:
    topic = unique("acl-crud")
    bindings = [
        acl(ResourceType.TOPIC, topic, ALICE, AclOperation.READ),
        acl(
            ResourceType.TOPIC,
            topic[:8],
            ALICE,
            AclOperation.WRITE,
            pattern=ResourcePatternType.PREFIXED,
        ),
        acl(ResourceType.GROUP, topic, "User:bob", AclOperation.ALL, AclPermissionType.DENY),
    ]
    create(admin, *bindings)
    create(admin, bindings[0])  # again: succeeds, stored once
    match = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    found = admin.describe_acls(match, request_timeout=10).result()
    assert sorted(map(str, found)) == sorted(map(str, bindings[:2]))
    every = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    assert {str(b) for b in bindings} <= set(map(str, admin.describe_acls(every).result()))
    deleted = admin.delete_acls([match], request_timeout=10)[match].result()
    assert sorted(map(str, deleted)) == sorted(map(str, bindings[:2]))
    left = {str(b) for b in admin.describe_acls(every).result()}
    assert str(bindings[2]) in left and str(bindings[0]) not in left


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(bootstrap: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})  # the shared broker: no authorizer
    binding = acl(ResourceType.TOPIC, "t", ALICE, AclOperation.READ)
    with pytest.raises(ck.KafkaException) as info:
        client.create_acls([binding], request_timeout=10)[binding].result()
    assert info.value.args[0].code() == ck.KafkaError.SECURITY_DISABLED
    # (librdkafka drops DescribeAcls' top-level error: kafka-python shows it)
    kp = kadmin.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        every = kadmin.ACLFilter(
            principal=None, host=None, operation=kadmin.ACLOperation.ANY,
            permission_type=kadmin.ACLPermissionType.ANY,
            resource_pattern=kadmin.ResourcePatternFilter(
                kadmin.ResourceType.ANY, None, kadmin.ACLResourcePatternType.ANY
            ),
        )  # fmt: skip
        with pytest.raises(kerrors.SecurityDisabledError):
            kp.describe_acls(every)
    finally:
        kp.close()


def test_an_invalid_acl_is_refused_with_invalid_request(broker: Broker) -> None:
    client = kadmin.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        bad = kadmin.ACL(
            principal=ALICE,
            host="*",
            operation=kadmin.ACLOperation.READ,
            permission_type=kadmin.ACLPermissionType.ALLOW,
            resource_pattern=kadmin.ResourcePattern(kadmin.ResourceType.CLUSTER, "not-the-cluster"),
        )
        result = client.create_acls([bad])
        assert result["failed"] == [kerrors.InvalidRequestError]
        good = kadmin.ACL(
            principal=ALICE,
            host="*",
            operation=kadmin.ACLOperation.DESCRIBE,
            permission_type=kadmin.ACLPermissionType.ALLOW,
            resource_pattern=kadmin.ResourcePattern(kadmin.ResourceType.GROUP, unique("kp")),
        )
        assert client.create_acls([good])["succeeded"] == [good]
        acls, error = client.describe_acls(
            kadmin.ACLFilter(
                principal=ALICE,
                host=None,
                operation=kadmin.ACLOperation.ANY,
                permission_type=kadmin.ACLPermissionType.ANY,
                resource_pattern=kadmin.ResourcePatternFilter(
                    kadmin.ResourceType.GROUP, good.resource_pattern.resource_name,
                    kadmin.ACLResourcePatternType.LITERAL,
                ),
            )
        )  # fmt: skip
        assert error is kerrors.NoError and acls == [good]
    finally:
        client.close()


def test_a_producer_without_write_gets_topic_authorization_failed(
    broker: Broker, admin: AdminClient
) -> None:
    topic = unique("no-write")
    create(admin, acl(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE))
    create(admin, acl(ResourceType.TOPIC, topic, ALICE, AclOperation.WRITE))
    err = produce_error(broker.bootstrap, topic)
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, acl(ResourceType.TOPIC, topic, ANON, AclOperation.WRITE))
    assert produce_error(broker.bootstrap, topic) is None  # allowed now (CREATE: no ACL)


def test_aiokafka_sees_topic_and_group_authorization_failures(
    broker: Broker, admin: AdminClient
) -> None:
    import asyncio

    import aiokafka
    import aiokafka.errors as aerrors

    topic, group = unique("aio"), unique("aio-g")
    create(
        admin,
        acl(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, topic, ANON, AclOperation.READ),
        acl(ResourceType.GROUP, group, ALICE, AclOperation.READ),
    )

    async def main() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            with pytest.raises(aerrors.TopicAuthorizationFailedError):
                await producer.send_and_wait(topic, b"v")
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=group
        )
        try:
            with pytest.raises(aerrors.GroupAuthorizationFailedError):
                await consumer.start()  # it finds the coordinator, or fails, as it starts
                await asyncio.wait_for(consumer.getone(), 30)
        finally:
            await consumer.stop()

    asyncio.run(main())


def test_an_acl_for_another_host_does_not_apply(broker: Broker, admin: AdminClient) -> None:
    topic = unique("hosts")

    def allow_write_from(host: str) -> AclBinding:
        return AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, ANON, host,
            AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip

    create(admin, acl(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE))
    create(admin, allow_write_from("10.9.9.9"))
    err = produce_error(broker.bootstrap, topic)
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, allow_write_from("127.0.0.1"))  # the clients' address here
    assert produce_error(broker.bootstrap, topic) is None


def test_metadata_hides_topics_the_caller_may_not_describe(
    broker: Broker, admin: AdminClient
) -> None:
    hidden, shown = unique("hidden"), unique("shown")
    for t in (hidden, shown):
        assert produce_error(broker.bootstrap, t) is None  # auto-created, no ACLs yet
    create(
        admin, acl(ResourceType.TOPIC, hidden, ANON, AclOperation.DESCRIBE, AclPermissionType.DENY)
    )
    topics = admin.list_topics(timeout=10).topics
    assert shown in topics and hidden not in topics
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        assert shown in consumer.topics() and hidden not in consumer.topics()
    finally:
        consumer.close()
    named = admin.list_topics(topic=hidden, timeout=10).topics[hidden]
    assert named.error is not None
    assert named.error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_consumer_without_read_on_its_group_gets_group_authorization_failed(
    broker: Broker, admin: AdminClient
) -> None:
    topic, group = unique("grp-topic"), unique("grp")
    assert produce_error(broker.bootstrap, topic) is None
    create(admin, acl(ResourceType.GROUP, group, ALICE, AclOperation.READ))
    consumer = kafka.KafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    try:
        with pytest.raises(kerrors.GroupAuthorizationFailedError):
            for _ in range(100):
                consumer.poll(timeout_ms=200)
    finally:
        consumer.close(autocommit=False)
    create(admin, acl(ResourceType.GROUP, group, ANON, AclOperation.READ))
    consumer = kafka.KafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    try:
        got = wait_until(lambda: consumer.poll(timeout_ms=200) or None, 30, "a record")
        assert sum(len(v) for v in got.values()) == 1
    finally:
        consumer.close()


def test_a_consumer_without_read_on_the_topic_gets_topic_authorization_failed(
    broker: Broker, admin: AdminClient
) -> None:
    topic = unique("no-read")
    assert produce_error(broker.bootstrap, topic) is None
    create(
        admin,
        acl(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, topic, ANON, AclOperation.READ, AclPermissionType.DENY),
    )
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g")})
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        msg = wait_until(lambda: c.poll(0.5), 30, "an answer")
        assert msg.error() is not None
        assert msg.error().code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_a_transactional_producer_without_its_id_gets_transactional_id_authorization_failed(
    broker: Broker, admin: AdminClient
) -> None:
    tid = unique("tx")
    create(admin, acl(ResourceType.TRANSACTIONAL_ID, tid, ALICE, AclOperation.WRITE))
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    with pytest.raises(ck.KafkaException) as info:
        p.init_transactions(15)
    assert info.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.mark.parametrize("authorizer", [True, False], ids=["acls", "no-authorizer"])
def test_no_client_appends_to_or_trims_an_internal_topic(
    authorizer: bool, broker: Broker, bootstrap: str
) -> None:
    """__consumer_offsets (made by a consumer group's FindCoordinator) takes no record from a
    client, WRITE allowed or not, and gives none up to DeleteRecords: INVALID_TOPIC_EXCEPTION,
    as Kafka answers both; the group's own commit is still there."""
    target = broker.bootstrap if authorizer else bootstrap
    topic, group = unique("internal"), unique("internal-g")
    producer = ck.Producer({"bootstrap.servers": target})
    producer.produce(topic, b"v", partition=0)
    assert producer.flush(15) == 0
    consumer = ck.Consumer({"bootstrap.servers": target, "group.id": group})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        wait_until(lambda: consumer.poll(0.5), 30, "the record")
        consumer.commit(asynchronous=False)
        outcome: list[ck.KafkaError | None] = []
        producer.produce(  # a key, as the compacted topic wants: refused for being internal
            "__consumer_offsets", b"v", key=b"k", on_delivery=lambda e, _m: outcome.append(e)
        )
        producer.flush(15)
        assert len(outcome) == 1 and outcome[0] is not None, outcome
        assert outcome[0].code() == ck.KafkaError.TOPIC_EXCEPTION, outcome[0]
        admin = AdminClient({"bootstrap.servers": target})
        offsets_topic = admin.list_topics("__consumer_offsets", timeout=10).topics
        every = [
            ck.TopicPartition("__consumer_offsets", p, ck.OFFSET_END)
            for p in offsets_topic["__consumer_offsets"].partitions
        ]
        for future in admin.delete_records(every, request_timeout=10).values():
            with pytest.raises(ck.KafkaException) as refused:
                future.result(20)
            assert refused.value.args[0].code() == ck.KafkaError.TOPIC_EXCEPTION
        committed = consumer.committed([ck.TopicPartition(topic, 0)], timeout=10)
        assert [(p.topic, p.offset) for p in committed] == [(topic, 1)]
    finally:
        consumer.close()


def test_kcat_produces_where_allowed_and_not_where_denied(
    broker: Broker, admin: AdminClient
) -> None:
    allowed, denied = unique("kcat-ok"), unique("kcat-denied")
    create(
        admin,
        acl(ResourceType.TOPIC, denied, ANON, AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, denied, ANON, AclOperation.WRITE, AclPermissionType.DENY),
    )

    def kcat(topic: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-P", "-t", topic],
            input="one\n",
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert kcat(allowed).returncode == 0
    refused = kcat(denied)
    assert "authorization failed" in refused.stderr.lower()
    consumed = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", allowed, "-c", "1", "-e"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert consumed.stdout.strip() == "one"


def test_authorized_operations_are_reported_when_asked(broker: Broker, admin: AdminClient) -> None:
    topic = unique("ops")
    assert produce_error(broker.bootstrap, topic) is None
    create(admin, acl(ResourceType.TOPIC, topic, ANON, AclOperation.READ))
    described = admin.describe_topics(
        ck.TopicCollection([topic]), include_authorized_operations=True
    )[topic].result()
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def gregor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_the_acls_command_adds_lists_and_removes_as_kafka_acls(broker: Broker) -> None:
    b = ["-b", broker.bootstrap]
    topic, group = unique("cli"), unique("cli-g")
    added = gregor(
        "acls", "add", *b, "--allow-principal", "User:app", "--consumer", "--topic", topic,
        "--group", group, "-o", "json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    want = {("TOPIC", topic, "READ"), ("TOPIC", topic, "DESCRIBE"), ("GROUP", group, "READ")}
    assert {
        (d["resource_type"], d["name"], d["operation"]) for d in json.loads(added.stdout)
    } == want
    listed = gregor("acls", "list", *b, "--topic", topic, "-o", "json")
    assert {(d["operation"], d["principal"]) for d in json.loads(listed.stdout)} == {
        ("READ", "User:app"),
        ("DESCRIBE", "User:app"),
    }
    removed = gregor(
        "acls", "remove", *b, "--allow-principal", "User:app", "--operation", "Read",
        "--topic", topic, "-o", "plain",
    )  # fmt: skip
    assert removed.returncode == 0 and removed.stdout.splitlines()[1].split("\t")[5] == "READ"
    left = gregor("acls", "list", *b, "--resource-pattern-type", "any", "-o", "json")
    ops = {(d["name"], d["operation"]) for d in json.loads(left.stdout)}
    assert (topic, "DESCRIBE") in ops and (topic, "READ") not in ops and (group, "READ") in ops
    bad = gregor(
        "acls", "add", *b, "--allow-principal", "User:a", "--group", group, "--operation", "Write"
    )
    assert bad.returncode == 1
    assert (
        bad.stderr
        == "gregor: GROUP does not support operation Write: one of Delete, Describe, Read or All\n"
    )
    bad = gregor("acls", "add", *b, "--allow-principal", "alice", "--topic", topic)
    assert (
        bad.stderr == "gregor: principal 'alice' is not of the form Type:name (e.g. User:alice)\n"
    )


def test_acls_survive_a_restart(broker: Broker, admin: AdminClient) -> None:
    group = unique("restart")
    binding = acl(ResourceType.GROUP, group, ALICE, AclOperation.DELETE, AclPermissionType.DENY)
    create(admin, binding)
    broker.restart()
    fresh = AdminClient({"bootstrap.servers": broker.bootstrap})
    flt = AclBindingFilter(
        ResourceType.GROUP, group, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    assert list(map(str, fresh.describe_acls(flt, request_timeout=10).result())) == [str(binding)]
