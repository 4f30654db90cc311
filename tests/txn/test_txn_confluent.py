"""Transactions with confluent-kafka (librdkafka): commit and abort as read_committed and
read_uncommitted consumers see them, interleaved transactions holding back the last stable
offset, zombie fencing, the coordinator aborting a transaction that outlives its timeout, and a
broker killed in the middle of one."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka as ck
import pytest
from client_txn_helpers import Reader, create_topic, read_all, txn_producer, wait_until

from gregor import Broker


def _send(p: ck.Producer, topic: str, values: list[str], partition: int | None = None) -> None:
    for v in values:
        if partition is None:
            p.produce(topic, key=v.encode(), value=v.encode())
        else:
            p.produce(topic, key=v.encode(), value=v.encode(), partition=partition)
    p.flush(10)


def test_commit_and_abort_as_each_isolation_level_sees_them(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 3)
    p = txn_producer(bootstrap, name)
    p.begin_transaction()
    _send(p, name, [f"a{i}" for i in range(10)])
    p.commit_transaction(15)
    p.begin_transaction()
    _send(p, name, [f"b{i}" for i in range(10)])
    p.abort_transaction(15)
    p.begin_transaction()
    _send(p, name, [f"c{i}" for i in range(10)])
    p.commit_transaction(15)

    committed = read_all(bootstrap, name, 3, read_committed=True, count=20)
    assert sorted(committed) == sorted([f"a{i}" for i in range(10)] + [f"c{i}" for i in range(10)])
    everything = read_all(bootstrap, name, 3, read_committed=False, count=30)
    assert sorted(everything) == sorted(f"{x}{i}" for x in "abc" for i in range(10))


def test_an_open_transaction_holds_back_read_committed_consumers(bootstrap: str, name: str) -> None:
    """Records after the first offset of an open transaction stay invisible to read_committed
    consumers (the LSO) until it ends; an abort then releases the later records but not its own."""
    create_topic(bootstrap, name, 1)
    slow = txn_producer(bootstrap, name + "-slow")
    fast = txn_producer(bootstrap, name + "-fast")
    slow.begin_transaction()
    _send(slow, name, ["slow0", "slow1"], partition=0)
    fast.begin_transaction()
    _send(fast, name, ["fast0", "fast1"], partition=0)
    fast.commit_transaction(15)
    _send(slow, name, ["slow2"], partition=0)

    reader = Reader(bootstrap, name, 1, read_committed=True)
    try:
        assert reader.poll_for(1.5) == [], "nothing is stable while the first transaction is open"
        uncommitted = read_all(bootstrap, name, 1, read_committed=False, count=5)
        assert sorted(uncommitted) == ["fast0", "fast1", "slow0", "slow1", "slow2"]
        slow.abort_transaction(15)
        assert reader.poll_until(2, 15) == ["fast0", "fast1"]
        assert reader.poll_for(1.0) == ["fast0", "fast1"]
    finally:
        reader.close()


def test_two_producers_interleave_on_the_same_partitions(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 2)
    one = txn_producer(bootstrap, name + "-1")
    two = txn_producer(bootstrap, name + "-2")
    kept: list[str] = []
    for round_ in range(4):
        one.begin_transaction()
        two.begin_transaction()
        for i in range(5):
            for part in (0, 1):
                one.produce(name, value=f"one-{round_}-{i}-{part}".encode(), partition=part)
                two.produce(name, value=f"two-{round_}-{i}-{part}".encode(), partition=part)
        one.flush(10)
        two.flush(10)
        if round_ % 2:
            one.commit_transaction(15)
            two.abort_transaction(15)
            kept += [f"one-{round_}-{i}-{part}" for i in range(5) for part in (0, 1)]
        else:
            two.commit_transaction(15)
            one.abort_transaction(15)
            kept += [f"two-{round_}-{i}-{part}" for i in range(5) for part in (0, 1)]
    assert sorted(read_all(bootstrap, name, 2, read_committed=True, count=len(kept))) == sorted(
        kept
    )
    assert len(read_all(bootstrap, name, 2, read_committed=False, count=80)) == 80


def test_a_second_producer_with_the_same_id_fences_the_first(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 1)
    zombie = txn_producer(bootstrap, name)
    zombie.begin_transaction()
    _send(zombie, name, ["zombie0", "zombie1"])
    fresh = txn_producer(bootstrap, name)  # fences the zombie and aborts its transaction
    fresh.begin_transaction()
    _send(fresh, name, ["fresh0"])
    fresh.commit_transaction(15)

    with pytest.raises(ck.KafkaException) as raised:
        zombie.produce(name, value=b"zombie2")
        zombie.commit_transaction(10)
    err: Any = raised.value.args[0]
    assert err.fatal() or err.code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert read_all(bootstrap, name, 1, read_committed=True, count=1) == ["fresh0"]
    assert sorted(read_all(bootstrap, name, 1, read_committed=False, count=3)) == [
        "fresh0",
        "zombie0",
        "zombie1",
    ]


def test_the_coordinator_aborts_a_transaction_past_its_timeout(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 1)
    hung = txn_producer(bootstrap, name + "-hung", **{"transaction.timeout.ms": 2000})
    hung.begin_transaction()
    _send(hung, name, ["hung0"], partition=0)
    other = txn_producer(bootstrap, name + "-other")
    other.begin_transaction()
    _send(other, name, ["later0", "later1"], partition=0)
    other.commit_transaction(15)
    started = time.monotonic()
    reader = Reader(bootstrap, name, 1, read_committed=True)
    try:
        got = reader.poll_until(2, 20)
        assert got == ["later0", "later1"]
        # Released by the coordinator's abort after the 2 s timeout, not at once.
        assert time.monotonic() - started >= 1.0
        assert reader.poll_for(1.0) == ["later0", "later1"]
    finally:
        reader.close()
    with pytest.raises(ck.KafkaException):
        hung.commit_transaction(10)


def test_a_broker_killed_mid_transaction_recovers_markers_and_lso(
    make_broker: Any, name: str
) -> None:
    broker: Broker = make_broker()
    create_topic(broker.bootstrap, name, 1)
    p = txn_producer(broker.bootstrap, name)
    p.begin_transaction()
    _send(p, name, ["done0", "done1"])
    p.commit_transaction(15)
    p.begin_transaction()
    _send(p, name, ["open0", "open1"])
    broker.restart(clean=False)  # SIGKILL with the second transaction open

    assert read_all(broker.bootstrap, name, 1, read_committed=True, count=2, settle=1.5) == [
        "done0",
        "done1",
    ]
    assert sorted(read_all(broker.bootstrap, name, 1, read_committed=False, count=4)) == [
        "done0",
        "done1",
        "open0",
        "open1",
    ]
    # A new producer with the same id aborts the open transaction; then its own commits show.
    again = wait_until(
        lambda: _try_producer(broker.bootstrap, name), 30, "a producer after the restart"
    )
    again.begin_transaction()
    _send(again, name, ["after0"])
    again.commit_transaction(15)
    assert read_all(broker.bootstrap, name, 1, read_committed=True, count=3) == [
        "done0",
        "done1",
        "after0",
    ]
    broker.restart(clean=True)
    assert read_all(broker.bootstrap, name, 1, read_committed=True, count=3) == [
        "done0",
        "done1",
        "after0",
    ]


def _try_producer(bootstrap: str, txn_id: str) -> ck.Producer | None:
    try:
        return txn_producer(bootstrap, txn_id)
    except ck.KafkaException:
        return None
