#!/usr/bin/env python
"""What one KRaft Fetch exchange costs on the wire path, in process, source trees side by side.

    python bench/kraft_fetch_wire_bench.py --tree /tmp/old --tree .                  # CPU
    python bench/kraft_fetch_wire_bench.py --tree /tmp/old --tree . --instructions   # callgrind

Four cases, each timed on its own:
- leader, records: the active controller decodes a follower's FetchRequest v17 frame, maps it to
  the core's request, and encodes the core's answer carrying one batch of 2 records (the bytes
  its log kept) as a FetchResponse v17 frame, naming its listener (node_endpoints);
- leader, hw: the same with an answer that carries no records, only a moved high watermark;
- follower, records: the follower encodes its FetchRequest frame, decodes the answer above into
  the core's response, appends the batch to its log (StorageRaftLog in a temp dir, no fsync)
  and reads the batch's records back as the commit replay does;
- follower, hw: the same with the no-records answer (nothing to append).

Prints microseconds of process CPU per exchange (`--exchanges` after a warm-up, runs of the trees
alternating), or with `--instructions` the instructions per exchange counted by valgrind's
callgrind: the difference of two runs (`--exchanges` and a tenth of it), so start-up is left
out; no load on the machine bends that figure. Figures only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from tree_child import figure_in_tree

CASES = ("leader-records", "leader-hw", "follower-records", "follower-hw")
RECORD_SIZES = (180, 90)  # bytes: a TopicRecord and a PartitionRecord, about
EPOCH = 7
LEADER, FOLLOWER = 1, 2
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"


class Exchange:
    """Frames and objects for `count` exchanges of one case, made up front (same in every run,
    so a difference of two runs leaves their making out)."""

    def __init__(self, case: str, count: int, log_dir: str) -> None:
        from gregor.protocol import api_keys, codec
        from gregor.protocol.records.records import build_batch
        from gregor.raft import messages as m
        from gregor.raft import wire
        from gregor.raft.log import Batch
        from gregor.raft.storage_log import StorageRaftLog

        self.codec, self.wire, self.m = codec, wire, m
        self.key = api_keys.FETCH
        self.side, kind = case.split("-")
        self.records = kind == "records"
        self.log = StorageRaftLog.open(log_dir) if self.side == "follower" else None
        self.requests = []
        self.answers = []
        self.frames = []
        for i in range(count):
            offset = 1000 + 2 * i if self.records else 1000
            request = m.FetchRequest(CLUSTER_ID, FOLLOWER, EPOCH, offset, EPOCH, 0, 500, 8 << 20, i)
            self.requests.append(request)
            batches: tuple[Any, ...] = ()
            if self.records:
                values = tuple(bytes([65 + i % 26]) * n for n in RECORD_SIZES)
                data = bytes(
                    build_batch(
                        [(None, v) for v in values],
                        base_offset=offset,
                        partition_leader_epoch=EPOCH,
                        base_timestamp=1_700_000_000_000,
                    )
                )
                batches = (Batch(offset, EPOCH, values, False, data),)
            answer = m.FetchResponse(0, LEADER, EPOCH, offset - 2, 0, batches, None, None, i)
            self.answers.append(answer)
        if self.log is not None:  # the follower's log starts where the first batch goes
            self.log._log.truncate_fully_and_start_at(1000)
        for i in range(count):
            self.frames.append(self.frame(i))

    def frame(self, i: int) -> bytes:
        """The frame (after its size prefix) the side under test reads in exchange i."""
        codec, wire = self.codec, self.wire
        if self.side == "leader":
            key, version, body = wire.to_request(self.requests[i])
            return codec.join(codec.encode_request(key, version, i, "raft-client-2", body))[4:]
        body = wire.to_response(self.answers[i], 17)
        wire.add_leader_endpoint(body, 17, LEADER, "localhost", 9093)
        return codec.join(codec.encode_response(self.key, 17, i, body))[4:]

    def leader(self, i: int) -> Any:
        codec, wire = self.codec, self.wire
        header, body = codec.decode_request(memoryview(self.frames[i]))
        request = wire.from_request(header.request_api_key, header.request_api_version, body, i)
        assert request.fetch_offset == self.requests[i].fetch_offset
        out = wire.to_response(self.answers[i], 17)
        wire.add_leader_endpoint(out, 17, LEADER, "localhost", 9093)
        return codec.encode_response(self.key, 17, header.correlation_id, out)

    def follower(self, i: int) -> Any:
        codec, wire = self.codec, self.wire
        key, version, body = wire.to_request(self.requests[i])
        sent = codec.encode_request(key, version, i, "raft-client-2", body)
        _cid, answer = codec.decode_response(key, version, memoryview(self.frames[i]))
        wire.node_endpoints(answer)
        response = wire.from_response(key, version, answer, i)
        assert self.log is not None
        for batch in response.batches:
            self.log.append(batch)
            for read in self.log.read(batch.base_offset, 1 << 20):
                for _record in read.records:  # the commit replay walks each record
                    pass
        return sent

    def run(self, count: int) -> None:
        step = self.leader if self.side == "leader" else self.follower
        for i in range(count):
            step(i)


def exchange_cost(case: str, exchanges: int, prepared: int) -> float:
    """Process CPU seconds of `exchanges` exchanges of `case` (of `prepared` made up front)."""
    with tempfile.TemporaryDirectory() as d:
        ex = Exchange(case, prepared, d)
        start = time.process_time()
        ex.run(exchanges)
        return time.process_time() - start


def _child(tree: str, case: str, exchanges: int, prepared: int, instructions: bool) -> float:
    call = f"exchange_cost({case!r}, {exchanges}, {prepared})"
    return figure_in_tree(tree, "kraft_fetch_wire_bench", call, instructions, hash_seed="0")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--case", action="append", choices=CASES, help="(repeat; default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--exchanges", type=int, default=None)
    ap.add_argument("--instructions", action="store_true", help="count with callgrind")
    args = ap.parse_args()
    if args.instructions and not shutil.which("valgrind"):
        print("--instructions needs valgrind (apt-get install valgrind)")
        return 2
    cases = args.case or list(CASES)
    if args.instructions:  # deterministic: one run each, the difference of two counts
        n = args.exchanges or 1000
        for case in cases:
            for tree in args.tree:
                few = _child(tree, case, n // 10, n, True)
                many = _child(tree, case, n, n, True)
                per = (many - few) / (n - n // 10)
                print(f"{case:17} {tree}: {per / 1000:.1f} k instructions per exchange", flush=True)
        return 0
    n = args.exchanges or 20000
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for case in cases:
        results: dict[str, list[float]] = {t: [] for t in args.tree}
        for _ in range(args.runs):
            for tree in args.tree:
                results[tree].append(_child(tree, case, n, n, False) / n * 1e6)
        for tree, runs in results.items():
            print(
                f"{case:17} {tree}: {statistics.median(runs):.1f} us CPU per exchange "
                f"(runs: {', '.join(f'{r:.1f}' for r in runs)})"
            )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
