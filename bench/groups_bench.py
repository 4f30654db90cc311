#!/usr/bin/env python
"""Consumer group figures for gregor: rebalance time, subscribe-to-first-record, OffsetCommit
throughput.

    python bench/groups_bench.py             # everything, 3 runs each (~1-2 min)
    python bench/groups_bench.py --runs 5

1. Subscribe to first record: a lone confluent-kafka consumer (group.initial.rebalance.delay.ms=0
   on the broker) subscribes to a 1-partition topic holding one record; the clock runs from
   creating the consumer to `poll()` returning the record: FindCoordinator, JoinGroup twice
   (KIP-394), SyncGroup, OffsetFetch, ListOffsets, Fetch. Goal: under 1 s.
2. Rebalance, 10 members, 100 partitions (range assignor): 9 members are stable, each polled by
   its own thread; the clock runs from the 10th member's subscribe() until all 10 hold
   disjoint assignments covering the 100 partitions; then from one member's close() until the 9
   left cover them again. The members learn of a rebalance from their next heartbeat, so the
   client's heartbeat.interval.ms bounds the figure: measured at 3000 (librdkafka's default)
   and 500.
3. The coordinator alone (the sans-I/O core, in this process, no sockets): CPU time of a full
   rebalance of 10 members (all rejoin, leader syncs, followers sync) and of one OffsetCommit.
4. OffsetCommit throughput: confluent-kafka `commit(asynchronous=False)` in a loop (one client,
   one request at a time); and raw pipelined OffsetCommit v8 requests (16 in flight, generation
   -1), of 1 and of 10 partitions each: commits/s (requests) and offsets/s.

Medians over runs, with min and max. Every run gets fresh topics and groups; one broker
(`gregor.Broker`, a child process) serves the whole bench. Prints the figures and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import struct
import sys
import threading
import time
import uuid
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gregor import Broker  # noqa: E402
from gregor.coordinator.group.results import JoinRequest, OffsetCommitRequest, SyncRequest  # noqa: E402
from gregor.coordinator.group.shard import GroupConfig, GroupCoordinatorShard  # noqa: E402
from gregor.protocol import api_keys, codec  # noqa: E402
from gregor.protocol.messages import OffsetCommitRequest as WireCommit  # noqa: E402

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"}


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(15)


def summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


# -- 1. subscribe to first record ----------------------------------------------------------------


def first_record(bootstrap: str) -> float:
    topic = uid("first")
    create_topic(bootstrap, topic, 1)
    p = ck.Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"x")
    p.flush(10)
    t0 = time.perf_counter()
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uid("g"), "auto.offset.reset": "earliest"}
    )
    c.subscribe([topic])
    try:
        while True:
            m = c.poll(0.01)
            if m is not None and not m.error():
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > 30:
                raise RuntimeError("no record in 30 s")
    finally:
        c.close()


# -- 2. rebalance ----------------------------------------------------------------------------------


class ThreadMember(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str, heartbeat_ms: int) -> None:
        super().__init__(daemon=True)
        self.c = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "heartbeat.interval.ms": heartbeat_ms,
                "session.timeout.ms": 10000 if heartbeat_ms < 3000 else 45000,
                "partition.assignment.strategy": "range",
            }
        )
        self.topic = topic
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.owned: frozenset[int] = frozenset()
        self.c.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, c: Any, parts: list[Any]) -> None:
        with self.lock:
            self.owned = frozenset(tp.partition for tp in parts)

    def _revoked(self, c: Any, parts: list[Any]) -> None:
        with self.lock:
            self.owned = frozenset()

    def run(self) -> None:
        while not self.stop.is_set():
            self.c.poll(0.02)
        self.c.close()


def covered(members: list[ThreadMember], partitions: int) -> bool:
    seen: list[int] = []
    for m in members:
        with m.lock:
            if not m.owned:
                return False
            seen += m.owned
    return sorted(seen) == list(range(partitions))


def wait_covered(members: list[ThreadMember], partitions: int, timeout: float = 60) -> float:
    t0 = time.perf_counter()
    while not covered(members, partitions):
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError("no stable assignment")
        time.sleep(0.002)
    return time.perf_counter() - t0


def rebalance(
    bootstrap: str, heartbeat_ms: int, members: int = 10, partitions: int = 100
) -> tuple[float, float]:
    topic, group = uid("rebalance"), uid("g")
    create_topic(bootstrap, topic, partitions)
    crowd = [ThreadMember(bootstrap, group, topic, heartbeat_ms) for _ in range(members - 1)]
    for m in crowd:
        m.start()
    try:
        wait_covered(crowd, partitions)
        # Members notice a rebalance at their next heartbeat: start at a random phase of it.
        time.sleep(random.uniform(0.2, 0.2 + heartbeat_ms / 1000))
        t0 = time.perf_counter()
        joiner = ThreadMember(bootstrap, group, topic, heartbeat_ms)
        joiner.start()
        crowd.append(joiner)
        wait_covered(crowd, partitions)
        join_s = time.perf_counter() - t0
        time.sleep(random.uniform(0.2, 0.2 + heartbeat_ms / 1000))
        leaver = crowd.pop(random.randrange(len(crowd)))
        t0 = time.perf_counter()
        leaver.stop.set()  # its thread closes it: LeaveGroup
        # The leaver's partitions were already revoked from it; wait for the survivors.
        wait_covered(crowd, partitions)
        leave_s = time.perf_counter() - t0
        return join_s, leave_s
    finally:
        for m in crowd:
            m.stop.set()
        for m in crowd:
            m.join(10)


# -- 3. the core alone -----------------------------------------------------------------------------


def core_rebalance_us(rounds: int = 200) -> tuple[float, float]:
    shard = GroupCoordinatorShard(0, GroupConfig(initial_rebalance_delay_ms=1000), random.Random(1))
    shard.on_loaded(0)
    protocols = [("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")]
    clock = [1]

    def drive(step: tuple[list[Any], Any]) -> Any:
        records, result = step
        for r in records:
            shard.replay(r)
        settle()
        return result

    def settle() -> None:
        for pending, value in shard.take_completions():
            pending.complete(value)
        while (d := shard.next_deadline_ms()) is not None and d <= clock[0]:
            for r in shard.poll(clock[0]):
                shard.replay(r)
            for pending, value in shard.take_completions():
                pending.complete(value)

    def req(member_id: str) -> JoinRequest:
        return JoinRequest("g", member_id, None, "c", "/h", 10000, 10000, "consumer", protocols)

    def sync_all(answers: list[Any]) -> None:
        gen = answers[0].generation_id
        leader = next(a for a in answers if a.leader == a.member_id)
        for a in answers:
            if a is not leader:
                drive(
                    shard.sync_group(
                        SyncRequest("g", gen, a.member_id, None, None, None, {}), clock[0]
                    )
                )
        assignment = {a.member_id: b"x" * 50 for a in answers}
        drive(
            shard.sync_group(
                SyncRequest("g", gen, leader.member_id, None, None, None, assignment), clock[0]
            )
        )

    ids = [drive(shard.join_group(req(""), clock[0])).member_id for _ in range(10)]
    pendings = [drive(shard.join_group(req(mid), clock[0])) for mid in ids]
    while not all(p.done for p in pendings):  # the initial rebalance delay passes (once extended)
        clock[0] += 1000
        settle()
    answers = [p.value for p in pendings]
    leader_id = answers[0].leader
    ids.sort(key=lambda m: m != leader_id)  # the leader rejoins first: that starts the rebalance
    sync_all(answers)
    start = time.process_time()
    for _ in range(rounds):
        pendings = [drive(shard.join_group(req(mid), clock[0])) for mid in ids]
        answers = [p.value for p in pendings]
        sync_all(answers)
    rebalance_us = (time.process_time() - start) / rounds * 1e6
    assert (
        shard.groups["g"].generation_id == rounds + 1 and str(shard.groups["g"].state) == "Stable"
    )
    commit = OffsetCommitRequest("g", rounds + 1, leader_id, None, -1, [("t", 0, 5, -1, "")])
    n = 20000
    start = time.process_time()
    for _ in range(n):
        records, res = shard.commit_offsets(commit, clock[0])
        assert res.error == 0
        for r in records:
            shard.replay(r)
    return rebalance_us, (time.process_time() - start) / n * 1e6


# -- 4. OffsetCommit throughput --------------------------------------------------------------------


def sync_commits(bootstrap: str, seconds: float = 3.0) -> float:
    topic = uid("commit")
    create_topic(bootstrap, topic, 1)
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uid("g"), "enable.auto.commit": False}
    )
    try:
        c.commit(offsets=[ck.TopicPartition(topic, 0, 0)], asynchronous=False)  # warm up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            n += 1
            c.commit(offsets=[ck.TopicPartition(topic, 0, n)], asynchronous=False)
        return n / (time.perf_counter() - t0)
    finally:
        c.close()


def raw_commits(
    bootstrap: str, partitions: int, seconds: float = 3.0, in_flight: int = 16
) -> float:
    topic, group = uid("rawcommit"), uid("g")
    create_topic(bootstrap, topic, partitions)
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    T, P = WireCommit.OffsetCommitRequestTopic, WireCommit.OffsetCommitRequestPartition

    def frame(i: int) -> bytes:
        body = WireCommit(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                T(
                    name=topic,
                    partitions=[
                        P(partition_index=p, committed_offset=i, committed_metadata="")
                        for p in range(partitions)
                    ],
                )
            ],
        )
        return b"".join(
            bytes(b) for b in codec.encode_request(api_keys.OFFSET_COMMIT, 8, i, "bench", body)
        )

    frames = [frame(i) for i in range(256)]
    buf = bytearray()

    def read_one() -> None:
        nonlocal buf
        while True:
            if len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf, 0)
                if len(buf) >= 4 + size:
                    _, resp = codec.decode_response(
                        api_keys.OFFSET_COMMIT, 8, bytes(buf[4 : 4 + size])
                    )
                    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions), resp
                    del buf[: 4 + size]
                    return
            chunk = s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk

    sent = done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        while sent - done < in_flight:
            s.sendall(frames[sent % len(frames)])
            sent += 1
        read_one()
        done += 1
    while done < sent:
        read_one()
        done += 1
    elapsed = time.perf_counter() - t0
    s.close()
    return done / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with Broker(config=BROKER_CONFIG) as b:
        bs = b.bootstrap
        first_record(bs)  # creates __consumer_offsets (50 partitions), which is not the figure
        firsts = [first_record(bs) for _ in range(max(5, args.runs))]
        out["subscribe_to_first_record_s"] = summary(firsts)
        print(
            f"subscribe -> first record (lone consumer, delay 0): median {statistics.median(firsts) * 1000:.0f} ms, "
            f"max {max(firsts) * 1000:.0f} ms (goal < 1000 ms)"
        )
        for hb in (3000, 500):
            joins, leaves = [], []
            for _ in range(args.runs):
                j, lv = rebalance(bs, hb)
                joins.append(j)
                leaves.append(lv)
            out[f"rebalance_10_members_100_partitions_hb{hb}_join_s"] = summary(joins)
            out[f"rebalance_10_members_100_partitions_hb{hb}_leave_s"] = summary(leaves)
            print(
                f"rebalance, 10 members, 100 partitions, heartbeat.interval.ms={hb}: a member joins "
                f"{statistics.median(joins):.2f} s (min {min(joins):.2f}, max {max(joins):.2f}); a member "
                f"leaves {statistics.median(leaves):.2f} s (min {min(leaves):.2f}, max {max(leaves):.2f})"
            )
        reb_us, commit_us = core_rebalance_us()
        out["core_rebalance_10_members_cpu_us"] = reb_us
        out["core_offset_commit_cpu_us"] = commit_us
        print(
            f"coordinator core alone: a 10-member rebalance {reb_us:.0f} us CPU; an OffsetCommit {commit_us:.1f} us CPU"
        )
        syncs = [sync_commits(bs) for _ in range(args.runs)]
        out["offset_commits_per_s_confluent_sync"] = summary(syncs)
        print(
            f"OffsetCommit, confluent-kafka synchronous, 1 partition: {statistics.median(syncs):,.0f} commits/s"
        )
        for parts in (1, 10):
            raws = [raw_commits(bs, parts) for _ in range(args.runs)]
            out[f"offset_commits_per_s_raw_pipelined_{parts}p"] = summary(raws)
            print(
                f"OffsetCommit, raw pipelined (16 in flight), {parts} partition(s) each: "
                f"{statistics.median(raws):,.0f} commits/s = {statistics.median(raws) * parts:,.0f} offsets/s"
            )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
