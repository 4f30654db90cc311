"""positional_constructor (gregor/frozen.py): the instance the dataclass would make, frozen."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from gregor.frozen import positional_constructor
from gregor.metadata import image as im
from gregor.metadata import records as r
from gregor.raft import messages as m
from gregor.raft import node as raft_node
from gregor.raft.log import Batch, SnapshotId, new_batch


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    a: int
    b: tuple[int, ...] = ()
    c: str | None = None
    d: object = dataclasses.field(default=None, compare=False, repr=False)


def test_same_instance_as_the_dataclass_makes() -> None:
    make = positional_constructor(Sample)
    made, expected = make(1, (2, 3), "x", "ignored"), Sample(1, (2, 3), "x", "ignored")
    assert type(made) is Sample
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    for f in dataclasses.fields(Sample):  # each value in its own slot, none swapped
        assert getattr(made, f.name) == getattr(expected, f.name)
    assert make(1, (2, 3), "y", None) != expected
    assert make(2, (2, 3), "x", None) != expected
    assert dataclasses.replace(made, a=5) == Sample(5, (2, 3), "x")


def test_still_frozen() -> None:
    made = positional_constructor(Sample)(1, (), None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del made.a  # type: ignore[misc]


def test_every_field_is_required() -> None:
    make = positional_constructor(Sample)
    with pytest.raises(TypeError):
        make(1, (), None)


def test_refuses_what_it_cannot_build_alike() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Mutable, NoSlots, PostInit):
        with pytest.raises(TypeError):
            positional_constructor(cls)


def test_the_hot_constructors_build_what_the_dataclasses_build() -> None:
    """Each use of it in the metadata and raft paths, field for field."""
    tid, d = uuid.UUID(int=7), uuid.UUID(int=9)
    rec = r.PartitionRecord(
        partition_id=0, topic_id=tid, replicas=[1, 2], isr=[2, 1], leader=2, leader_epoch=3,
        partition_epoch=4, leader_recovery_state=1, removing_replicas=[1], adding_replicas=[2],
        directories=[d, d],
    )  # fmt: skip
    reg = im.PartitionRegistration.from_record(rec)
    assert reg == im.PartitionRegistration((1, 2), (2, 1), 2, 3, 4, 1, (1,), (2,), (d, d))
    change = r.PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[2], leader=1)
    merged = reg.merge(change)
    assert merged == im.PartitionRegistration((1, 2), (2,), 1, 4, 5, 1, (1,), (2,), (d, d))
    image = im.EMPTY_IMAGE.replay([(r.TopicRecord(name="t", topic_id=tid), 5, 1), (rec, 6, 1)])
    assert type(image) is im.MetadataImage and (image.offset, image.epoch) == (6, 1)
    assert image.topic("t") == im.TopicImage("t", tid, {0: reg})
    assert new_batch(3, 1, (b"a",), False, b"x") == Batch(3, 1, (b"a",), False, b"x")
    assert new_batch(3, 1, (b"a",), False, b"x").encoded == b"x"
    request = m.new_fetch_request("c", 2, 3, 10, 2, 0, 500, 1024, 77)
    assert request == m.FetchRequest("c", 2, 3, 10, 2, 0, 500, 1024, 77)
    response = m.new_fetch_response(0, 1, 3, 9, 0, (), None, SnapshotId(4, 1), 77)
    assert response == m.FetchResponse(0, 1, 3, 9, 0, (), None, SnapshotId(4, 1), 77)
    assert raft_node._new_entry(5, 2, b"v", True) == raft_node.Entry(5, 2, b"v", True)
    assert raft_node._new_send(2, request) == raft_node.Send(2, request)
