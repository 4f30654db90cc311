#!/usr/bin/env python
"""The broker's CPU per partition-batch on the produce path, in process: source trees side by side.

    python bench/produce_path_bench.py                                   # this tree
    python bench/produce_path_bench.py --tree /tmp/old --tree .          # old against new
    python bench/produce_path_bench.py --partitions 1000 --records 25 --runs 5

One Produce v9 request (acks=1) holding one batch for each of `--partitions` partitions of one
topic, each of `--records` records of 100 B with a null key and timestamps a few ms apart (what
librdkafka sends with linger.ms=5 across many partitions), is decoded, handled and its response
encoded, `--rounds` times, on a `BrokerServer` in this process (no sockets, no event loop; data
in a temporary dir). The figure is the user CPU time (getrusage) per partition-batch, the median
over the rounds after two warm ones (the first appends of a segment create its index files);
the kernel's share (the writes) is printed beside it. User CPU is what the broker's Python
costs and bends least under the load of other processes; the wall-clock produce rates of
bench/partitions_bench.py read the same code through the client and the machine's noise.

Each tree runs in its own process (`PYTHONPATH`), trees alternating, `--runs` times; the
median of the runs' medians is printed. Figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(partitions: int, records: int, rounds: int) -> dict[str, float]:
    """One tree (the gregor on sys.path): user and system CPU us per partition-batch."""
    from gregor.broker.broker import BrokerServer
    from gregor.broker.config import BrokerConfig
    from gregor.controller.admin import TopicSpec
    from gregor.handlers import produce
    from gregor.handlers.context import RequestContext
    from gregor.protocol import api_keys, codec
    from gregor.protocol.messages import ProduceRequest
    from gregor.protocol.records.records import build_batch

    data_dir = tempfile.mkdtemp(prefix="produce-path-")
    broker = BrokerServer(BrokerConfig.load(None, {"log.dirs": os.path.join(data_dir, "logs")}))
    try:
        broker.logs.startup()
        broker.services.apply_metadata()
        broker.admin.create_topic(TopicSpec("t", partitions, 1))
        broker.services.apply_metadata()
        now = int(time.time() * 1000)
        stamps = [now + i // 6 for i in range(records)]
        batch = bytes(build_batch([(None, b"x" * 100)] * records, timestamps=stamps))
        parts = [
            ProduceRequest.PartitionProduceData(index=i, records=batch) for i in range(partitions)
        ]
        request = ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout_ms=30_000,
            topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=parts)],
        )
        frame = b"".join(
            bytes(b) for b in codec.encode_request(api_keys.PRODUCE, 9, 1, "b", request)
        )
        user, system = [], []
        for _ in range(rounds + 2):
            buf = bytearray(frame[4:])  # a fresh request: the log patches its batches in place
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            header, body = codec.decode_request(buf)
            response = produce.handle(RequestContext(broker.services, header, "bench:1"), body)
            codec.encode_response(api_keys.PRODUCE, 9, header.correlation_id, response)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            user.append((r1.ru_utime - r0.ru_utime) * 1e6 / partitions)
            system.append((r1.ru_stime - r0.ru_stime) * 1e6 / partitions)
            codes = {p.error_code for t in response.responses for p in t.partition_responses}
            if codes != {0}:
                raise RuntimeError(f"the produce failed: error codes {codes}")
        return {"user_us": statistics.median(user[2:]), "sys_us": statistics.median(system[2:])}
    finally:
        broker.logs.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", default=[], help="a source tree (repeatable)")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=25, help="records per partition-batch")
    ap.add_argument("--rounds", type=int, default=20, help="requests per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.partitions, args.records, args.rounds)))
        return 0
    trees = [os.path.abspath(t) for t in (args.tree or [os.path.dirname(HERE)])]
    got: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    with open("/proc/loadavg") as f:
        print(f"load at start: {f.read().strip()}")
    for run in range(args.runs):
        for tree in trees:
            cmd = [sys.executable, os.path.abspath(__file__), "--child"]
            cmd += ["--partitions", str(args.partitions), "--records", str(args.records)]
            cmd += ["--rounds", str(args.rounds)]
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            got[tree].append(r)
            print(
                f"run {run + 1} {tree}: user {r['user_us']:.1f} us, sys {r['sys_us']:.1f} us per partition-batch",
                flush=True,
            )
    with open("/proc/loadavg") as f:
        print(f"load at end: {f.read().strip()}")
    base = None
    for tree in trees:
        user = statistics.median(r["user_us"] for r in got[tree])
        system = statistics.median(r["sys_us"] for r in got[tree])
        rel = f", {user / base:.2f}x the first tree" if base else ""
        base = base or user
        print(
            f"{tree}: {args.partitions} partitions x {args.records} records: user CPU {user:.1f} us, system {system:.1f} us per partition-batch{rel}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
