"""The leader's CPU per Fetch of many partitions of which one gets a record each time, with and
without an incremental fetch session (KIP-227), in-process: request decode + the Fetch handler
+ response encode, on a `BrokerServer` built but not listening (the work the RF 3 bench's
follower Fetches cost the leader, minus the socket).

    python bench/fetch_session_bench.py [--partitions 18] [--fetches 3000] [--rounds 3] [--follower]

Each round runs both modes alternately: `sessionless` (session id 0, epoch -1: every partition
named, every partition answered) and `session` (a full Fetch, then incremental ones naming the
one partition whose fetch offset moved; the others answered only if something changed).
Prints microseconds of process CPU per Fetch (median of the rounds) and the bytes of each.
`--follower`: the Fetches are a follower's (replica 2, made a replica in the ISR of every
partition), reading to the log end and moving the follower's fetch state.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.controller.admin import TopicSpec
from gregor.handlers import fetch, produce
from gregor.handlers.context import RequestContext
from gregor.protocol import api_keys, codec
from gregor.protocol.headers import RequestHeader
from gregor.protocol.messages import FetchRequest, ProduceRequest
from gregor.protocol.records.records import build_batch
from gregor.replication.partition import ReplicaState

VERSION = 12  # names, flexible: what kafka-python and librdkafka speak
FOLLOWER = 2


def _produce_one(b: BrokerServer, topic: str) -> None:
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=0, records=build_batch([(None, b"x" * 100)], base_timestamp=0)
                    )
                ],
            )
        ],
    )
    ctx = RequestContext(b.services, RequestHeader(api_keys.PRODUCE, 9, 1, "b"), "127.0.0.1:1")
    produce.handle(ctx, request)


def _request(topic: str, offsets: dict[int, int], session: tuple[int, int], replica: int) -> Any:
    return FetchRequest(
        replica_id=replica,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session[0],
        session_epoch=session[1],
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=i, fetch_offset=o, partition_max_bytes=1 << 20
                    )
                    for i, o in offsets.items()
                ],
            )
        ]
        if offsets
        else [],
        forgotten_topics_data=[],
    )


def run(
    b: BrokerServer, topic: str, partitions: int, fetches: int, sessions: bool, replica: int
) -> tuple[float, float, float]:
    """(CPU us per Fetch, request bytes, response bytes) of `fetches` Fetches."""
    offsets = {i: _end(b, topic, i) for i in range(partitions)}
    session = (0, 0) if sessions else (0, -1)
    cpu = 0.0
    req_bytes = resp_bytes = 0
    for n in range(fetches):
        _produce_one(b, topic)
        named = offsets if not sessions or session[1] == 0 else {0: offsets[0]}
        frame = b"".join(
            bytes(x)
            for x in codec.encode_request(
                api_keys.FETCH, VERSION, n, "b", _request(topic, named, session, replica)
            )
        )
        t0 = time.process_time()
        header, body = codec.decode_request(memoryview(frame)[4:])
        ctx = RequestContext(b.services, header, "127.0.0.1:1")
        response = fetch.handle(ctx, body)
        out = codec.encode_response(api_keys.FETCH, VERSION, n, response)
        cpu += time.process_time() - t0
        req_bytes += len(frame)
        resp_bytes += codec.total_length(out)
        for t in response.responses:
            for p in t.partitions:
                if p.records:
                    offsets[p.partition_index] = _end(b, topic, p.partition_index)
        if sessions:
            session = (response.session_id, session[1] + 1) if response.session_id else (0, 0)
    return cpu / fetches * 1e6, req_bytes / fetches, resp_bytes / fetches


def _end(b: BrokerServer, topic: str, index: int) -> int:
    p = b.replicas.get(topic, index)
    assert p is not None
    return int(p.log.log_end_offset)


def _add_follower(b: BrokerServer, topic: str, partitions: int) -> None:
    for i in range(partitions):
        p = b.replicas.get(topic, i)
        assert p is not None
        p.replicas, p.isr = [b.node_id, FOLLOWER], [b.node_id, FOLLOWER]
        p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--partitions", type=int, default=18)
    ap.add_argument("--fetches", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--follower", action="store_true", help="a follower's Fetches")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        b = BrokerServer(BrokerConfig.load(None, {"log.dirs": d}))
        b.logs.startup()
        b.services.apply_metadata()
        b.admin.create_topic(TopicSpec("bench", args.partitions, 1))
        b.services.apply_metadata()
        replica = -1
        if args.follower:
            _add_follower(b, "bench", args.partitions)
            replica = FOLLOWER
        results: dict[str, list[tuple[float, float, float]]] = {"sessionless": [], "session": []}
        for _ in range(args.rounds):
            for mode in results:
                results[mode].append(
                    run(b, "bench", args.partitions, args.fetches, mode == "session", replica)
                )
        b.logs.shutdown()
    for mode, rs in results.items():
        us = statistics.median(r[0] for r in rs)
        print(
            f"{mode:12s} {us:7.1f} us CPU per Fetch (rounds: {', '.join(f'{r[0]:.1f}' for r in rs)}), "
            f"request {rs[0][1]:.0f} B, response {rs[0][2]:.0f} B"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
