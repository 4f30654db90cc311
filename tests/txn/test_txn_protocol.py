"""The transaction APIs on the wire, from a raw socket with our own codec, version by version:
FindCoordinator key_type 1, InitProducerId with a transactional id, AddPartitionsToTxn v0-5
(the client form and the batched broker form with verify_only), AddOffsetsToTxn, EndTxn v0-5,
DescribeTransactions, ListTransactions v0-1, with Kafka's errors; markers reach the partitions;
the state survives a clean restart and a SIGKILL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from client_txn_helpers import TXN_BROKER_CONFIG
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ListTransactionsRequest,
)
from gregor.testing.raw_client import RawClient

APR = AddPartitionsToTxnRequest


class Raw(RawClient):
    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, client_id="txn-test", timeout_s=20)

    # -- the APIs -------------------------------------------------------------------------------

    def find(self, tid: str, version: int = 3) -> Any:
        return self.call(
            api_keys.FIND_COORDINATOR, version, FindCoordinatorRequest(key=tid, key_type=1)
        )

    def init(
        self, tid: str, version: int = 4, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
    ) -> Any:
        body = InitProducerIdRequest(
            transactional_id=tid,
            transaction_timeout_ms=timeout_ms,
            producer_id=pid,
            producer_epoch=epoch,
        )
        return self.call(api_keys.INIT_PRODUCER_ID, version, body)

    def init_ok(self, tid: str, **kw: Any) -> tuple[int, int]:
        """InitProducerId, retried while a fenced transaction is aborted."""
        for _ in range(100):
            r = self.init(tid, **kw)
            if r.error_code != codes.CONCURRENT_TRANSACTIONS:
                assert r.error_code == codes.NONE, r
                return r.producer_id, r.producer_epoch
            time.sleep(0.05)
        raise AssertionError("still CONCURRENT_TRANSACTIONS")

    def add(
        self, tid: str, pid: int, epoch: int, partitions: dict[str, list[int]], version: int = 3
    ) -> dict[tuple[str, int], int]:
        topics = [
            APR.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in partitions.items()
        ]
        r = self.call(
            api_keys.ADD_PARTITIONS_TO_TXN,
            version,
            APR(
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=topics,
            ),
        )
        return {
            (t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

    def end(self, tid: str, pid: int, epoch: int, committed: bool, version: int = 3) -> Any:
        body = EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed
        )
        return self.call(api_keys.END_TXN, version, body)

    def describe(self, *tids: str) -> list[Any]:
        return self.call(
            api_keys.DESCRIBE_TRANSACTIONS,
            0,
            DescribeTransactionsRequest(transactional_ids=list(tids)),
        ).transaction_states

    def end_offset(self, topic: str, partition: int) -> int:
        LR = ListOffsetsRequest
        body = LR(
            replica_id=-1,
            isolation_level=0,
            topics=[
                LR.ListOffsetsTopic(
                    name=topic,
                    partitions=[LR.ListOffsetsPartition(partition_index=partition, timestamp=-1)],
                )
            ],
        )
        r = self.call(api_keys.LIST_OFFSETS, 2, body)
        [p] = r.topics[0].partitions
        assert p.error_code == 0, p
        return int(p.offset)


@pytest.fixture
def broker_config() -> dict[str, str]:
    """`make_broker` starts brokers as `txn_protocol_broker` is."""
    return dict(TXN_BROKER_CONFIG)


@pytest.fixture
def raw(txn_protocol_broker: Broker) -> Iterator[Raw]:
    conn = Raw(txn_protocol_broker.bootstrap)
    r = conn.find("warm-up")  # creates __transaction_state, as a client's first request does
    assert r.error_code == codes.NONE, r
    yield conn
    conn.close()


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(15)


def test_api_versions_advertise_the_transaction_apis(raw: Raw) -> None:
    r = raw.call(
        api_keys.API_VERSIONS,
        3,
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    served = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert served[api_keys.INIT_PRODUCER_ID] == (0, 5)
    assert served[api_keys.ADD_PARTITIONS_TO_TXN] == (0, 5)
    assert served[api_keys.ADD_OFFSETS_TO_TXN] == (0, 4)
    assert served[api_keys.END_TXN] == (0, 5)
    assert served[api_keys.DESCRIBE_TRANSACTIONS] == (0, 0)
    assert served[api_keys.LIST_TRANSACTIONS] == (0, 1)


def test_find_coordinator_for_transactional_ids(txn_protocol_broker: Broker, raw: Raw) -> None:
    host, _, port = txn_protocol_broker.bootstrap.rpartition(":")
    for v in (1, 2, 3):
        r = raw.find("some-id", v)
        assert (r.error_code, r.node_id, r.host, r.port) == (0, 1, host, int(port)), v
    for v in (4, 5, 6):
        r = raw.call(
            api_keys.FIND_COORDINATOR,
            v,
            FindCoordinatorRequest(key_type=1, coordinator_keys=["x", "y"]),
        )
        assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [
            ("x", 0, 1),
            ("y", 0, 1),
        ]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_commit_with_the_client_versions(
    txn_protocol_broker: Broker, raw: Raw, name: str, version: int
) -> None:
    create_topic(txn_protocol_broker.bootstrap, name)
    pid, epoch = raw.init_ok(name, version=min(version + 1, 5))
    assert epoch == 0
    before = [raw.end_offset(name, p) for p in (0, 1)]
    assert raw.add(name, pid, epoch, {name: [0, 1]}, version) == {(name, 0): 0, (name, 1): 0}
    r = raw.call(
        api_keys.ADD_OFFSETS_TO_TXN,
        version,
        AddOffsetsToTxnRequest(
            transactional_id=name, producer_id=pid, producer_epoch=epoch, group_id="g1"
        ),
    )
    assert r.error_code == codes.NONE
    [d] = raw.describe(name)
    offsets_partition = partition_for("g1", 3)
    assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch) == (
        0,
        "Ongoing",
        pid,
        epoch,
    )
    assert sorted((t.topic, sorted(t.partitions)) for t in d.topics) == sorted(
        [(name, [0, 1]), ("__consumer_offsets", [offsets_partition])]
    )
    r = raw.end(name, pid, epoch, True, version)
    assert r.error_code == codes.NONE
    [d] = raw.describe(name)
    assert d.transaction_state == "CompleteCommit" and d.topics == []
    # One COMMIT marker in each partition of the transaction.
    assert [raw.end_offset(name, p) for p in (0, 1)] == [b + 1 for b in before]
    # A retried EndTxn is answered NONE; the other outcome INVALID_TXN_STATE.
    assert raw.end(name, pid, epoch, True, version).error_code == codes.NONE
    assert raw.end(name, pid, epoch, False, version).error_code == codes.INVALID_TXN_STATE


def test_add_partitions_refusals(txn_protocol_broker: Broker, raw: Raw, name: str) -> None:
    create_topic(txn_protocol_broker.bootstrap, name)
    pid, epoch = raw.init_ok(name)
    got = raw.add(name, pid, epoch, {name: [0, 7], "no-such-topic": [0]})
    assert got == {
        (name, 0): codes.OPERATION_NOT_ATTEMPTED,
        (name, 7): codes.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): codes.UNKNOWN_TOPIC_OR_PARTITION,
    }
    got = raw.add(name, pid, epoch, {"__consumer_offsets": [0], name: [0]})
    assert got == {
        ("__consumer_offsets", 0): codes.TOPIC_AUTHORIZATION_FAILED,
        (name, 0): codes.OPERATION_NOT_ATTEMPTED,
    }
    [d] = raw.describe(name)
    assert d.transaction_state == "Empty", "nothing was added"
    assert raw.add(name, pid + 1, epoch, {name: [0]}) == {
        (name, 0): codes.INVALID_PRODUCER_ID_MAPPING
    }
    assert raw.add("unknown-" + name, pid, epoch, {name: [0]}) == {
        (name, 0): codes.INVALID_PRODUCER_ID_MAPPING
    }
    # An old epoch: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before (KIP-588).
    raw.init_ok(name)
    assert raw.add(name, pid, epoch, {name: [0]}, version=1) == {
        (name, 0): codes.INVALID_PRODUCER_EPOCH
    }
    assert raw.add(name, pid, epoch, {name: [0]}, version=2) == {(name, 0): codes.PRODUCER_FENCED}
    assert raw.end(name, pid, epoch, True, version=1).error_code == codes.INVALID_PRODUCER_EPOCH
    assert raw.end(name, pid, epoch, True, version=3).error_code == codes.PRODUCER_FENCED


def test_init_producer_id_errors_and_kip360(raw: Raw, name: str) -> None:
    assert raw.init(name, timeout_ms=900_001).error_code == codes.INVALID_TRANSACTION_TIMEOUT
    assert raw.init(name, timeout_ms=0).error_code == codes.INVALID_TRANSACTION_TIMEOUT
    assert raw.init("", version=4).error_code == codes.INVALID_REQUEST
    assert raw.init(name, version=3, pid=5, epoch=-1).error_code == codes.INVALID_REQUEST
    pid, epoch = raw.init_ok(name, version=0)
    r = raw.init(name, version=4, pid=pid, epoch=epoch)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
    assert (
        raw.init(name, version=3, pid=pid, epoch=epoch + 7).error_code
        == codes.INVALID_PRODUCER_EPOCH
    )
    r = raw.init(name, version=4, pid=pid, epoch=epoch + 7)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (codes.PRODUCER_FENCED, -1, -1)


def test_a_new_producer_fences_the_open_transaction(
    txn_protocol_broker: Broker, raw: Raw, name: str
) -> None:
    create_topic(txn_protocol_broker.bootstrap, name)
    pid, epoch = raw.init_ok(name)
    raw.add(name, pid, epoch, {name: [1]})
    before = raw.end_offset(name, 1)
    assert raw.init(name).error_code == codes.CONCURRENT_TRANSACTIONS
    pid2, epoch2 = raw.init_ok(name)
    assert (pid2, epoch2) == (pid, epoch + 2)
    assert raw.end_offset(name, 1) == before + 1, "the ABORT marker"
    assert raw.end(name, pid, epoch, True).error_code == codes.PRODUCER_FENCED


def test_end_txn_v5_bumps_the_epoch(txn_protocol_broker: Broker, raw: Raw, name: str) -> None:
    create_topic(txn_protocol_broker.bootstrap, name)
    pid, epoch = raw.init_ok(name, version=5)
    raw.add(name, pid, epoch, {name: [0]})
    r = raw.end(name, pid, epoch, False, version=5)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
    [d] = raw.describe(name)
    assert (d.transaction_state, d.producer_epoch) == ("CompleteAbort", epoch + 1)
    r = raw.end(name, pid, epoch, False, version=5)  # the retry of the same request
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)


def test_batched_add_partitions_and_verify_only(
    txn_protocol_broker: Broker, raw: Raw, name: str
) -> None:
    create_topic(txn_protocol_broker.bootstrap, name)
    a, b = name + "-a", name + "-b"
    pa, ea = raw.init_ok(a)
    pb, eb = raw.init_ok(b)
    raw.add(a, pa, ea, {name: [0]})

    def txn(tid: str, pid: int, epoch: int, verify: bool, parts: list[int]) -> Any:
        return APR.AddPartitionsToTxnTransaction(
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            verify_only=verify,
            topics=[APR.AddPartitionsToTxnTopic(name=name, partitions=parts)],
        )

    for version in (4, 5):
        r = raw.call(
            api_keys.ADD_PARTITIONS_TO_TXN,
            version,
            APR(
                transactions=[
                    txn(a, pa, ea, True, [0, 1]),
                    txn(b, pb, eb + 1, True, [0]),
                ]
            ),
        )
        assert r.error_code == 0
        got = {
            t.transactional_id: [
                (p.partition_index, p.partition_error_code)
                for tr in t.topic_results
                for p in tr.results_by_partition
            ]
            for t in r.results_by_transaction
        }
        assert got == {
            a: [(0, 0), (1, codes.TRANSACTION_ABORTABLE)],
            b: [(0, codes.PRODUCER_FENCED)],
        }
    r = raw.call(api_keys.ADD_PARTITIONS_TO_TXN, 5, APR(transactions=[txn(b, pb, eb, False, [1])]))
    assert (
        r.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code
        == 0
    )
    [d] = raw.describe(b)
    assert d.transaction_state == "Ongoing" and [
        (t.topic, list(t.partitions)) for t in d.topics
    ] == [(name, [1])]


def test_describe_and_list_transactions(raw: Raw, name: str) -> None:
    pid, _ = raw.init_ok(name)
    [d, unknown, empty] = raw.describe(name, "unknown-" + name, "")
    assert (d.error_code, d.transaction_state, d.producer_id, d.transaction_start_time_ms) == (
        0,
        "Empty",
        pid,
        -1,
    )
    assert (unknown.error_code, empty.error_code) == (
        codes.TRANSACTIONAL_ID_NOT_FOUND,
        codes.INVALID_REQUEST,
    )
    LR = ListTransactionsRequest
    r = raw.call(
        api_keys.LIST_TRANSACTIONS,
        0,
        LR(state_filters=["Empty", "Nonsense"], producer_id_filters=[pid]),
    )
    assert r.error_code == 0 and r.unknown_state_filters == ["Nonsense"]
    assert [
        (t.transactional_id, t.producer_id, t.transaction_state) for t in r.transaction_states
    ] == [(name, pid, "Empty")]
    r = raw.call(
        api_keys.LIST_TRANSACTIONS, 0, LR(state_filters=["Ongoing"], producer_id_filters=[pid])
    )
    assert r.transaction_states == []
    r = raw.call(
        api_keys.LIST_TRANSACTIONS,
        1,
        LR(state_filters=[], producer_id_filters=[pid], duration_filter=10**12),
    )
    assert [t.transactional_id for t in r.transaction_states] == [name], (
        "an Empty id's start is -1: it always qualifies"
    )


def test_a_timed_out_transaction_is_aborted(
    txn_protocol_broker: Broker, raw: Raw, name: str
) -> None:
    create_topic(txn_protocol_broker.bootstrap, name)
    pid, epoch = raw.init_ok(name, timeout_ms=1000)
    raw.add(name, pid, epoch, {name: [0]})
    deadline = time.monotonic() + 15
    while raw.describe(name)[0].transaction_state != "CompleteAbort":
        assert time.monotonic() < deadline, raw.describe(name)
        time.sleep(0.1)
    [d] = raw.describe(name)
    assert d.producer_epoch == epoch + 1
    assert raw.end(name, pid, epoch, True).error_code == codes.PRODUCER_FENCED


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_a_restart(make_broker: Callable[..., Broker], clean: bool) -> None:
    broker = make_broker()
    create_topic(broker.bootstrap, "t")
    raw = Raw(broker.bootstrap)
    raw.find("tx")
    pid, epoch = raw.init_ok("tx")
    raw.add("tx", pid, epoch, {"t": [0, 1]})
    done_pid, done_epoch = raw.init_ok("done")
    raw.add("done", done_pid, done_epoch, {"t": [0]})
    assert raw.end("done", done_pid, done_epoch, True).error_code == 0
    raw.close()
    broker.restart(clean=clean)
    raw = Raw(broker.bootstrap)
    deadline = time.monotonic() + 15
    while (d := raw.describe("tx")[0]).error_code == codes.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch) == (
        0,
        "Ongoing",
        pid,
        epoch,
    )
    assert sorted(d.topics[0].partitions) == [0, 1]
    assert raw.describe("done")[0].transaction_state == "CompleteCommit"
    assert raw.end("tx", pid, epoch, True).error_code == 0
    assert raw.describe("tx")[0].transaction_state == "CompleteCommit"
    assert raw.init_ok("done") == (done_pid, done_epoch + 1)
    raw.close()
