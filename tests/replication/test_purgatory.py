"""The purgatory of delayed operations (replication/purgatory.py), time driven by hand: events
on watched keys complete operations, deadlines expire them, each completes once and leaves
every key at once, and a partition never holds more than one watcher per purgatory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from gregor.coordinator.deferred import NOT_COORDINATOR, HeldAnswers
from gregor.replication.partition import Partition, ReplicaState
from gregor.replication.purgatory import IDLE_SWEEP, DelayedOperation, DelayedOperationPurgatory

from .helpers import NOW, Cluster, host, manager, produce, registration

TIMED_OUT = 7


class Key:
    """A watch key as a partition is one: watchers called once per change."""

    def __init__(self) -> None:
        self.watchers: list[Callable[[], None]] = []
        self.value = 0

    def watch(self, watcher: Callable[[], None]) -> None:
        self.watchers.append(watcher)

    def unwatch(self, watcher: Callable[[], None]) -> None:
        self.watchers.remove(watcher)

    def change(self, value: int) -> None:
        self.value = value
        waiting, self.watchers = self.watchers, []
        for w in waiting:
            w()


class Reach(DelayedOperation):
    """Completes once `key.value` reaches `target`; records what happened to it in `log`."""

    def __init__(
        self, name: str, key: Key, target: int, deadline_ms: int | None, log: list[str]
    ) -> None:
        super().__init__(deadline_ms)
        self.name, self.key, self.target, self.log = name, key, target, log
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.key.value >= self.target

    def on_expiration(self) -> None:
        self.log.append(f"{self.name} expired")

    def on_complete(self) -> None:
        self.log.append(f"{self.name} done")


def test_an_event_completes_an_operation_once_it_can() -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []
    op = Reach("a", key, 5, NOW + 100, log)
    assert not purgatory.try_complete_else_watch(op, [key])
    assert len(key.watchers) == 1 and purgatory.delayed() == 1
    key.change(4)
    assert log == [] and len(key.watchers) == 1, "not yet: watched again"
    key.change(5)
    assert log == ["a done"] and op.completed
    assert purgatory.keys() == 0 and purgatory.delayed() == 0
    assert len(key.watchers) == 1, "the watcher stays until the key's next event"
    key.change(6)
    assert key.watchers == [] and purgatory.subscriptions() == 0, "which lets it go"
    assert purgatory.next_deadline_ms() is None
    assert purgatory.expire(NOW + 100) == 0 and log == ["a done"], "completed once"
    assert not purgatory.force_complete(op) and log == ["a done"]


def test_an_operation_that_can_complete_at_once_is_not_parked() -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []
    key.value = 9
    assert purgatory.try_complete_else_watch(Reach("a", key, 5, NOW + 100, log), [key])
    assert log == ["a done"] and key.watchers == [] and purgatory.next_deadline_ms() is None


def test_the_deadline_expires_an_operation_earliest_first() -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []
    woken: list[int] = []
    purgatory.wakeup = lambda: woken.append(1)
    late = Reach("late", key, 5, NOW + 200, log)
    purgatory.watch(late, [key])
    assert woken == [1], "the first deadline wakes the driver"
    assert purgatory.next_deadline_ms() == NOW + 200
    purgatory.watch(Reach("early", key, 5, NOW + 100, log), [key])
    assert woken == [1, 1], "an earlier deadline wakes it again"
    purgatory.watch(Reach("forever", key, 5, None, log), [key])
    purgatory.watch(Reach("later", key, 5, NOW + 300, log), [key])
    assert woken == [1, 1], "a later one does not"
    assert purgatory.next_deadline_ms() == NOW + 100
    assert purgatory.expire(NOW + 99) == 0 and log == []
    assert purgatory.expire(NOW + 200) == 2
    assert log == ["early expired", "early done", "late expired", "late done"]
    assert purgatory.next_deadline_ms() == NOW + 300
    assert purgatory.watched(key) == 2 and len(key.watchers) == 1
    key.change(5)
    assert log[-2:] == ["forever done", "later done"] and purgatory.keys() == 0
    assert purgatory.next_deadline_ms() is None


def test_operations_on_one_key_complete_in_the_order_they_were_watched() -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []
    for i in range(5):
        purgatory.watch(Reach(f"op{i}", key, 10 * (i // 2), NOW + 1000, log), [key])
    key.change(10)
    assert log == ["op0 done", "op1 done", "op2 done", "op3 done"]
    key.change(100)
    assert log[-1] == "op4 done" and purgatory.keys() == 0 and purgatory.delayed() == 0


def test_an_operation_on_two_keys_leaves_both_when_one_completes_it() -> None:
    purgatory, a, b, log = DelayedOperationPurgatory("t"), Key(), Key(), []
    op = Reach("ab", a, 1, NOW + 100, log)
    purgatory.watch(op, [a, b, a])
    assert purgatory.watched(a) == 1 and len(a.watchers) == 1 and len(b.watchers) == 1
    a.change(1)
    assert log == ["ab done"] and purgatory.keys() == 0
    assert len(a.watchers) == 1 and len(b.watchers) == 1, "both watchers stay a while"
    assert purgatory.subscriptions() == 2
    b.change(1)
    assert log == ["ab done"] and op.tries == 1, "an event on b finds nothing to try"
    assert b.watchers == [] and purgatory.subscriptions() == 1, "and lets b go"
    a.change(2)
    assert a.watchers == [] and purgatory.subscriptions() == 0, "a too, at its next event"


def test_a_key_parked_on_again_keeps_its_watcher_and_idle_keys_are_swept() -> None:
    purgatory, log = DelayedOperationPurgatory("t"), []
    keys = [Key() for _ in range(IDLE_SWEEP + 10)]
    first = Reach("first", keys[0], 1, NOW + 100, log)
    purgatory.watch(first, keys[:2])
    watcher = keys[1].watchers[0]
    keys[0].change(1)  # completes it: keys[1] is idle now, its watcher kept
    again = Reach("again", keys[0], 2, NOW + 100, log)
    purgatory.watch(again, keys[:2])
    assert keys[1].watchers == [watcher], "parked on again: the same watcher, not a new one"
    purgatory.force_complete(again)
    for k in keys[2:]:  # many keys watched once, then left idle
        op = Reach("once", k, 1, NOW + 100, log)
        purgatory.watch(op, [k])
        purgatory.force_complete(op)
    assert purgatory.keys() == 0
    assert purgatory.subscriptions() < IDLE_SWEEP, "a sweep let the idle keys go"
    assert sum(len(k.watchers) for k in keys) == purgatory.subscriptions()


def test_an_event_caused_by_a_completion_is_seen() -> None:
    """An answer that changes the key it watched (a coordinator's release that appends) must
    let the operations already checked in that pass try again."""
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []
    waits_for_2 = Reach("second", key, 2, None, log)
    purgatory.watch(waits_for_2, [key])

    class Bump(Reach):
        def on_complete(self) -> None:
            super().on_complete()
            key.change(2)

    purgatory.watch(Bump("first", key, 1, None, log), [key])
    key.change(1)
    assert log == ["first done", "second done"] and purgatory.keys() == 0


def test_a_failing_check_leaves_the_operation_waiting(caplog: pytest.LogCaptureFixture) -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []

    class Broken(Reach):
        def try_complete(self) -> bool:
            raise RuntimeError("boom")

    purgatory.watch(Broken("broken", key, 1, NOW + 10, log), [key])
    key.change(1)
    assert log == [] and "boom" in caplog.text and len(key.watchers) == 1
    purgatory.expire(NOW + 10)
    assert log == ["broken expired", "broken done"] and purgatory.keys() == 0


def test_completed_operations_do_not_pile_up_in_the_timer_heap() -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []
    for i in range(10_000):
        purgatory.watch(Reach(f"op{i}", key, i + 1, NOW + 30_000, log), [key])
        key.change(i + 1)
    assert len(log) == 10_000 and purgatory.delayed() == 0
    assert len(purgatory._timeouts) <= 1025
    assert purgatory.next_deadline_ms() is None and len(key.watchers) == 1


# -- over a real partition -------------------------------------------------------------------


def led(tmp_path: Path) -> Partition:
    """A partition led here with a second ISR member that has fetched nothing: appends do not
    move the high watermark until the test plays that follower's fetch."""
    rm = manager(tmp_path, 1, Cluster())
    p = host(rm, registration(1, 0, (1, 2)))
    p.followers = {2: ReplicaState(2)}
    return p


def follower_fetch(p: Partition, offset: int) -> None:
    p.fetch_for_follower(2, 102, offset, -1, 0, 0, 1 << 20, True, NOW)


class HighWatermark(DelayedOperation):
    def __init__(self, p: Partition, offset: int, done: list[int], deadline_ms: int) -> None:
        super().__init__(deadline_ms)
        self.p, self.offset, self.done = p, offset, done

    def try_complete(self) -> bool:
        return self.p.high_watermark >= self.offset

    def on_complete(self) -> None:
        self.done.append(self.offset)


def test_many_operations_on_one_partition_hold_one_watcher_and_leave_none(
    tmp_path: Path,
) -> None:
    p = led(tmp_path)
    purgatory = DelayedOperationPurgatory("t")
    done: list[int] = []
    ops = []
    for i in range(500):
        end = produce(p, 1) + 1
        op = HighWatermark(p, end, done, NOW + 1_000 + (i % 3))
        ops.append(op)
        assert not purgatory.try_complete_else_watch(op, [p])
    assert len(p.fetches.watchers) == 1 and purgatory.watched(p) == 500
    for offset in range(0, 301, 7):
        follower_fetch(p, offset)
        assert done == list(range(1, offset + 1)), "released in offset order"
        assert len(p.fetches.watchers) == 1
    purgatory.force_complete(ops[400])
    purgatory.expire(NOW + 1_001)  # a third of those left, by their deadline
    assert len(p.fetches.watchers) == 1
    follower_fetch(p, p.log.log_end_offset)
    assert sorted(done) == list(range(1, 501)) and len(done) == 500, "each once"
    assert purgatory.keys() == 0 and purgatory.delayed() == 0
    assert len(p.fetches.watchers) == 1, "the watcher stays until the partition's next event"
    produce(p, 1)
    assert p.fetches.watchers == [] and purgatory.subscriptions() == 0


def test_a_partition_removed_lets_go_of_the_watcher_its_last_operation_left(
    tmp_path: Path,
) -> None:
    """An event that completes a key's last operation leaves the key's watcher for the next
    Fetch or Produce to park on; a partition removed (its last event) takes it away."""
    rm = manager(tmp_path, 1, Cluster())
    p = host(rm, registration(1, 0, (1, 2)))
    p.followers = {2: ReplicaState(2)}
    purgatory = DelayedOperationPurgatory("t")
    done: list[int] = []
    end = produce(p, 1) + 1
    assert not purgatory.try_complete_else_watch(HighWatermark(p, end, done, NOW + 1_000), [p])
    follower_fetch(p, end)
    assert done == [end] and purgatory.keys() == 0 and purgatory.subscriptions() == 1
    again = HighWatermark(p, end + 1, done, NOW + 1_000)
    watcher = p.fetches.watchers[0]
    purgatory.watch(again, [p])
    assert p.fetches.watchers == [watcher], "parked on again: the same watcher"
    purgatory.force_complete(again)
    rm.remove(p.topic, p.index)
    assert p.fetches.watchers == [] and purgatory.subscriptions() == 0


def test_held_answers_are_released_in_order_and_fail_on_leadership_loss(tmp_path: Path) -> None:
    p = led(tmp_path)
    held = HeldAnswers()
    answered: list[str] = []

    def hold(name: str, deadline_ms: int | None = None) -> bool:
        return held.answer(
            0,
            p,
            lambda: answered.append(name),
            lambda code: answered.append(f"{name} failed {code}"),
            deadline_ms,
        )

    produce(p, 2)
    assert not hold("a")
    assert not hold("read")  # no records of its own: waits for the last write
    produce(p, 2)
    assert not hold("b", NOW + 50)
    produce(p, 2)
    assert not hold("c")
    assert held.waiting(0) == 4 and len(p.fetches.watchers) == 1
    follower_fetch(p, 2)
    assert answered == ["a", "read"]
    held.expire(NOW + 50, TIMED_OUT)
    assert answered[-1] == f"b failed {TIMED_OUT}"
    reg = p.registration
    assert reg is not None
    p.make_follower(replace(reg, leader=2, leader_epoch=reg.leader_epoch + 1, partition_epoch=1))
    assert answered[-1] == f"c failed {NOT_COORDINATOR}"
    assert held.waiting(0) == 0 and held.purgatory.keys() == 0
    assert len(p.fetches.watchers) == 1, "the watcher stays until the partition's next event"
    p.make_follower(replace(reg, leader=2, leader_epoch=reg.leader_epoch + 2, partition_epoch=2))
    assert p.fetches.watchers == [] and held.purgatory.subscriptions() == 0


def test_an_answer_after_an_unseen_high_watermark_move_goes_after_the_earlier_ones(
    tmp_path: Path,
) -> None:
    p = led(tmp_path)
    held = HeldAnswers()
    answered: list[str] = []
    produce(p, 1)
    held.answer(0, p, lambda: answered.append("first"), lambda _c: None, None)
    p.fetches.watchers.clear()  # the move below is not seen by the purgatory's watcher
    follower_fetch(p, 1)
    assert answered == []
    assert held.answer(0, p, lambda: answered.append("second"), lambda _c: None, None)
    assert answered == ["first", "second"]


def test_unloading_fails_every_held_answer(tmp_path: Path) -> None:
    p = led(tmp_path)
    held = HeldAnswers()
    failed: list[int] = []
    for _ in range(3):
        produce(p, 1)
        held.answer(0, p, lambda: failed.append(0), failed.append, NOW + 10)
    held.unload(0)
    assert failed == [NOT_COORDINATOR] * 3
    assert held.purgatory.keys() == 0 and held.next_deadline_ms() is None


def test_an_operation_parked_by_an_expiring_one_expires_in_the_same_call() -> None:
    purgatory, key, log = DelayedOperationPurgatory("t"), Key(), []

    class Chain(Reach):
        def on_complete(self) -> None:
            super().on_complete()
            purgatory.watch(Reach("next", key, 5, NOW + 5, log), [key])

    purgatory.watch(Chain("first", key, 5, NOW + 1, log), [key])
    assert purgatory.expire(NOW + 10) == 2
    assert log == ["first expired", "first done", "next expired", "next done"]
    assert purgatory.keys() == 0 and purgatory.delayed() == 0
