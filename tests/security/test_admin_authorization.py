"""With ACLs on, the SCRAM credential APIs are authorized on the CLUSTER resource as Kafka does:
a user with no ACL there (eve) gets CLUSTER_AUTHORIZATION_FAILED from AlterUserScramCredentials
(ALTER), and nothing is changed; a super user (admin)
may do both. (The client-quota APIs need DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster:
test_client_quotas.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from security_clients import Target, confluent_conf

from gregor import Broker

pytestmark = pytest.mark.client

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_eve="eve-pw";'
)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    with Broker(config) as b:
        yield b


def admin_as(broker: Broker, user: str) -> AdminClient:
    target = Target(broker.bootstrap, "SASL_PLAINTEXT", user=user, password=f"{user}-pw")
    return AdminClient(confluent_conf(target))


def upsert(user: str) -> UserScramCredentialUpsertion:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    return UserScramCredentialUpsertion(user, info, b"secret")


def code_of(call) -> int:
    with pytest.raises(KafkaException) as failure:
        call()
    return failure.value.args[0].code()


def test_scram_apis_need_the_cluster_acls(broker: Broker) -> None:
    eve, admin = admin_as(broker, "eve"), admin_as(broker, "admin")
    altered = eve.alter_user_scram_credentials([upsert("mallory")])["mallory"]
    assert code_of(lambda: altered.result(30)) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (eve's DescribeUserScramCredentials is refused too, but confluent-kafka 2.16 aborts the
    # process on that error answer, whoever sends it: not asked here)
    admin.alter_user_scram_credentials([upsert("carol")])["carol"].result(30)
    assert set(admin.describe_user_scram_credentials().result(30)) == {"carol"}  # no mallory
