"""ACLs as metadata: the controller's CreateAcls/DeleteAcls plans (controller/acls.py), their
records replayed onto the image, and a snapshot carrying them."""

import uuid

import pytest

from gregor.controller.acls import create_acls, delete_acls
from gregor.metadata import records as r
from gregor.metadata import snapshot as ms
from gregor.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataReplayError
from gregor.protocol import errors
from gregor.raft.log import SnapshotId
from gregor.security.acls import (
    ALLOW,
    ANY,
    DENY,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    UNKNOWN,
    WRITE,
    AclBinding,
    AclFilter,
)
from gregor.security.authorizer import LiveAuthorizer

pytestmark = pytest.mark.unit

A = AclBinding(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
B = AclBinding(GROUP, "g-", PREFIXED, "User:bob", "*", READ, DENY)


def ids() -> object:
    n = iter(range(1, 1000))
    return lambda: uuid.UUID(int=next(n))


def apply(image: MetadataImage, records: list) -> MetadataImage:
    first = image.offset + 1
    return image.replay((rec, first + i, 1) for i, rec in enumerate(records))


def test_created_acls_are_records_replayed_into_the_image() -> None:
    new_id = ids()
    result = create_acls(EMPTY_IMAGE, [A, B, A], new_id)
    assert result.response == [None, None, None]
    assert len(result.records) == 2  # the same binding twice is stored once
    image = apply(EMPTY_IMAGE, result.records)
    assert sorted(map(str, image.acls.values())) == sorted(map(str, [A, B]))
    again = create_acls(image, [A], new_id)
    assert again.records == [] and again.response == [None]  # there already: nothing written


def test_an_invalid_acl_is_refused_and_the_others_created() -> None:
    bad = AclBinding(TOPIC, "", LITERAL, "User:alice", "*", READ, ALLOW)
    result = create_acls(EMPTY_IMAGE, [bad, A], ids())
    assert result.response[0].code == errors.INVALID_REQUEST and result.response[1] is None
    assert len(result.records) == 1


def test_delete_removes_what_the_filters_match_once() -> None:
    image = apply(EMPTY_IMAGE, create_acls(EMPTY_IMAGE, [A, B], ids()).records)
    result = delete_acls(
        image, [AclFilter(TOPIC, "orders", LITERAL), AclFilter(), AclFilter(operation=UNKNOWN)]
    )
    assert result.response[0] == [A]
    assert sorted(map(str, result.response[1])) == sorted(map(str, [A, B]))
    assert result.response[2].code == errors.INVALID_REQUEST
    assert len(result.records) == 2
    assert apply(image, result.records).acls == {}
    assert delete_acls(image, [AclFilter(TOPIC, "x", ANY, operation=WRITE)]).records == []


def test_replaying_a_removal_of_an_unknown_acl_is_an_error() -> None:
    with pytest.raises(MetadataReplayError):
        apply(EMPTY_IMAGE, [r.RemoveAccessControlEntryRecord(id=uuid.UUID(int=5))])


def test_a_snapshot_carries_the_acls() -> None:
    image = apply(EMPTY_IMAGE, create_acls(EMPTY_IMAGE, [A, B], ids()).records)
    data = ms.encode_snapshot(image, 1, 0, 0)
    rebuilt = ms.from_snapshot(data, SnapshotId(image.offset + 1, 1))
    assert dict(rebuilt.acls) == dict(image.acls)


def test_the_live_authorizer_follows_the_image() -> None:
    state = {"image": EMPTY_IMAGE}
    live = LiveAuthorizer(lambda: state["image"].acls)
    assert not live.authorize("User:alice", "h", READ, TOPIC, "orders")
    state["image"] = apply(EMPTY_IMAGE, create_acls(EMPTY_IMAGE, [A], ids()).records)
    assert live.authorize("User:alice", "h", READ, TOPIC, "orders")
    built = live.current()
    state["image"] = apply(state["image"], [r.NoOpRecord()])  # another change: same ACL set
    assert live.current() is built
