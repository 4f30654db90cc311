"""The networked metadata store's `wait_committed`: a callback, no event loop. Called at once
when the offset is replayed already or this node is not the active controller; else when the
commit is replayed (in the order of the calls), or with NOT_CONTROLLER when leadership goes."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.raft_store import NOT_CONTROLLER, RaftMetadataStore
from gregor.protocol.errors import KafkaError
from gregor.raft.node import Entry, LeaderAndEpoch

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"


def store(active: bool = True) -> RaftMetadataStore:
    s = RaftMetadataStore(None, CLUSTER, clock=lambda: 1_000)
    s.local_id = 1
    s.is_active = lambda: active  # type: ignore[method-assign]
    return s


def commit(s: RaftMetadataStore, first: int, count: int) -> None:
    s.on_committed([Entry(first + i, 1, r.encode(r.NoOpRecord())) for i in range(count)])


def waiter(calls: list[Any], name: str) -> Any:
    return lambda error: calls.append((name, error))


def test_called_back_once_the_offset_is_replayed_in_call_order() -> None:
    s = store()
    calls: list[Any] = []
    s.wait_committed(3, waiter(calls, "a"))
    s.wait_committed(1, waiter(calls, "b"))
    s.wait_committed(3, waiter(calls, "c"))
    assert calls == []
    commit(s, 0, 2)
    assert calls == [("b", None)]
    commit(s, 2, 2)
    assert calls == [("b", None), ("a", None), ("c", None)]
    s.wait_committed(2, waiter(calls, "d"))  # replayed already: at once
    assert calls[-1] == ("d", None)


def test_not_the_active_controller_or_leadership_lost_is_not_controller() -> None:
    calls: list[Any] = []
    store(active=False).wait_committed(5, waiter(calls, "a"))
    [(_, error)] = calls
    assert isinstance(error, KafkaError) and error.code == NOT_CONTROLLER
    s = store()
    calls.clear()
    s.wait_committed(5, waiter(calls, "b"))
    s.on_leader_change(LeaderAndEpoch(1, 3))  # still this node: it waits on
    assert calls == []
    s.on_leader_change(LeaderAndEpoch(2, 4))
    [(name, error)] = calls
    assert name == "b" and isinstance(error, KafkaError) and error.code == NOT_CONTROLLER
    commit(s, 0, 6)  # a later commit calls nothing twice
    assert len(calls) == 1


def test_a_failing_callback_keeps_neither_the_others_nor_replay_back() -> None:
    s = store()
    calls: list[Any] = []

    def broken(_error: Any) -> None:
        raise RuntimeError("boom")

    s.wait_committed(0, broken)
    s.wait_committed(0, waiter(calls, "after"))
    commit(s, 0, 1)
    assert calls == [("after", None)] and s.applied == 0


def test_the_answers_a_commit_completes_are_let_out_before_its_replay() -> None:
    """A commit calls its waiters, then `on_answered` (the broker writes the answers they
    completed), then replays its records: the client's answer does not wait for the replay,
    and the replay is done before the call returns (before any other request is read)."""
    s = store()
    seen: list[Any] = []
    s.wait_committed(0, lambda error: seen.append(("waiter", error, "t" in s.topics)))
    s.on_answered = lambda: seen.append(("answered", "t" in s.topics))
    s.on_replayed = lambda: seen.append(("replayed", "t" in s.topics))
    topic = r.TopicRecord(name="t", topic_id=uuid.UUID(int=7))
    s.on_committed([Entry(0, 1, r.encode(topic))])
    assert seen == [("waiter", None, False), ("answered", False), ("replayed", True)]
    assert "t" in s.topics and s.applied == 0
    s.on_committed([Entry(1, 1, r.encode(r.NoOpRecord()))])  # woke nobody: no call
    assert seen[-1] == ("replayed", True) and len(seen) == 4
