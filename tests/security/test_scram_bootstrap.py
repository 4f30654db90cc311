"""SCRAM users given to a new cluster before its first start: `gregor storage format --add-scram`
writes them into bootstrap.checkpoint, the first controller commits them with metadata.version,
and they authenticate their passwords; a damaged bootstrap file stops the node."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gregor.cli.storage import scram_record
from gregor.clock import ManualClock
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import Listener
from gregor.controller.scram_credentials import Deletion
from gregor.metadata import bootstrap
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.security.scram import ScramServer

pytestmark = pytest.mark.unit

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"


def login(store: RaftMetadataStore, mechanism: str, user: str, password: str) -> bool:
    from test_scram import RfcClient

    from gregor.security.sasl_server import AuthenticationFailed

    server = ScramServer(mechanism, store.scram_credential)
    client = RfcClient(mechanism, user, password)
    try:
        server.evaluate(client.final(server.evaluate(client.first())))
    except AuthenticationFailed:
        return False
    return server.complete


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("SCRAM-SHA-1=[name=a,password=b]", "expected SCRAM-SHA-256"),
        ("SCRAM-SHA-256=name=a,password=b", "expected SCRAM-SHA-256"),
        ("SCRAM-SHA-256=[name=a]", "give name and password"),
        ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "give name and password"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=many]", "iterations is a number"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=100]", "Too few iterations"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=99999999]", "Too many iterations"),
        ("SCRAM-SHA-256=[name=a,password=b,salt=!!]", "salt base64"),
    ],
)
def test_bad_add_scram_specs_are_refused(spec: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        scram_record(spec)


def test_bootstrap_users_are_committed_once_with_the_first_records(tmp_path: Path) -> None:
    users = [
        scram_record('SCRAM-SHA-256=[name=admin,password="admin-secret"]'),
        scram_record("SCRAM-SHA-512=[name=broker,password=inter,iterations=8192,salt=c2FsdHk=]"),
    ]
    assert users[1].salt == b"salty" and users[1].iterations == 8192
    bootstrap.write(str(tmp_path), users, 25, 0)
    assert bootstrap.read(str(tmp_path)) == users
    clock = ManualClock(1_700_000_000_000)

    def start() -> tuple[RaftMetadataStore, LocalController]:
        store = RaftMetadataStore.open(str(tmp_path), 1, CLUSTER, clock=clock)
        ctl = LocalController(store, 1, {})
        ctl.start([Listener("PLAINTEXT", "127.0.0.1", 9092)], [uuid.UUID(int=1)], None, None, 0)
        return store, ctl

    store, ctl = start()
    assert set(store.image.scram) == {("admin", 1), ("broker", 2)}
    assert store.image.features["metadata.version"] == 25
    assert login(store, "SCRAM-SHA-256", "admin", "admin-secret")
    assert login(store, "SCRAM-SHA-512", "broker", "inter")
    assert not login(store, "SCRAM-SHA-256", "admin", "wrong")
    ctl.alter_user_scram_credentials([Deletion("admin", 1)], [])
    store.close()
    store, _ = start()  # a log already bootstrapped: the file's users are not written again
    assert set(store.image.scram) == {("broker", 2)}
    store.close()
    (tmp_path / bootstrap.FILE_NAME).write_bytes(b"damaged later")  # not read again either
    store, _ = start()
    assert set(store.image.scram) == {("broker", 2)}
    store.close()


def test_a_damaged_bootstrap_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / bootstrap.FILE_NAME).write_bytes(b"not a snapshot")
    with pytest.raises(bootstrap.BootstrapError, match="bootstrap.checkpoint"):
        bootstrap.read(str(tmp_path))
    assert bootstrap.read(str(tmp_path / "elsewhere")) == []
