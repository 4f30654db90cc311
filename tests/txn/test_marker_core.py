"""The marker channel, sans I/O (coordinator/txn/markers.py), with no event loop: routing by the
image at each call, one WriteTxnMarkers per destination broker per poll (split only when a
producer id would be in one twice), `done` once every destination answered, the codes the shard
sees, and a retry of the shard's routed afresh to the partition's new leader."""

from __future__ import annotations

from typing import Any

from test_marker_sender import LEADERS, image

from gregor.coordinator.txn import codes
from gregor.coordinator.txn.markers import MarkerChannel
from gregor.metadata.image import MetadataImage
from gregor.protocol import api_keys
from gregor.protocol.messages import WriteTxnMarkersResponse as R
from gregor.protocol.outbound import Outbound
from gregor.replication.pending import Pending
from gregor.runtime.client import DisconnectedError

HERE = 1


class Setup:
    def __init__(self, leaders: dict[tuple[str, int], int], network: bool = True) -> None:
        self.image: MetadataImage = image(leaders)
        self.registered = {1, 2, 3}
        self.local: list[tuple[str, int]] = []
        self.channel = MarkerChannel(
            HERE, lambda: self.image, self.write_local, self.reachable if network else None
        )
        self.woken = 0
        self.channel.wakeup = self.wake
        self.answers: list[dict[tuple[str, int], int]] = []

    def wake(self) -> None:
        self.woken += 1

    def reachable(self, broker: int) -> bool:
        return broker in self.registered

    def write_local(self, topic: str, index: int, *_: Any) -> int:
        self.local.append((topic, index))
        return codes.NONE

    def write(self, pid: int, partitions: list[tuple[str, int]]) -> None:
        self.channel.write_markers(f"tx-{pid}", pid, 3, 7, True, partitions, self.answers.append)

    def poll(self) -> dict[int, list[Outbound]]:
        result = self.channel.poll(0)
        assert result.next_deadline_ms is None, "markers never wait for a time"
        out: dict[int, list[Outbound]] = {}
        for o in result.outbound:
            assert o.destination is not None
            out.setdefault(o.destination, []).append(o)
        return out


def partitions(out: Outbound) -> list[tuple[int, str, int]]:
    return [
        (m.producer_id, t.name, p)
        for m in out.body.markers
        for t in m.topics
        for p in t.partition_indexes
    ]


def ok(out: Outbound, **codes_by: int) -> Any:
    return R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=codes_by.get(f"{t.name}{p}", 0)
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for m in out.body.markers
        ]
    )


def test_one_request_per_broker_per_poll_and_done_once_all_answered() -> None:
    s = Setup(LEADERS)
    s.write(10, [("t", 0), ("t", 1), ("t", 2), ("u", 0)])
    s.write(11, [("u", 0)])
    assert s.local == [("t", 0)] and s.answers == [] and s.woken == 2
    out = s.poll()
    assert sorted(out) == [2, 3] and all(len(v) == 1 for v in out.values())
    [to2], [to3] = out[2], out[3]
    assert (to2.api_key, to2.version) == (api_keys.WRITE_TXN_MARKERS, 1)
    assert partitions(to2) == [(10, "t", 1), (10, "u", 0), (11, "u", 0)]
    assert s.poll() == {}, "sent once"
    s.channel.on_response(to2, ok(to2), 5)
    assert s.answers == [{("u", 0): codes.NONE}], "transaction 11 only waited for broker 2"
    s.channel.on_error(to3, DisconnectedError("refused"), 6)
    assert s.answers[1] == {
        ("t", 0): codes.NONE,
        ("t", 1): codes.NONE,
        ("u", 0): codes.NONE,
        ("t", 2): codes.NETWORK_EXCEPTION,
    }


def test_a_producer_id_twice_for_a_broker_goes_in_two_requests() -> None:
    s = Setup(LEADERS)
    s.write(10, [("t", 1)])
    s.write(10, [("u", 0)])
    s.write(12, [("u", 0)])
    [first, second] = s.poll()[2]
    assert partitions(first) == [(10, "t", 1), (12, "u", 0)]
    assert partitions(second) == [(10, "u", 0)]


def test_unroutable_partitions_are_answered_at_once_without_a_request() -> None:
    s = Setup({**LEADERS, ("v", 0): -1, ("w", 0): 2})
    s.registered.discard(2)  # w-0's leader has no endpoint
    s.write(10, [("gone", 0), ("v", 0), ("w", 0)])
    assert s.answers == [
        {
            ("gone", 0): codes.UNKNOWN_TOPIC_OR_PARTITION,
            ("v", 0): codes.NOT_LEADER_OR_FOLLOWER,
            ("w", 0): codes.NOT_LEADER_OR_FOLLOWER,
        }
    ]
    assert s.woken == 0 and s.poll() == {}


def test_answers_are_mapped_to_what_the_shard_retries() -> None:
    s = Setup(LEADERS)
    s.write(10, [("t", 1), ("u", 0)])
    [out] = s.poll()[2]
    answer = ok(out, t1=codes.NOT_COORDINATOR, u0=codes.UNKNOWN_TOPIC_OR_PARTITION)
    s.channel.on_response(out, answer, 1)
    assert s.answers == [
        {("t", 1): codes.NOT_LEADER_OR_FOLLOWER, ("u", 0): codes.NOT_LEADER_OR_FOLLOWER}
    ]


def test_a_retry_goes_to_the_new_leader_grouped_with_what_else_goes_there() -> None:
    s = Setup(LEADERS)
    s.write(10, [("t", 1)])
    [out] = s.poll()[2]
    s.channel.on_response(out, ok(out, t1=codes.NOT_LEADER_OR_FOLLOWER), 1)
    assert s.answers == [{("t", 1): codes.NOT_LEADER_OR_FOLLOWER}]
    s.image = image({**LEADERS, ("t", 1): 3})  # t-1 moved to broker 3
    s.write(10, [("t", 1)])  # the shard's retry, after its backoff
    s.write(13, [("t", 2)])
    out3 = s.poll()
    assert list(out3) == [3] and partitions(out3[3][0]) == [(10, "t", 1), (13, "t", 2)]
    s.image = image({**LEADERS, ("t", 1): 1})  # and now led here: written in place
    s.write(10, [("t", 1)])
    assert s.local == [("t", 1)] and s.answers[-1] == {("t", 1): codes.NONE}


def test_with_no_network_every_partition_is_written_here() -> None:
    s = Setup(LEADERS, network=False)
    s.write(10, [("t", 1), ("u", 0), ("gone", 0)])
    assert s.local == [("t", 1), ("u", 0)]
    assert s.answers == [{("t", 1): 0, ("u", 0): 0, ("gone", 0): codes.UNKNOWN_TOPIC_OR_PARTITION}]
    assert s.poll() == {}


def test_a_local_marker_waiting_for_its_isr_answers_when_it_is_settled() -> None:
    """A marker led here waits for its ISR as a remote one does (the WriteTxnMarkers handler's
    DelayedMarkers): `done` comes only once it is settled, with its mapped code."""
    s = Setup(LEADERS)
    held: dict[tuple[str, int], Pending] = {}

    def write_local(topic: str, index: int, *_: Any) -> int | Pending:
        held[(topic, index)] = Pending("marker")
        return held[(topic, index)]

    s.channel.write_local = write_local
    s.write(10, [("t", 0)])
    assert s.answers == [] and s.poll() == {}
    held[("t", 0)].complete(codes.COORDINATOR_LOAD_IN_PROGRESS)  # the leadership moved
    assert s.answers == [{("t", 0): codes.NOT_LEADER_OR_FOLLOWER}]
