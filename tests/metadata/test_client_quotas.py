"""Client quotas in the metadata log: AlterClientQuotas' rules as Kafka's controller applies
them, DescribeClientQuotas' filters over the image, the record's bytes, and quotas surviving a
restart and a snapshot."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest

from gregor.clock import ManualClock
from gregor.controller.client_quotas import Alteration, Component, Op, alter, describe
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import Listener
from gregor.metadata import records as r
from gregor.metadata import snapshot as ms
from gregor.metadata.image import EMPTY_IMAGE, MetadataImage
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol import errors

pytestmark = pytest.mark.unit

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"
INVALID = errors.BY_NAME["INVALID_REQUEST"].code
UNSUPPORTED = errors.BY_NAME["UNSUPPORTED_VERSION"].code
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"


def put(*entity: tuple[str, str | None], **values: float) -> Alteration:
    return Alteration(list(entity), [Op(k, v, False) for k, v in values.items()])


def applied(image: MetadataImage, records: list[object]) -> MetadataImage:
    return image.replay((rec, i, 1) for i, rec in enumerate(records))


@pytest.mark.parametrize(
    ("alteration", "message"),
    [
        (put(producer_byte_rate=1.0), "Invalid empty client quota entity"),
        (put(("group", "g"), producer_byte_rate=1.0), "Unhandled client quota entity type: group"),
        (put(("user", ""), producer_byte_rate=1.0), "Empty user not supported"),
        (
            put(("user", "a"), ("user", "b"), producer_byte_rate=1.0),
            "Invalid client quota entity, duplicate entity entry user",
        ),
        (put(("ip", "1.2.3.4"), ("user", "a"), connection_creation_rate=1.0), "IP entity"),
        (put(("ip", "not-an-ip"), connection_creation_rate=1.0), "not a valid IP"),
        (put(("user", "a"), bogus_rate=1.0), "Invalid configuration key bogus_rate"),
        (put(("ip", None), producer_byte_rate=1.0), "Invalid configuration key"),
        (put(("user", "a"), producer_byte_rate=0.0), "must be greater than 0"),
        (put(("user", "a"), consumer_byte_rate=-5.0), "must be greater than 0"),
        (put(("user", "a"), producer_byte_rate=1.5), "cannot be a fractional value"),
        (
            Alteration([("user", "a")], [Op(PBR, 1.0, False), Op(PBR, 2.0, False)]),
            "Duplicate quota key producer_byte_rate",
        ),
    ],
)
def test_refused_alterations(alteration: Alteration, message: str) -> None:
    records, [(entity, code, text)] = alter(EMPTY_IMAGE, [alteration])
    assert (records, entity, code) == ([], alteration.entity, INVALID)
    assert text is not None and message in text


def test_a_double_quota_may_be_fractional_and_the_ip_default_is_accepted() -> None:
    records, results = alter(
        EMPTY_IMAGE,
        [
            put(("client-id", "c"), request_percentage=12.5, controller_mutation_rate=0.5),
            put(("ip", None), connection_creation_rate=10.0),
        ],
    )
    assert [code for _, code, _ in results] == [errors.NONE, errors.NONE]
    image = applied(EMPTY_IMAGE, records)
    assert dict(image.client_quotas) == {
        (("client-id", "c"),): {"request_percentage": 12.5, "controller_mutation_rate": 0.5},
        (("ip", None),): {"connection_creation_rate": 10.0},
    }


def test_only_changes_are_written_and_removal_drops_an_empty_entity() -> None:
    ent = [("user", "alice"), ("client-id", None)]
    records, _ = alter(EMPTY_IMAGE, [put(*ent, producer_byte_rate=1024.0)])
    image = applied(EMPTY_IMAGE, records)
    key = (("client-id", None), ("user", "alice"))
    assert dict(image.client_quotas) == {key: {PBR: 1024.0}}
    again, results = alter(image, [put(*ent, producer_byte_rate=1024.0)])
    assert (again, results) == ([], [(ent, errors.NONE, None)])
    gone = Alteration(ent, [Op(PBR, 0.0, True), Op(CBR, 0.0, True)])
    records, results = alter(image, [gone])
    assert [(rec.key, rec.remove) for rec in records] == [(PBR, True)]  # CBR was never set
    assert dict(applied(image, records).client_quotas) == {}


def test_an_entity_twice_fails_the_second_and_keeps_the_first() -> None:
    records, results = alter(
        EMPTY_IMAGE, [put(("user", "a"), producer_byte_rate=1.0), put(("user", "a"), **{CBR: 2.0})]
    )
    assert [code for _, code, _ in results] == [errors.NONE, INVALID]
    assert [rec.key for rec in records] == [PBR]


def _image() -> MetadataImage:
    records, _ = alter(
        EMPTY_IMAGE,
        [
            put(("user", "alice"), producer_byte_rate=100.0),
            put(("user", None), producer_byte_rate=200.0),
            put(("user", "alice"), ("client-id", "app"), consumer_byte_rate=300.0),
            put(("client-id", None), consumer_byte_rate=400.0),
        ],
    )
    return applied(EMPTY_IMAGE, records)


@pytest.mark.parametrize(
    ("components", "strict", "expected"),
    [
        ([], False, 4),
        ([], True, 0),
        ([Component("user", 0, "alice")], False, 2),
        ([Component("user", 0, "alice")], True, 1),
        ([Component("user", 1, None)], True, 1),
        ([Component("user", 2, None)], True, 2),  # a name or the default
        ([Component("user", 2, None)], False, 3),
        ([Component("client-id", 2, None), Component("user", 0, "alice")], True, 1),
        ([Component("client-id", 0, "nope")], False, 0),
    ],
)
def test_describe_filters(components: list[Component], strict: bool, expected: int) -> None:
    code, message, entries = describe(_image(), components, strict)
    assert (code, message) == (errors.NONE, None)
    assert entries is not None and len(entries) == expected


@pytest.mark.parametrize(
    ("components", "code"),
    [
        ([Component("", 0, "a")], INVALID),
        ([Component("user", 0, "a"), Component("user", 2, None)], INVALID),
        ([Component("user", 0, None)], INVALID),
        ([Component("user", 1, "a")], INVALID),
        ([Component("user", 2, "a")], INVALID),
        ([Component("user", 7, None)], INVALID),
        ([Component("ip", 2, None), Component("user", 2, None)], INVALID),
        ([Component("group", 2, None)], UNSUPPORTED),
    ],
)
def test_describe_refuses_bad_filters(components: list[Component], code: int) -> None:
    got, message, entries = describe(_image(), components, False)
    assert (got, entries) == (code, None) and message


def test_the_records_bytes_are_kafkas() -> None:
    E = r.ClientQuotaRecord.EntityData
    rec = r.ClientQuotaRecord(
        entity=[E(entity_type="user", entity_name=None)], key="k", value=1.0, remove=False
    )
    # frame version 1, api key 14, version 0; one entity: "user", null name, no tags; "k";
    # 1.0 as a big-endian double; remove false; no tags.
    expected = "010e00" + "02" + "0575736572" + "00" + "00" + "026b"
    expected += struct.pack(">d", 1.0).hex() + "00" + "00"
    assert r.encode(rec).hex() == expected
    assert r.decode(r.encode(rec)) == rec


def test_quotas_survive_a_restart_and_a_snapshot(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = RaftMetadataStore.open(str(tmp_path), 1, CLUSTER, clock=clock, configs={})
    ctl = LocalController(store, 1, {})
    ctl.start([Listener("PLAINTEXT", "127.0.0.1", 9092)], [uuid.UUID(int=1)], None, None, 0)
    ok = [([("user", "alice")], errors.NONE, None)]
    assert ctl.alter_client_quotas([put(("user", "alice"), producer_byte_rate=5.0)], False) == ok
    assert ctl.alter_client_quotas([put(("user", "alice"), consumer_byte_rate=6.0)], True) == ok
    assert dict(store.image.client_quotas) == {(("user", "alice"),): {PBR: 5.0}}  # validate_only
    image = store.image
    sid = store.snapshot()
    assert sid is not None
    rebuilt = ms.from_snapshot(ms.encode_snapshot(image, 1, 0, 0), sid)
    assert rebuilt.client_quotas == image.client_quotas
    ctl.alter_client_quotas([put(("client-id", None), consumer_byte_rate=7.0)], False)
    store.close()
    again = RaftMetadataStore.open(str(tmp_path), 1, CLUSTER, clock=clock, configs={})
    assert dict(again.image.client_quotas) == {
        (("user", "alice"),): {PBR: 5.0},
        (("client-id", None),): {CBR: 7.0},
    }
    again.close()
