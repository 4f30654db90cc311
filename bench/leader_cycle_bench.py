#!/usr/bin/env python
"""What one record of the RF 3 acks=all latency phase costs its leader, in process, source trees
side by side: the handler work of bench/replication_latency_bench.py's leader without sockets.

    python bench/leader_cycle_bench.py --tree /tmp/old --tree .                  # CPU, 3 runs
    python bench/leader_cycle_bench.py --tree /tmp/old --tree . --instructions   # callgrind
    python bench/leader_cycle_bench.py --tree /tmp/old --tree . --counted        # callgrind, inner

One cycle is what the leader does for each record: a consumer's Fetch of the partition (parked:
nothing above the high watermark), an acks=all Produce of one 100 B record (parked until the
followers have it), which wakes the two followers' parked incremental-session Fetches; their
answers; their next Fetches, naming the one partition that moved (the second moves the high
watermark, which answers the Produce and the consumer's Fetch); and those Fetches parked again.
Each follower session holds 18 partitions, as a 3-node cluster's follower of a leader of one
topic partition and 17 of `__consumer_offsets`: 17 are idle. Requests are decoded and responses
encoded as on the wire.

Prints microseconds of process CPU per record (`--records` cycles after 300 of warm-up; the
tree's runs alternate with the other's) or, with `--instructions`, the instructions per record
counted by valgrind's callgrind (the difference of two runs, so start-up is left out), which no
load on the machine bends; or, with `--counted`, the instructions per cycle callgrind counts
in one run while it is switched on (`callgrind_control -i`) around 200 cycles after 100 of
warm-up: steadier (the two runs' garbage collections and hash seeds do not enter) and quicker.
Figures only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from tree_child import figure_in_tree, inner_instructions

WARM_UP = 300
FOLLOWERS = (2, 3)
IDLE = 17  # idle partitions in each follower's session


def cycle_cost(records: int, warm_up: int) -> float:
    """Run in the tree on sys.path: process CPU seconds of `records` cycles."""
    with tempfile.TemporaryDirectory() as d:
        b, run = _set_up(d)
        for _ in range(warm_up):
            run.once()
        t0 = time.process_time()
        for _ in range(records):
            run.once()
        cpu = time.process_time() - t0
        b.logs.shutdown()
    return cpu


def _counted(records: int, warm_up: int) -> None:
    """Run under callgrind (`--instr-atstart=no`) in the tree: count `records` cycles only."""
    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree measured"
    with tempfile.TemporaryDirectory() as d:
        b, run = _set_up(d)
        for _ in range(warm_up):
            run.once()
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=False)
        for _ in range(records):
            run.once()
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=False)
        b.logs.shutdown()


def _set_up(d: str) -> tuple[Any, _Cycle]:
    from gregor.broker.broker import BrokerServer
    from gregor.broker.config import BrokerConfig
    from gregor.controller.admin import TopicSpec

    b = BrokerServer(BrokerConfig.load(None, {"log.dirs": d}))
    b.logs.startup()
    b.services.apply_metadata()
    b.admin.create_topic(TopicSpec("rf3", 1, 1))
    b.admin.create_topic(TopicSpec("idle", IDLE, 1))
    b.services.apply_metadata()
    return b, _Cycle(b)


class _Follower:
    """A follower's incremental session on the leader: its next Fetch names what moved."""

    def __init__(self, cycle: _Cycle, replica: int) -> None:
        self.cycle, self.replica = cycle, replica
        self.session = (0, 0)
        self.moved = {k: cycle.end(k) for k in cycle.keys}
        self.waiting: Any = None

    def fetch(self) -> None:
        answer = self.cycle.fetch(self.moved, self.session, self.replica, 500)
        self.moved = {}
        if hasattr(answer, "add_done_callback"):
            self.waiting = answer
        else:
            self.took(answer)

    def took(self, response: Any) -> None:
        self.cycle.encode_fetch(response)
        if response.session_id:
            self.session = (response.session_id, self.session[1] + 1)
        for t in response.responses:
            for p in t.partitions:
                if p.records:
                    key = (t.topic, p.partition_index)
                    self.moved[key] = self.cycle.end(key)
        self.waiting = None

    def woken(self) -> None:
        assert self.waiting is not None and self.waiting.done, "a follower's fetch not woken"
        self.took(self.waiting.value)


class _Cycle:
    def __init__(self, b: Any) -> None:
        from gregor.handlers import fetch, produce
        from gregor.handlers.context import RequestContext
        from gregor.protocol import api_keys, codec, messages
        from gregor.protocol.headers import RequestHeader
        from gregor.protocol.records.records import build_batch
        from gregor.replication.partition import ReplicaState

        # (imported once: an import in a method run per cycle costs the bench, not the leader,
        # about a tenth of what it counts)
        self.fetch_handler, self.produce_handler = fetch.handle, produce.handle
        self.context_of, self.header_of = RequestContext, RequestHeader
        self.api_keys, self.codec, self.messages = api_keys, codec, messages
        self.b = b
        self.keys = [("rf3", 0)] + [("idle", i) for i in range(IDLE)]
        for key in self.keys:
            p = b.replicas.get(*key)
            p.replicas = p.isr = [b.node_id, *FOLLOWERS]
            p.followers = {r: ReplicaState(r) for r in FOLLOWERS}
        self.batch = build_batch([(None, b"x" * 100)], base_timestamp=int(time.time() * 1000))
        self.followers = [_Follower(self, r) for r in FOLLOWERS]
        for f in self.followers:
            f.fetch()  # a full Fetch: nothing new, parked
        self.produce(1)
        for f in self.followers:
            f.woken()
            f.fetch()  # incremental: parked
        self.consumed = self.b.replicas.get("rf3", 0).log.high_watermark

    def end(self, key: tuple[str, int]) -> int:
        return int(self.b.replicas.get(*key).log.log_end_offset)

    def context(self, key: int, version: int, header: Any = None) -> Any:
        return self.context_of(
            self.b.services, header or self.header_of(key, version, 1, "bench"), "127.0.0.1:1"
        )

    def fetch(self, offsets: dict, session: tuple[int, int], replica: int, wait_ms: int) -> Any:
        codec, FetchRequest = self.codec, self.messages.FetchRequest
        topics: dict[str, list[Any]] = {}
        for (topic, index), offset in offsets.items():
            topics.setdefault(topic, []).append(
                FetchRequest.FetchPartition(
                    partition=index, fetch_offset=offset, partition_max_bytes=1 << 20
                )
            )
        request = FetchRequest(
            replica_id=replica,
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=session[0],
            session_epoch=session[1],
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[],
        )
        frame = codec.join(codec.encode_request(self.api_keys.FETCH, 12, 1, "bench", request))
        header, body = codec.decode_request(memoryview(frame)[4:])
        return self.fetch_handler(self.context(0, 0, header), body)

    def encode_fetch(self, response: Any) -> None:
        self.codec.encode_response(self.api_keys.FETCH, 12, 1, response)

    def produce(self, acks: int) -> Any:
        ProduceRequest = self.messages.ProduceRequest
        request = ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=5000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="rf3",
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=0, records=self.batch)
                    ],
                )
            ],
        )
        return self.produce_handler(self.context(self.api_keys.PRODUCE, 9), request)

    def once(self) -> None:
        api_keys, codec = self.api_keys, self.codec
        consumer = self.fetch({("rf3", 0): self.consumed}, (0, -1), -1, 100)
        produced = self.produce(-1)
        for f in self.followers:
            f.woken()
        for f in self.followers:
            f.fetch()
        assert produced.done and consumer.done, "the high watermark did not move"
        codec.encode_response(api_keys.PRODUCE, 9, 1, produced.value)
        self.encode_fetch(consumer.value)
        self.consumed += 1


def _child(tree: str, records: int, warm_up: int, instructions: bool) -> float:
    """CPU seconds (or instructions, under callgrind) of `records` cycles in `tree`."""
    call = f"cycle_cost({records}, {warm_up})"
    return figure_in_tree(tree, "leader_cycle_bench", call, instructions)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--inner":
        _counted(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--instructions", action="store_true", help="count with callgrind")
    ap.add_argument("--counted", action="store_true", help="callgrind around 200 cycles only")
    args = ap.parse_args()
    if (args.instructions or args.counted) and not shutil.which("callgrind_control"):
        print("--instructions and --counted need valgrind (apt-get install valgrind)")
        return 2
    results: dict[str, list[float]] = {t: [] for t in args.tree}
    if args.counted:
        for tree in args.tree:
            with tempfile.TemporaryDirectory() as tmp:
                total = inner_instructions(os.path.abspath(tree), __file__, ["200", "100"], tmp)
            if isinstance(total, str):
                print(f"{tree}: failed\n{total}")
                return 1
            print(f"{tree}: {total / 200:,.0f} instructions per cycle", flush=True)
        return 0
    if args.instructions:  # deterministic: one run each, 200 cycles less the start-up
        for tree in args.tree:
            base = _child(tree, 0, 30, True)
            results[tree].append((_child(tree, 200, 30, True) - base) / 200)
            print(f"{tree}: {results[tree][0] / 1e6:.3f} M instructions per record", flush=True)
        return 0
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for _ in range(args.runs):
        for tree in args.tree:
            us = _child(tree, args.records, WARM_UP, False) / args.records * 1e6
            results[tree].append(us)
    for tree, runs in results.items():
        print(
            f"{tree}: {statistics.median(runs):.1f} us CPU per record "
            f"(runs: {', '.join(f'{r:.1f}' for r in runs)})"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
