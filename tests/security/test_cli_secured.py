"""The commands that send requests with gregor's own codec (quotas, quorum, cluster health,
log-dirs, configs) reach a SASL_SSL listener with the TLS and SASL settings of --command-config,
as their confluent-kafka requests do (acls and users scram, with ACLs on: alice is a super
user, bob is not); a wrong password, an untrusted certificate or a mechanism they cannot speak
is one line on stderr and exit status 1."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from security_certs import Pki

from gregor import Broker

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from cli_helpers import Run, gregor, one_line_error  # noqa: E402

pytestmark = pytest.mark.client

USERS = 'user_alice="alice-secret" user_bob="bob-secret"'
JAAS = f"org.apache.kafka.common.security.plain.PlainLoginModule required {USERS};"


@pytest.fixture(scope="module")
def broker(pki: Pki) -> Iterator[Broker]:
    config = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:alice",
    }
    with Broker(config, log_level="INFO") as b:
        yield b


def settings(path: Path, pki: Pki, **overrides: str) -> str:
    values = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        **overrides,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items() if v))
    return str(path)


def run(broker: Broker, config: str, *args: str) -> Run:
    return gregor(*args, "-b", broker.bootstrap, "--command-config", config)


def test_quotas_quorum_health_and_log_dirs_over_sasl_ssl(
    broker: Broker, pki: Pki, tmp_path: Path
) -> None:
    config = settings(tmp_path / "client.properties", pki)
    altered = run(
        broker, config, "quotas", "alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config", "producer_byte_rate=1048576",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    described = run(broker, config, "quotas", "describe", "-o", "json")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout) == [
        {"entity": [{"type": "users", "name": "alice"}], "quotas": {"producer_byte_rate": 1048576}}
    ]
    quorum = run(broker, config, "quorum", "describe", "-o", "json")
    assert quorum.returncode == 0, quorum.stderr
    assert json.loads(quorum.stdout)["leader_id"] == 1
    health = run(broker, config, "cluster", "health", "-o", "json")
    assert health.returncode == 0, (health.stdout, health.stderr)
    found = json.loads(health.stdout)
    assert found["is_healthy"] is True and found["not_checked"] == [], found
    assert found["controller_id"] == 1
    dirs = run(broker, config, "log-dirs", "describe", "-o", "json")
    assert dirs.returncode == 0, dirs.stderr
    assert json.loads(dirs.stdout)[0]["broker"] == 1


def test_acls_and_scram_users_over_sasl_ssl(broker: Broker, pki: Pki, tmp_path: Path) -> None:
    """`gregor acls` and `gregor users scram` as alice (a super user) through --command-config;
    bob, with no ACL on the cluster, may not add ACLs (CLUSTER_AUTHORIZATION_FAILED)."""
    alice = settings(tmp_path / "alice.properties", pki)
    added = run(
        broker, alice, "acls", "add", "--allow-principal", "User:bob", "--operation", "Read",
        "--topic", "cli-secured", "-o", "json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = run(broker, alice, "acls", "list", "--topic", "cli-secured", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [(a["principal"], a["operation"]) for a in json.loads(listed.stdout)] == [
        ("User:bob", "READ")
    ]
    bob = settings(
        tmp_path / "bob.properties", pki, **{"sasl.username": "bob", "sasl.password": "bob-secret"}
    )
    refused = run(
        broker, bob, "acls", "add", "--allow-principal", "User:bob", "--operation", "All",
        "--topic", "cli-secured",
    )  # fmt: skip
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.endswith(": request CreateAcls is not authorized\n"), refused.stderr
    created = run(
        broker, alice, "users", "scram", "set", "carol", "--mechanism", "SCRAM-SHA-512",
        "--password", "carol-secret", "--iterations", "8192",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    described = run(broker, alice, "users", "scram", "describe", "carol", "-o", "json")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout) == [
        {"user": "carol", "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}
    ]
    removed = run(
        broker, alice, "acls", "remove", "--allow-principal", "User:bob", "--operation", "Read",
        "--topic", "cli-secured",
    )  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    left = run(broker, alice, "acls", "list", "--topic", "cli-secured", "-o", "json")
    assert json.loads(left.stdout) == []


def test_an_unsecured_oauthbearer_token_as_librdkafka_takes_it(
    broker: Broker, pki: Pki, tmp_path: Path
) -> None:
    """OAUTHBEARER with librdkafka's unsecured-token settings: the codec's commands (quotas,
    quorum) and the confluent-kafka ones (acls) log in as the token's principal; one naming
    bob, no super user, is refused the cluster's ACLs."""
    oauth = {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.username": "",
        "sasl.password": "",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=alice",
    }
    alice = settings(tmp_path / "alice-oauth.properties", pki, **oauth)
    for command in (["quotas", "describe"], ["quorum", "describe"], ["acls", "list"]):
        done = run(broker, alice, *command, "-o", "json")
        assert done.returncode == 0, (command, done.stderr)
    bob = settings(
        tmp_path / "bob-oauth.properties",
        pki,
        **{**oauth, "sasl.oauthbearer.config": "principal=bob"},
    )
    refused = run(broker, bob, "quorum", "describe")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, (
        refused.stderr
    )


def test_a_wrong_password_is_one_line(broker: Broker, pki: Pki, tmp_path: Path) -> None:
    config = settings(tmp_path / "wrong.properties", pki, **{"sasl.password": "not-it"})
    one_line_error(
        run(broker, config, "quorum", "describe"),
        f"gregor: cannot connect to {broker.bootstrap}: SASL authentication failed: "
        "Authentication failed: Invalid username or password",
    )


def test_an_untrusted_certificate_is_one_line(broker: Broker, pki: Pki, tmp_path: Path) -> None:
    config = settings(tmp_path / "untrusted.properties", pki, **{"ssl.ca.location": ""})
    failed = run(broker, config, "quotas", "describe")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert failed.stderr.startswith(f"gregor: cannot connect to {broker.bootstrap}: TLS: ")
    assert "CERTIFICATE_VERIFY_FAILED" in failed.stderr


def test_a_mechanism_the_commands_cannot_speak_is_one_line(
    broker: Broker, pki: Pki, tmp_path: Path
) -> None:
    config = settings(tmp_path / "gssapi.properties", pki, **{"sasl.mechanism": "GSSAPI"})
    one_line_error(
        run(broker, config, "quotas", "describe"),
        "gregor: sasl.mechanism=GSSAPI: this command authenticates with OAUTHBEARER, PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512 (--command-config)",
    )
