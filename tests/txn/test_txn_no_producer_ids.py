"""A transaction coordinator with no producer id at hand (a cluster node whose block of ids from
the controller has not come yet: `ClusterMember.allocate_producer_ids` raises KafkaError
COORDINATOR_LOAD_IN_PROGRESS) answers that error, which producers retry, writes nothing, and
goes on once ids come: for a new transactional id, for an id whose epochs are exhausted, and at
an EndTxn v5 that must rotate the producer id; nothing raises out of the runtime's poll."""

from __future__ import annotations

from pathlib import Path

from test_txn_runtime import NOW, FakeWriter, broker, load
from txn_core_harness import FIRST_PID, Harness

from gregor.controller.producer_ids import ProducerIdManager
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import TransactionMetadata, TxnRecord
from gregor.coordinator.txn.runtime import TransactionCoordinator
from gregor.coordinator.txn.shard import MAX_EPOCH
from gregor.coordinator.txn.state import EMPTY, ONGOING
from gregor.protocol.errors import KafkaError

T = "tx"


class Controller:
    """The allocator behind ProducerIdManager: no block until `blocks` is set."""

    def __init__(self) -> None:
        self.blocks: list[int] = []

    def allocate_producer_ids(self, count: int) -> int:
        if not self.blocks:
            raise KafkaError(
                codes.COORDINATOR_LOAD_IN_PROGRESS, "no producer id block from the controller yet"
            )
        return self.blocks.pop(0)


def harness_without_ids() -> tuple[Harness, Controller]:
    h = Harness()
    controller = Controller()
    h.shard.new_producer_id = ProducerIdManager(controller).next_id
    return h, controller


def test_a_new_transactional_id_waits_for_a_block() -> None:
    h, controller = harness_without_ids()
    answer = h.init_result(T)
    assert answer.error == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert (h.log, h.state(T)) == ([], None)
    controller.blocks = [5000]
    assert h.init(T) == (5000, 0)


def test_an_exhausted_epoch_waits_for_a_block_to_rotate() -> None:
    h, controller = harness_without_ids()
    h.log = [
        TxnRecord(
            T, TransactionMetadata(FIRST_PID, MAX_EPOCH - 1, 60_000, EMPTY, last_update_ms=h.now)
        )
    ]
    h.reload()
    h.shard.new_producer_id = ProducerIdManager(controller).next_id
    before = list(h.log)
    assert (
        h.init_result(T, expected=(FIRST_PID, MAX_EPOCH - 1)).error
        == codes.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert h.log == before
    controller.blocks = [7000]
    assert h.init(T, expected=(FIRST_PID, MAX_EPOCH - 1)) == (7000, 0)


def test_an_end_txn_v5_that_must_rotate_waits_for_a_block() -> None:
    h, controller = harness_without_ids()
    m = TransactionMetadata(
        FIRST_PID,
        MAX_EPOCH - 1,
        60_000,
        ONGOING,
        partitions=frozenset({("a", 0)}),
        start_ms=h.now,
        last_update_ms=h.now,
    )
    h.log = [TxnRecord(T, m)]
    h.reload()
    h.shard.new_producer_id = ProducerIdManager(controller).next_id
    answer = h.end(T, FIRST_PID, MAX_EPOCH - 1, commit=True, client_version=2)
    assert answer.error == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert h.state(T) is ONGOING and h.markers == []
    controller.blocks = [9000]
    answer = h.end(T, FIRST_PID, MAX_EPOCH - 1, commit=True, client_version=2)
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (codes.NONE, 9000, 0)


def test_other_allocator_failures_are_an_unknown_server_error() -> None:
    h = Harness()

    def broken() -> int:
        raise OSError("disk gone")

    h.shard.new_producer_id = broken
    assert h.init_result(T).error == codes.UNKNOWN_SERVER_ERROR
    assert h.log == []


def test_the_runtime_answers_and_its_poll_goes_on(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, _ = broker(tmp_path, writer)
    controller = Controller()
    txns = TransactionCoordinator(
        b.node_id,
        b.store,
        b.replicas,
        b.admin,
        b.config_value,
        b.services.apply_metadata,
        ProducerIdManager(controller).next_id,
        writer,
    )
    txns.ensure_transaction_topic()
    txns.on_metadata(NOW)
    load(txns)
    answer = txns.init_producer_id(T, 60_000, -1, -1, NOW)
    assert answer.error == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert txns.poll(NOW + 1) is not None  # timers still scheduled: nothing raised
    assert txns.describe(T).error == codes.TRANSACTIONAL_ID_NOT_FOUND
    controller.blocks = [3000]
    answer = txns.init_producer_id(T, 60_000, -1, -1, NOW + 2)
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (codes.NONE, 3000, 0)
    assert txns.describe(T).state == "Empty"
    b.logs.shutdown()
