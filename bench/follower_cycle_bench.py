#!/usr/bin/env python
"""What one record of the RF 3 acks=all latency phase costs a follower, in process, source
trees side by side: the replica fetcher's work of bench/replication_latency_bench.py's
followers without sockets (bench/leader_cycle_bench.py is the leader's side).

    python bench/follower_cycle_bench.py --tree /tmp/old --tree $PWD                 # CPU, 3 runs
    python bench/follower_cycle_bench.py --tree /tmp/old --tree $PWD --instructions  # callgrind
    python bench/follower_cycle_bench.py --tree /tmp/old --tree $PWD --instructions --idle 200

One cycle is what a follower does for each record: the leader's answer to its parked
incremental Fetch arrives as bytes on the connection (one 100 B batch for one partition of an
18-partition session: a 3-node cluster's follower of a leader of one topic partition and 17 of
`__consumer_offsets`, or `--idle N` of them; the leader's high watermark is the offset before it, as it is when the
leader answers at once); the response is framed and decoded (protocol), handed to the replica
fetchers as their driver hands it (runtime/drivers.py's CoreDriver, fetcher_session.py,
follower.py), appended (Log.append_as_follower), the high watermark updated, and the next
incremental Fetch, naming the one partition that moved, built, encoded and written. The real
code runs throughout, from the connection's `data_received` to its transport's `writelines`;
only the transport is a stand-in that keeps what is written. The response is encoded once
with the codec; each cycle patches its correlation id, the batch's base offset (outside the
batch's CRC) and the high watermark.

Prints microseconds of process CPU per record (`--records` cycles after 300 of warm-up; the
tree's runs alternate with the other's) or, with `--instructions`, the instructions per record
counted by valgrind's callgrind (the difference of two runs, so start-up is left out), which no
load on the machine bends. Figures only. Trees are given as absolute paths.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import re
import shutil
import statistics
import struct
import tempfile
import time
import uuid
from typing import Any

from tree_child import figure_in_tree

WARM_UP = 300
LEADER = 1
ME = 2
IDLE = 17  # idle partitions in the session (`__consumer_offsets`)
SESSION_ID = 1234
_HW_MARK = 0x0A0B0C0D0E0F0102  # stands for the high watermark in the encoded response
_BASE_MARK = 0x0B0C0D0E0F010203  # and for the batch's base offset


def cycle_cost(records: int, warm_up: int, idle: int = IDLE) -> float:
    """Run in the tree on sys.path: process CPU seconds of `records` cycles."""
    try:
        import uvloop  # the broker's loop (runtime/server.py)

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as d:
        return asyncio.run(_run(d, records, warm_up, idle))


async def _run(d: str, records: int, warm_up: int, idle: int) -> float:
    run = _Cycle(d, idle)
    try:
        await run.start()
        for _ in range(warm_up):
            run.once()
        t0 = time.process_time()
        for _ in range(records):
            run.once()
        cpu = time.process_time() - t0
    finally:
        await run.stop()
    return cpu


class _Transport:
    """The connection's transport: keeps the last request written."""

    def __init__(self) -> None:
        self.written: list[Any] = []

    def writelines(self, buffers: Any) -> None:
        self.written = list(buffers)

    def write(self, data: Any) -> None:
        self.written = [data]

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


class _Image:
    def __init__(self, brokers: dict[int, Any]) -> None:
        self.brokers = brokers


class _Cycle:
    broker_epoch = 7

    def __init__(self, d: str, idle: int) -> None:
        from gregor.broker.cores import replica_fetchers  # noqa: F401 (the composition's)
        from gregor.metadata.image import PartitionRegistration
        from gregor.replication.partition import ReplicaManager
        from gregor.storage.config import LogConfig
        from gregor.storage.log_manager import LogManager

        self.logs = LogManager([d], LogConfig())
        self.logs.startup()
        self.rm = ReplicaManager(ME, self.logs, local_broker_epoch=lambda: self.broker_epoch)
        reg = PartitionRegistration(
            replicas=(LEADER, ME, 3), isr=(LEADER, ME, 3), leader=LEADER, leader_epoch=0,
            partition_epoch=0,
        )  # fmt: skip
        self.topic_id = uuid.UUID(int=42)
        offsets_id = uuid.UUID(int=43)
        now = int(time.time() * 1000)
        self.rm.apply("rf3", 0, self.topic_id, reg, LogConfig(), 2, now)
        for i in range(idle):
            self.rm.apply("__consumer_offsets", i, offsets_id, reg, LogConfig(), 2, now)
        self.p = self.rm.get("rf3", 0)
        self.idle = [("__consumer_offsets", offsets_id, i) for i in range(idle)]

    async def start(self) -> None:
        from gregor.clock import SystemClock
        from gregor.metadata.cluster import broker_endpoint
        from gregor.metadata.image import BrokerRegistration, Endpoint
        from gregor.protocol import api_keys, codec
        from gregor.protocol.messages import FetchResponse
        from gregor.protocol.records.records import build_batch
        from gregor.replication.fetcher_session import ReplicaFetchers
        from gregor.replication.follower import FETCH_VERSION, FetcherConfig
        from gregor.runtime.client import NetworkClient, NodeConnection, _Frames
        from gregor.runtime.drivers import CoreDriver, node_send

        # what the broker gives them: its epoch, the leader's endpoint read from the metadata
        # image, the clock (broker/cores.py)
        image = _Image(
            {LEADER: BrokerRegistration(LEADER, uuid.UUID(int=1), 5, listeners=(
                Endpoint("CONTROLLER", "127.0.0.1", 9093, 0),
                Endpoint("PLAINTEXT", "127.0.0.1", 9092, 0)), fenced=False)}
        )  # fmt: skip
        clock = SystemClock()
        # what moves when a partition's fetch changes without the fetchers (a tree that
        # takes it)
        given = {"stamp": self.rm.stamp}
        if "stamp" not in inspect.signature(ReplicaFetchers).parameters:
            given = {}
        core = ReplicaFetchers(
            FetcherConfig(replica_id=ME),
            partition_of=self.rm.get,
            broker_epoch=lambda: self.broker_epoch,
            endpoint_of=lambda b: broker_endpoint(image, b, "PLAINTEXT"),
            socket_timeout_ms=30_000,
            quota=self.rm.follower_quota,
            **given,  # type: ignore[arg-type]
        )
        core.apply(self.rm.take_follower_changes())
        self.client = NetworkClient(client_id=f"replica-fetcher-{ME}")
        self.client.set_endpoint(LEADER, "127.0.0.1", 9092)
        frames = _Frames()
        self.transport = _Transport()
        frames.connection_made(self.transport)  # type: ignore[arg-type]
        self.frames = frames
        self.conn = NodeConnection(frames, client_id=self.client.client_id, max_in_flight=100,
                                   label="127.0.0.1:9092")  # fmt: skip
        self.client._nodes[LEADER].connection = self.conn
        self.driver = CoreDriver(core, node_send(self.client), lambda: clock.now_ms(),
                                 name="replica-fetchers")  # fmt: skip
        self.driver.start()
        await asyncio.sleep(0)  # the first poll: a full Fetch of the 18 partitions
        self.correlation_id = 0
        self._check_sent(full=True)
        pd = FetchResponse.PartitionData
        full = FetchResponse(
            session_id=SESSION_ID,
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic_id=self.topic_id,
                    partitions=[
                        pd(
                            partition_index=0,
                            high_watermark=0,
                            last_stable_offset=0,
                            log_start_offset=0,
                            records=b"",
                        )
                    ],  # fmt: skip
                ),
                FetchResponse.FetchableTopicResponse(
                    topic_id=self.idle[0][1],
                    partitions=[
                        pd(
                            partition_index=i,
                            high_watermark=0,
                            last_stable_offset=0,
                            log_start_offset=0,
                            records=b"",
                        )  # fmt: skip
                        for _, _, i in self.idle
                    ],
                ),
            ],
        )
        self._answer(self._frame(codec, api_keys, FETCH_VERSION, full))
        self._check_sent(full=False)
        batch = build_batch([(None, b"x" * 100)], base_timestamp=int(time.time() * 1000))
        struct.pack_into(">q", batch, 0, _BASE_MARK)
        one = FetchResponse(
            session_id=SESSION_ID,
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic_id=self.topic_id,
                    partitions=[
                        pd(
                            partition_index=0,
                            high_watermark=_HW_MARK,
                            last_stable_offset=_HW_MARK,
                            log_start_offset=0,
                            records=batch,
                        )
                    ],  # fmt: skip
                )
            ],
        )
        self.frame = bytearray(self._frame(codec, api_keys, FETCH_VERSION, one))
        self.at_base = self.frame.index(struct.pack(">q", _BASE_MARK))
        self.at_hw = [m.start() for m in re.finditer(re.escape(struct.pack(">q", _HW_MARK)),
                                                     self.frame)]  # fmt: skip
        assert len(self.at_hw) == 2, "the high watermark and last stable offset"

    @staticmethod
    def _frame(codec: Any, api_keys: Any, version: int, body: Any) -> bytes:
        return codec.join(codec.encode_response(api_keys.FETCH, version, 0, body))

    def _answer(self, frame: bytes | bytearray) -> None:
        """The leader's response frame arrives on the connection."""
        frame = frame if isinstance(frame, bytearray) else bytearray(frame)
        struct.pack_into(">i", frame, 4, self.correlation_id)
        self.correlation_id += 1
        self.frames.data_received(bytes(frame))

    def _check_sent(self, full: bool) -> None:
        from gregor.protocol import codec

        frame = codec.join(self.transport.written)
        header, body = codec.decode_request(memoryview(frame)[4:])
        assert header.correlation_id == self.correlation_id, "no Fetch written"
        assert (body.session_epoch == 0) == full, body.session_epoch
        moved = [(p.partition, p.fetch_offset) for t in body.topics for p in t.partitions]
        if not full and self.correlation_id > 1:
            assert moved == [(0, self.p.log.log_end_offset)], moved

    def once(self) -> None:
        frame, leo = self.frame, self.p.log.log_end_offset
        struct.pack_into(">q", frame, self.at_base, leo)
        for at in self.at_hw:
            struct.pack_into(">q", frame, at, leo)
        self.transport.written = []
        self._answer(frame)
        assert self.p.log.log_end_offset == leo + 1 and self.transport.written, "not appended"

    async def stop(self) -> None:
        self._check_sent(full=False)
        await self.driver.stop()
        self.conn.close()
        self.logs.shutdown()


def _child(tree: str, records: int, warm_up: int, instructions: bool, idle: int) -> float:
    """CPU seconds (or instructions, under callgrind) of `records` cycles in `tree`."""
    call = f"cycle_cost({records}, {warm_up}, {idle})"
    return figure_in_tree(tree, "follower_cycle_bench", call, instructions)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--instructions", action="store_true", help="count with callgrind")
    ap.add_argument("--idle", type=int, default=IDLE, help="idle partitions in the session")
    args = ap.parse_args()
    if args.instructions and not shutil.which("valgrind"):
        print("--instructions needs valgrind (apt-get install valgrind)")
        return 2
    results: dict[str, list[float]] = {t: [] for t in args.tree}
    if args.instructions:  # deterministic: one run each, 300 cycles less the start-up
        for tree in args.tree:
            base = _child(tree, 0, 30, True, args.idle)
            results[tree].append((_child(tree, 300, 30, True, args.idle) - base) / 300)
            print(f"{tree}: {results[tree][0] / 1e6:.3f} M instructions per record", flush=True)
        return 0
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for _ in range(args.runs):
        for tree in args.tree:
            us = _child(tree, args.records, WARM_UP, False, args.idle) / args.records * 1e6
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
