"""SCRAM users on a real broker: `gregor users scram` and confluent-kafka's AdminClient
(alter_user_scram_credentials / describe_user_scram_credentials), with Kafka's errors, the
credentials kept across a restart, and the stored keys (salted by librdkafka) authenticating the
password through the SCRAM server."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from cli_helpers import gregor, one_line_error  # noqa: E402

from gregor.clock import ManualClock  # noqa: E402
from gregor.metadata import meta_properties  # noqa: E402
from gregor.metadata.raft_store import RaftMetadataStore  # noqa: E402
from gregor.protocol import api_keys  # noqa: E402
from gregor.protocol.messages import ApiVersionsRequest  # noqa: E402
from gregor.security.sasl_server import AuthenticationFailed  # noqa: E402
from gregor.security.scram import ScramServer  # noqa: E402
from gregor.testing.broker import Broker  # noqa: E402
from gregor.testing.raw_client import RawClient  # noqa: E402

pytestmark = pytest.mark.client
QUIET = logging.getLogger("tests.security.rdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def users(broker: Broker, *args: str, stdin: str | None = None):
    return gregor("users", "scram", *args, "-b", broker.bootstrap, stdin=stdin)


def described(admin: AdminClient) -> dict[str, list[tuple[str, int]]]:
    found = admin.describe_user_scram_credentials().result()
    return {
        user: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
        for user, d in found.items()
    }


def login(store: RaftMetadataStore, mechanism: str, user: str, password: str) -> bool:
    from test_scram import RfcClient

    server = ScramServer(mechanism, store.scram_credential)
    client = RfcClient(mechanism, user, password)
    try:
        server.evaluate(client.final(server.evaluate(client.first())))
    except AuthenticationFailed:
        return False
    return server.complete


def test_scram_users_through_the_cli_and_the_admin_client(tmp_path) -> None:
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        with RawClient(broker.bootstrap) as raw:
            versions = raw.call(api_keys.API_VERSIONS, 3, ApiVersionsRequest()).api_keys
        ranges = {v.api_key: (v.min_version, v.max_version) for v in versions}
        assert ranges[50] == ranges[51] == (0, 0)
        run = users(
            broker, "set", "alice", "--mechanism", "SCRAM-SHA-256", "--password", "alice-secret"
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == "set the SCRAM-SHA-256 credential of user alice\n"
        run = users(
            broker,
            "set",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--iterations",
            "8192",
            stdin="pw512\n",
        )
        assert run.returncode == 0, run.stderr
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 16384), b"bob-pw"
                )
            ]
        )
        assert futures["bob"].result() is None
        assert described(admin) == {
            "alice": [("SCRAM_SHA_256", 4096), ("SCRAM_SHA_512", 8192)],
            "bob": [("SCRAM_SHA_256", 16384)],
        }
        assert users(broker, "describe", "-o", "json").json() == [
            {
                "user": "alice",
                "credentials": [
                    {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                    {"mechanism": "SCRAM-SHA-512", "iterations": 8192},
                ],
            },
            {"user": "bob", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 16384}]},
        ]
        plain = users(broker, "describe", "bob", "-o", "plain")
        assert plain.stdout == "user\tmechanism\titerations\nbob\tSCRAM-SHA-256\t16384\n"
        run = users(broker, "describe", "bob", "zed", "-o", "json")
        assert run.returncode == 1 and json.loads(run.stdout)[0]["user"] == "bob"
        assert (
            run.stderr
            == "error: user zed: attempt to describe a user credential that does not exist: zed\n"
        )

        one_line_error(
            users(
                broker,
                "set",
                "carol",
                "--mechanism",
                "SCRAM-SHA-256",
                "--password",
                "x",
                "--iterations",
                "100",
            ),
            "error: cannot set the credential of user carol: too few iterations",
        )
        one_line_error(
            users(broker, "delete", "carol", "--mechanism", "SCRAM-SHA-256"),
            "error: cannot delete the credential of user carol: attempt to delete a user credential that does not exist",
        )
        run = users(broker, "delete", "alice", "--mechanism", "SCRAM-SHA-512")
        assert (
            run.returncode == 0
            and run.stdout == "deleted the SCRAM-SHA-512 credential of user alice\n"
        )
        futures = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)]
        )
        assert futures["bob"].result() is None
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 20000), b"pw"
                )
            ]
        )
        with pytest.raises(Exception, match="UNACCEPTABLE_CREDENTIAL"):
            futures["dave"].result()

        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        assert described(admin) == {"alice": [("SCRAM_SHA_256", 4096)]}
        assert users(broker, "describe", "-o", "json").json()[0]["user"] == "alice"
        broker.stop()
        logs = os.path.join(broker.data_dir, "logs")
        meta = meta_properties.read(logs)
        assert meta is not None
        store = RaftMetadataStore.open(logs, meta.node_id, meta.cluster_id, clock=ManualClock(0))
        try:
            assert login(store, "SCRAM-SHA-256", "alice", "alice-secret")
            assert not login(store, "SCRAM-SHA-256", "alice", "wrong")
            assert not login(store, "SCRAM-SHA-512", "alice", "pw512")  # deleted
        finally:
            store.close()


def test_users_added_at_format_time_are_there_at_the_first_start(tmp_path) -> None:
    logs = str(tmp_path / "logs")
    run = gregor(
        "storage", "format", "--data-dir", logs,
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "-S", "SCRAM-SHA-512=[name=bob,password=bob-pw,iterations=8192]",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with Broker(data_dir=str(tmp_path)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        assert described(admin) == {
            "admin": [("SCRAM_SHA_256", 4096)],
            "bob": [("SCRAM_SHA_512", 8192)],
        }
    run = gregor(
        "storage", "format", "--data-dir", str(tmp_path / "other"), "-S", "SCRAM-SHA-256=[name=x]"
    )
    assert run.returncode == 2 and "--add-scram" in run.stderr
