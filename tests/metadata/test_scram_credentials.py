"""SCRAM credentials in the metadata log: AlterUserScramCredentials' rules as Kafka's controller
applies them, DescribeUserScramCredentials over the image, the records' bytes, and credentials
surviving a restart and a snapshot."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from gregor.clock import ManualClock
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import Listener
from gregor.controller.scram_credentials import Deletion, Upsertion, alter, describe
from gregor.metadata import records as r
from gregor.metadata import snapshot as ms
from gregor.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataReplayError
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol import errors
from gregor.security.scram import SCRAM_SHA_256, ScramServer, credential_from_password

pytestmark = pytest.mark.unit

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"
SALT = b"salt-of-sixteen!"
DUPLICATE = errors.BY_NAME["DUPLICATE_RESOURCE"].code
NOT_FOUND = errors.BY_NAME["RESOURCE_NOT_FOUND"].code
UNACCEPTABLE = errors.BY_NAME["UNACCEPTABLE_CREDENTIAL"].code
UNSUPPORTED = errors.BY_NAME["UNSUPPORTED_SASL_MECHANISM"].code


def upsert(
    name: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw"
) -> Upsertion:
    h = {1: "sha256", 2: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(h, password.encode(), SALT, max(iterations, 1))
    return Upsertion(name, mechanism, iterations, SALT, salted)


def applied(image: MetadataImage, records: list[object]) -> MetadataImage:
    return image.replay((rec, i, 1) for i, rec in enumerate(records))


def test_an_upsertion_writes_the_keys_a_password_derives_never_the_password() -> None:
    records, results = alter(EMPTY_IMAGE, [], [upsert("alice", password="pencil")])
    assert results == [("alice", errors.NONE, None)]
    [rec] = records
    expected = credential_from_password(SCRAM_SHA_256, "pencil", SALT, 4096)
    assert (rec.name, rec.mechanism, rec.salt, rec.iterations) == ("alice", 1, SALT, 4096)
    assert (rec.stored_key, rec.server_key) == (expected.stored_key, expected.server_key)
    image = applied(EMPTY_IMAGE, records)
    assert image.scram_credential("alice", "SCRAM-SHA-256") == expected
    assert image.scram_credential("alice", "SCRAM-SHA-512") is None
    assert image.scram_credential("alice", "PLAIN") is None


@pytest.mark.parametrize(
    ("item", "code", "message"),
    [
        (upsert(""), UNACCEPTABLE, "Username must not be empty"),
        (upsert("a", mechanism=0), UNSUPPORTED, "Unknown SCRAM mechanism"),
        (upsert("a", mechanism=3), UNSUPPORTED, "Unknown SCRAM mechanism"),
        (upsert("a", iterations=4095), UNACCEPTABLE, "Too few iterations"),
        (upsert("a", iterations=16385), UNACCEPTABLE, "Too many iterations"),
        (Deletion("a", 1), NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        (Deletion("a", 9), UNSUPPORTED, "Unknown SCRAM mechanism"),
    ],
)
def test_refused_alterations(item: object, code: int, message: str) -> None:
    dels = [item] if isinstance(item, Deletion) else []
    ups = [item] if isinstance(item, Upsertion) else []
    records, results = alter(EMPTY_IMAGE, dels, ups)
    assert records == [] and results == [("a" if item.name else "", code, message)]  # type: ignore[attr-defined]


def test_a_user_altered_twice_in_one_request_fails_whole_and_others_go_through() -> None:
    image = applied(EMPTY_IMAGE, alter(EMPTY_IMAGE, [], [upsert("bob"), upsert("carol")])[0])
    records, results = alter(
        image,
        [Deletion("bob", 1)],
        [upsert("bob", mechanism=2), upsert("dave"), upsert("carol"), upsert("carol", 2)],
    )
    assert results == [
        ("bob", DUPLICATE, "A user credential cannot be altered twice in the same request"),
        ("dave", errors.NONE, None),
        ("carol", DUPLICATE, "A user credential cannot be altered twice in the same request"),
    ]
    assert [rec.name for rec in records] == ["dave"]


def test_describe_lists_mechanisms_and_iterations_and_kafkas_errors() -> None:
    records, _ = alter(EMPTY_IMAGE, [], [upsert("alice", 1, 8192), upsert("bob", 2)])
    records += alter(applied(EMPTY_IMAGE, records), [], [upsert("alice", 2, 4096)])[0]
    image = applied(EMPTY_IMAGE, records)
    assert describe(image, None) == [
        ("alice", errors.NONE, None, [(1, 8192), (2, 4096)]),
        ("bob", errors.NONE, None, [(2, 4096)]),
    ]
    assert describe(image, []) == describe(image, None)
    assert describe(image, ["bob", "zed", "bob"]) == [
        (
            "bob",
            DUPLICATE,
            "Cannot describe SCRAM credentials for the same user twice in a single request: bob",
            [],
        ),
        ("zed", NOT_FOUND, "Attempt to describe a user credential that does not exist: zed", []),
    ]


def test_a_deletion_removes_one_mechanism_and_replaying_a_missing_one_is_an_error() -> None:
    image = applied(EMPTY_IMAGE, alter(EMPTY_IMAGE, [], [upsert("a", 1)])[0])
    image = applied(image, alter(image, [], [upsert("a", 2)])[0])
    records, results = alter(image, [Deletion("a", 1)], [])
    assert results == [("a", errors.NONE, None)]
    image = applied(image, records)
    assert describe(image, ["a"]) == [("a", errors.NONE, None, [(2, 4096)])]
    with pytest.raises(MetadataReplayError):
        applied(image, records)


def test_the_records_bytes_are_kafkas() -> None:
    rec = r.UserScramCredentialRecord(
        name="a", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096
    )
    # frame v1, type 11, version 0, compact "a", int8 1, compact bytes x3, int32, no tags
    assert r.encode(rec).hex() == "010b000261010273026b02760000100000"
    removal = r.RemoveUserScramCredentialRecord(name="a", mechanism=2)
    assert r.encode(removal).hex() == "0116000261" + "02" + "00"
    assert r.decode(r.encode(removal)) == removal


def test_credentials_survive_a_restart_and_a_snapshot_and_authenticate(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = RaftMetadataStore.open(str(tmp_path), 1, CLUSTER, clock=clock, configs={})
    ctl = LocalController(store, 1, {})
    ctl.start([Listener("PLAINTEXT", "127.0.0.1", 9092)], [uuid.UUID(int=1)], None, None, 0)
    assert ctl.alter_user_scram_credentials([], [upsert("alice", password="pencil")]) == [
        ("alice", errors.NONE, None)
    ]
    assert ctl.alter_user_scram_credentials([], [upsert("bob", 2)]) == [("bob", errors.NONE, None)]
    assert ctl.alter_user_scram_credentials([Deletion("bob", 2)], []) == [
        ("bob", errors.NONE, None)
    ]
    image = store.image
    sid = store.snapshot()
    assert (
        sid is not None
        and ms.from_snapshot(ms.encode_snapshot(image, 1, 0, 0), sid).scram == image.scram
    )
    assert ctl.alter_user_scram_credentials([], [upsert("carol")]) == [("carol", errors.NONE, None)]
    store.close()
    again = RaftMetadataStore.open(str(tmp_path), 1, CLUSTER, clock=clock, configs={})
    assert set(again.image.scram) == {("alice", 1), ("carol", 1)}
    server = ScramServer("SCRAM-SHA-256", again.scram_credential)
    server.evaluate(b"n,,n=alice,r=abc")
    assert not server.complete  # the rest of the exchange is tests/security/test_scram.py's
    assert again.scram_credential("bob", "SCRAM-SHA-512") is None
    again.close()
