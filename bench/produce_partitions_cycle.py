#!/usr/bin/env python
"""What one partition of a many-partition Produce request costs the broker, in process, through
the client listener's dispatch: source trees side by side.

    python bench/produce_partitions_cycle.py --tree /tmp/old --tree .               # ns, 3 runs
    python bench/produce_partitions_cycle.py --tree /tmp/old --tree . --counted     # callgrind
    python bench/produce_partitions_cycle.py --tree . --profile                     # cProfile

One request frame: Produce v9, acks=1, one topic of `--partitions` partitions, each with one
uncompressed v2 batch of `--records` records of 100 B, null keys, producer id -1, timestamps a
ms apart (what librdkafka builds with linger.ms=5 when a producer spreads small records over
many partitions). It goes through `Dispatcher.__call__` of a `BrokerServer` built in this
process (no sockets, no event loop; data in a temporary dir): header peek, decode, handler,
each partition's append (checks, CRC and record walk, segment write and index entries, high
watermark), response encoding. Each request is a fresh copy of the frame (the log patches its
batches in place). A partition's first append reserves its index blocks and its first index
entry (after 4 KiB) opens its index files, once each: the warm-up (10 requests by default)
leaves both behind for batches of 5 records or more (1-record batches reach their first entry
after some 24 requests).

Prints the process CPU ns per partition and the wall ms per request (`--requests` requests
after `--warm-up`; the runs of the trees alternate), or, with `--counted`, the instructions per partition callgrind counts
while switched on (`callgrind_control -i`) around `--requests` requests after the warm-up, which
no load on the machine bends; or, with `--profile`, a cProfile of the requests (cumulative and
own time, top 40). Figures only.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any

from tree_child import inner_instructions

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD_BYTES = 100


def _set_up(d: str, partitions: int, records: int) -> tuple[Any, Any, bytes]:
    """A broker leading `partitions` partitions of topic `t`, its dispatcher and one request
    frame (without its length prefix)."""
    from gregor.broker.broker import BrokerServer
    from gregor.broker.config import BrokerConfig
    from gregor.broker.dispatch import Dispatcher
    from gregor.controller.admin import TopicSpec
    from gregor.protocol import api_keys, codec
    from gregor.protocol.messages import ProduceRequest
    from gregor.protocol.records.records import build_batch

    b = BrokerServer(BrokerConfig.load(None, {"log.dirs": d}))
    b.logs.startup()
    b.services.apply_metadata()
    b.admin.create_topic(TopicSpec("t", partitions, 1))
    b.services.apply_metadata()
    codec.compile_all()
    now = int(time.time() * 1000)
    batch = bytes(
        build_batch(
            [(None, b"x" * RECORD_BYTES)] * records, timestamps=[now + i for i in range(records)]
        )
    )
    parts = [ProduceRequest.PartitionProduceData(index=i, records=batch) for i in range(partitions)]
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=30_000,
        topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=parts)],
    )
    frame = codec.join(codec.encode_request(api_keys.PRODUCE, 9, 1, "rdkafka", request))
    return b, Dispatcher(b.services, b.forwarder), bytes(frame[4:])


class _Run:
    """Requests sent through the dispatcher, each answered with no error."""

    def __init__(self, d: str, partitions: int, records: int) -> None:
        self.b, self.dispatch, self.frame = _set_up(d, partitions, records)
        self.conn = SimpleNamespace(peer="127.0.0.1:40000", attributes={}, throttle=None)
        self.partitions = partitions

    def once(self) -> Any:
        return self.dispatch(self.conn, memoryview(bytearray(self.frame)))

    def check(self) -> None:
        """One request, its response decoded: every partition appended."""
        from gregor.protocol import api_keys, codec

        out = codec.join(self.once())
        body = codec.decode_response(api_keys.PRODUCE, 9, memoryview(out)[4:])[1]
        codes = [p.error_code for t in body.responses for p in t.partition_responses]
        assert len(codes) == self.partitions, f"{len(codes)} partitions answered"
        assert set(codes) == {0}, f"the produce failed: error codes {set(codes)}"

    def close(self) -> None:
        self.b.logs.shutdown()


def cycle_cost(partitions: int, records: int, requests: int, warm_up: int) -> str:
    """Run in the tree on sys.path: process CPU and wall seconds of `requests` requests."""
    with tempfile.TemporaryDirectory() as d:
        run = _Run(d, partitions, records)
        run.check()
        for _ in range(warm_up):
            run.once()
        t0, w0 = time.process_time(), time.perf_counter()
        for _ in range(requests):
            run.once()
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        run.close()
    return f"{cpu} {wall}"


def _counted(partitions: int, records: int, requests: int, warm_up: int) -> None:
    """Run under callgrind (`--instr-atstart=no`) in the tree: count `requests` requests."""
    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree measured"
    with tempfile.TemporaryDirectory() as d:
        run = _Run(d, partitions, records)
        run.check()
        for _ in range(warm_up):
            run.once()
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=False)
        for _ in range(requests):
            run.once()
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=False)
        run.close()


def _profile(partitions: int, records: int, requests: int, warm_up: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        run = _Run(d, partitions, records)
        run.check()
        for _ in range(warm_up):
            run.once()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(requests):
            run.once()
        prof.disable()
        run.close()
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(40)


def _in_tree(tree: str, call: str) -> tuple[float, float]:
    """(CPU s, wall s) of `call` run in a child whose `gregor` is `tree`'s."""
    tree = os.path.abspath(tree)
    env = dict(os.environ, PYTHONPATH=tree)
    code = (
        f"import sys; sys.path.insert(0, {HERE!r}); "
        f"import gregor, produce_partitions_cycle as b; "
        f"assert gregor.__file__.startswith({os.path.abspath(tree)!r}), gregor.__file__; "
        f"print(b.{call})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {call} failed\n{out.stderr[-3000:]}")
    cpu, wall = out.stdout.strip().splitlines()[-1].split()
    return float(cpu), float(wall)


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--inner":
        _counted(*(int(a) for a in sys.argv[2:]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=5, help="records per partition's batch")
    ap.add_argument("--requests", type=int, default=None, help="requests measured")
    ap.add_argument("--warm-up", type=int, default=10, help="requests before measuring")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--counted", action="store_true", help="instructions, by callgrind")
    ap.add_argument("--profile", action="store_true", help="cProfile, in this process")
    args = ap.parse_args()
    shape = (args.partitions, args.records)
    if args.profile:
        sys.path.insert(0, os.path.abspath(args.tree[0]))
        _profile(*shape, args.requests or 20, args.warm_up)
        return 0
    if args.counted:
        if not shutil.which("callgrind_control"):
            print("--counted needs valgrind (apt-get install valgrind)")
            return 2
        requests = args.requests or 5
        for tree in args.tree:
            inner = [str(v) for v in (*shape, requests, args.warm_up)]
            with tempfile.TemporaryDirectory() as tmp:
                total = inner_instructions(os.path.abspath(tree), __file__, inner, tmp)
            if isinstance(total, str):
                print(f"{tree}: failed\n{total}")
                return 1
            per = total / requests / args.partitions
            print(f"{tree}: {per:,.0f} instructions per partition", flush=True)
        return 0
    requests = args.requests or 50
    cpu_ns: dict[str, list[float]] = {t: [] for t in args.tree}
    wall_ms: dict[str, list[float]] = {t: [] for t in args.tree}
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for _ in range(args.runs):
        for tree in args.tree:
            call = f"cycle_cost({args.partitions}, {args.records}, {requests}, {args.warm_up})"
            cpu, wall = _in_tree(tree, call)
            cpu_ns[tree].append(cpu / requests / args.partitions * 1e9)
            wall_ms[tree].append(wall / requests * 1e3)
    for tree, runs in cpu_ns.items():
        print(
            f"{tree}: {statistics.median(runs):,.0f} ns CPU per partition "
            f"(runs: {', '.join(f'{r:,.0f}' for r in runs)}); "
            f"{statistics.median(wall_ms[tree]):.2f} ms wall per request"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
