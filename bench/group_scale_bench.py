#!/usr/bin/env python
"""Consumer groups at scale: a 100-member group rebalancing, 1,000 groups committing offsets.
Source trees side by side.

    python bench/group_scale_bench.py                            # 100 members, 1,000 groups
    python bench/group_scale_bench.py --members 200 --heartbeat-ms 3000
    python bench/group_scale_bench.py --tree /tmp/old --tree .   # old main against this tree
    python bench/group_scale_bench.py --quick                    # 20 members, 100 groups, short

The client is this process: raw Kafka requests (this checkout's codec) over asyncio sockets,
one connection per member, so that 100 members cost a few milliseconds of CPU each rebalance
(confluent-kafka consumers are a thread pool each). One broker (`gregor serve`, from each
`--tree` in turn, `--runs` times) with group.initial.rebalance.delay.ms=0 and 50 offsets
partitions, as bench/groups_bench.py.

1. Rebalance after a join: `--members` members of one classic group (protocol type
   "consumer", range, ConsumerProtocol v0 subscription and assignment bytes; the leader assigns
   `--partitions` partitions round-robin) run JoinGroup (v5, with the KIP-394 member-id round),
   SyncGroup (v3) and Heartbeat (v3) every `--heartbeat-ms`, rejoining on
   REBALANCE_IN_PROGRESS, as the Java and librdkafka consumers do. Once all are synced, after a
   pause of a random part of one heartbeat interval, one more member starts: the figure is the
   time from its first JoinGroup to every member (the newcomer too) holding its assignment of
   the new generation (the latest SyncGroup answer). `--rebalances` (10) times, the group
   growing by one each time: p50, p99 and max. The members learn of a rebalance from their
   next heartbeat, so about one heartbeat interval is the floor of this figure.
2. Commit latency: `--groups` (1,000) groups each send one OffsetCommit (v8, generation -1:
   a simple-mode commit, one partition) per second (`--interval`), spread evenly over it, for
   `--seconds` (20), over `--connections` (100) connections (each group keeps to one;
   requests pipelined); after one untimed commit per group. Figures: each commit's time from
   send to its answer, p50, p99 and max, and the commits/s answered.

Printed and written to bench/results/group-scale-<date>[-quick].md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # these benches, and this checkout's gregor

from scale_common import (  # noqa: E402
    Figure,
    Report,
    Tree,
    add_common_args,
    broker_pid,
    kclient,
    latency_summary_ms,
    proc_cpu_seconds,
    raise_nofile,
    run_json,
    runs_of,
    say,
    start_broker,
    trees_of,
)

from gregor.protocol import api_keys, codec  # noqa: E402
from gregor.protocol.messages import (  # noqa: E402
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"}
TOPIC = "g"
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID = 79, 27, 25


class Conn:
    """One asyncio connection; requests may be pipelined, answers come back in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0
        self.waiting: collections.deque[tuple[int, int, asyncio.Future[Any]]] = collections.deque()
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, bootstrap: str) -> Conn:
        host, _, port = bootstrap.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    def send(self, key: int, version: int, body: Any) -> asyncio.Future[Any]:
        self.correlation += 1
        frame = codec.encode_request(key, version, self.correlation, "bench", body)
        self.writer.write(b"".join(bytes(b) for b in frame))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append((key, version, fut))
        return fut

    async def _read(self) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await self.reader.readexactly(4))
                frame = await self.reader.readexactly(size)
                key, version, fut = self.waiting.popleft()
                if not fut.done():
                    fut.set_result(codec.decode_response(key, version, frame)[1])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            while self.waiting:
                fut = self.waiting.popleft()[2]
                if not fut.done():
                    fut.set_exception(ConnectionError(str(exc)))

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


async def find_coordinators(conn: Conn, groups: list[str], timeout: float = 60) -> None:
    """FindCoordinator (v4, batched) until every group has one: as a client does first (the
    broker makes __consumer_offsets on the first ask)."""
    deadline = time.perf_counter() + timeout
    left = list(groups)
    while left:
        answers = []
        for first in range(0, len(left), 100):
            answers.append(
                conn.send(
                    api_keys.FIND_COORDINATOR,
                    4,
                    FindCoordinatorRequest(key_type=0, coordinator_keys=left[first : first + 100]),
                )
            )
        resp = await asyncio.gather(*answers)
        left = [c.key for r in resp for c in r.coordinators if c.error_code]
        if left:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no coordinator for {len(left)} groups within {timeout} s")
            await asyncio.sleep(0.1)


# -- ConsumerProtocol v0 bytes ----------------------------------------------------------------


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


SUBSCRIPTION = struct.pack(">h", 0) + struct.pack(">i", 1) + _str(TOPIC) + struct.pack(">i", -1)


def assignment(partitions: list[int]) -> bytes:
    return (
        struct.pack(">h", 0)
        + struct.pack(">i", 1)
        + _str(TOPIC)
        + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
        + struct.pack(">i", -1)
    )


# -- 1. a member ------------------------------------------------------------------------------


class Member:
    def __init__(self, bootstrap: str, group: str, partitions: int, heartbeat_s: float) -> None:
        self.bootstrap, self.group, self.partitions, self.hb = (
            bootstrap,
            group,
            partitions,
            heartbeat_s,
        )
        self.member_id = ""
        self.generation = -1  # of the latest assignment held
        self.assigned_at = 0.0
        self.first_join_at = 0.0
        self.errors: collections.Counter[int] = collections.Counter()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        conn = await Conn.open(self.bootstrap)
        try:
            await find_coordinators(conn, [self.group])
            while True:
                gen = await self.join_and_sync(conn)
                if gen is not None:
                    await self.heartbeats(conn, gen)
        finally:
            conn.close()

    async def join_and_sync(self, conn: Conn) -> int | None:
        if not self.first_join_at:
            self.first_join_at = time.perf_counter()
        join = await conn.send(
            api_keys.JOIN_GROUP,
            5,
            JoinGroupRequest(
                group_id=self.group,
                session_timeout_ms=30000,
                rebalance_timeout_ms=60000,
                member_id=self.member_id,
                protocol_type="consumer",
                protocols=[
                    JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)
                ],
            ),
        )
        if join.error_code:
            if join.error_code != MEMBER_ID_REQUIRED:  # that one is the protocol's first step
                self.errors[join.error_code] += 1
            self.member_id = join.member_id if join.error_code == MEMBER_ID_REQUIRED else ""
            if join.error_code != MEMBER_ID_REQUIRED:
                await asyncio.sleep(0.05)
            return None
        self.member_id = join.member_id
        plan = []
        if join.leader == join.member_id:
            ids = sorted(m.member_id for m in join.members)
            share: dict[str, list[int]] = {m: [] for m in ids}
            for p in range(self.partitions):
                share[ids[p % len(ids)]].append(p)
            plan = [
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=assignment(ps))
                for m, ps in share.items()
            ]
        sync = await conn.send(
            api_keys.SYNC_GROUP,
            3,
            SyncGroupRequest(
                group_id=self.group,
                generation_id=join.generation_id,
                member_id=self.member_id,
                assignments=plan,
            ),
        )
        if sync.error_code:
            self.errors[sync.error_code] += 1
            return None
        self.generation, self.assigned_at = join.generation_id, time.perf_counter()
        return int(join.generation_id)

    async def heartbeats(self, conn: Conn, gen: int) -> None:
        while True:
            await asyncio.sleep(self.hb)
            hb = await conn.send(
                api_keys.HEARTBEAT,
                3,
                HeartbeatRequest(group_id=self.group, generation_id=gen, member_id=self.member_id),
            )
            if hb.error_code:
                if hb.error_code != REBALANCE_IN_PROGRESS:
                    self.errors[hb.error_code] += 1
                if hb.error_code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                return


def synced(members: list[Member], above: int) -> int | None:
    """The generation every member holds an assignment of, if they all hold the same one."""
    gens = {m.generation for m in members}
    if len(gens) == 1:
        g = gens.pop()
        if g > above:
            return g
    return None


async def wait_synced(members: list[Member], above: int, timeout: float) -> int:
    deadline = time.perf_counter() + timeout
    while (g := synced(members, above)) is None:
        for m in members:
            if m.task is not None and m.task.done() and m.task.exception():
                raise RuntimeError(f"a member failed: {m.task.exception()!r}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"members not synced within {timeout} s")
        await asyncio.sleep(0.001)
    return g


async def rebalances(bootstrap: str, cfg: argparse.Namespace) -> dict[str, Any]:
    hb = cfg.heartbeat_ms / 1000
    group = f"big-{random.randrange(1 << 30)}"
    members = [Member(bootstrap, group, cfg.partitions, hb) for _ in range(cfg.members)]
    t0 = time.perf_counter()
    for m in members:
        m.start()
    try:
        gen = await wait_synced(members, 0, 120)
        out: dict[str, Any] = {"form_s": time.perf_counter() - t0}
        took = []
        for _ in range(cfg.rebalances):
            await asyncio.sleep(random.uniform(0.1, 0.1 + hb))
            new = Member(bootstrap, group, cfg.partitions, hb)
            members.append(new)
            new.start()
            await asyncio.sleep(0)
            gen = await wait_synced(members, gen, 120)
            took.append(max(m.assigned_at for m in members) - new.first_join_at)
        out.update(latency_summary_ms(took))
        out["members_at_end"] = len(members)
        errors: collections.Counter[int] = collections.Counter()
        for m in members:
            errors.update(m.errors)
        out["error_codes"] = {str(k): v for k, v in errors.items()}
        return out
    finally:
        for m in members:
            if m.task is not None:
                m.task.cancel()
        await asyncio.gather(*(m.task for m in members if m.task), return_exceptions=True)


# -- 2. many groups committing ----------------------------------------------------------------


def commit_request(group: str, offset: int) -> Any:
    T, P = (
        OffsetCommitRequest.OffsetCommitRequestTopic,
        OffsetCommitRequest.OffsetCommitRequestPartition,
    )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            T(
                name=TOPIC,
                partitions=[P(partition_index=0, committed_offset=offset, committed_metadata="")],
            )
        ],
    )


async def commit_once(conn: Conn, group: str, offset: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    resp = await conn.send(api_keys.OFFSET_COMMIT, 8, commit_request(group, offset))
    err = next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0)
    return time.perf_counter() - t0, err


async def group_loop(
    conn: Conn,
    group: str,
    phase: float,
    start: float,
    seconds: float,
    interval: float,
    lat: list[float],
    late: list[float],
    errs: list[int],
) -> None:
    i = 0
    while True:
        due = start + phase + i * interval
        if due >= start + seconds:
            return
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        late.append(time.perf_counter() - due)  # this process's own lag (its loop was busy)
        took, err = await commit_once(conn, group, i + 1)
        lat.append(took)
        if err:
            errs.append(err)
        i += 1


async def commits(bootstrap: str, cfg: argparse.Namespace) -> dict[str, Any]:
    conns = [await Conn.open(bootstrap) for _ in range(min(cfg.connections, cfg.groups))]
    groups = [f"cg-{random.randrange(1 << 30)}-{i}" for i in range(cfg.groups)]
    try:
        await find_coordinators(conns[0], groups)
        warm = await asyncio.gather(
            *(commit_once(conns[i % len(conns)], g, 0) for i, g in enumerate(groups))
        )
        lat: list[float] = []
        late: list[float] = []
        errs: list[int] = []
        start = time.perf_counter() + 0.5
        await asyncio.gather(
            *(
                group_loop(
                    conns[i % len(conns)],
                    g,
                    i * cfg.interval / cfg.groups,
                    start,
                    cfg.seconds,
                    cfg.interval,
                    lat,
                    late,
                    errs,
                )
                for i, g in enumerate(groups)
            )
        )
        elapsed = time.perf_counter() - start
        out = latency_summary_ms(lat)
        out.update(
            commits_per_s=len(lat) / elapsed,
            warmup_errors=sum(1 for _, e in warm if e),
            errors=len(errs),
            client_late_p99_ms=latency_summary_ms(late)["p99_ms"],
        )
        if errs:
            out["error"] = f"{len(errs)} commits answered error code {errs[0]}"
        return out
    finally:
        for c in conns:
            c.close()


# -- one run ----------------------------------------------------------------------------------


def run_tree(tree: Tree, cfg: argparse.Namespace, base_dir: str) -> dict[str, dict[str, Any]]:
    data_dir = tempfile.mkdtemp(prefix="group-scale-", dir=base_dir)
    broker = start_broker(tree, data_dir, BROKER_CONFIG)
    out: dict[str, dict[str, Any]] = {}
    try:
        pid = broker_pid(broker)
        created = run_json(
            kclient("create", broker.bootstrap, TOPIC, "--partitions", cfg.partitions), 120
        )
        if "error" in created:
            raise RuntimeError(f"create: {created['error']}")
        for name, fn in (("rebalance", rebalances), ("commit", commits)):
            c0 = proc_cpu_seconds(pid)
            try:
                out[name] = asyncio.run(fn(broker.bootstrap, cfg))
            except Exception as exc:  # one failed case must not lose the other
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            cpu = out[name]["broker_cpu_s"] = proc_cpu_seconds(pid) - c0
            if name == "commit" and out[name].get("n"):  # the untimed first commits too
                out[name]["broker_cpu_us_per_commit"] = cpu / (out[name]["n"] + cfg.groups) * 1e6
            if name == "rebalance" and out[name].get("n"):  # the group's forming too
                out[name]["broker_cpu_ms_per_rebalance"] = cpu / (out[name]["n"] + 1) * 1e3
    finally:
        broker.stop(120)
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap)
    ap.add_argument("--members", type=int, help="members before the joins (default 100)")
    ap.add_argument("--partitions", type=int, default=100, help="partitions the leader assigns")
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--rebalances", type=int, help="joins measured (default 10)")
    ap.add_argument("--groups", type=int, help="committing groups (default 1,000)")
    ap.add_argument("--connections", type=int, default=100, help="connections the groups share")
    ap.add_argument("--seconds", type=float, help="seconds of commits (default 20)")
    ap.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between a group's commits (default 1); --groups 100 --interval 0.1 gives "
        "the commit rate of 1,000 groups at 1/s: whether the cost follows the groups or the rate",
    )
    args = ap.parse_args()
    q = args.quick
    args.members = args.members or (20 if q else 100)
    args.rebalances = args.rebalances or (3 if q else 10)
    args.groups = args.groups or (100 if q else 1000)
    args.seconds = args.seconds or (3.0 if q else 20.0)
    raise_nofile(args.members + args.rebalances + args.connections + 1024)
    trees = trees_of(args)
    rep = Report("group-scale", args, trees)
    base_dir = tempfile.mkdtemp(prefix="group-scale-bench-", dir=args.dir)
    say(
        f"group scale bench: {args.members} members, {args.groups} groups, trees {[t.label for t in trees]}"
    )
    try:
        for _ in range(runs_of(args)):
            for tree in trees:
                r = run_tree(tree, args, base_dir)
                for case, v in r.items():
                    rep.add(case, tree, v)
                rb, cm = r.get("rebalance", {}), r.get("commit", {})
                say(
                    f"{tree.label}: rebalance p50 {rb.get('p50_ms') or 0:.0f} ms p99 {rb.get('p99_ms') or 0:.0f} ms "
                    f"(formed in {rb.get('form_s') or 0:.2f} s, errors {rb.get('error_codes')}); "
                    f"commit p50 {cm.get('p50_ms') or 0:.2f} ms p99 {cm.get('p99_ms') or 0:.2f} ms "
                    f"at {cm.get('commits_per_s') or 0:,.0f}/s"
                    + "".join(f"  ERROR {x['error']}" for x in (rb, cm) if "error" in x)
                )
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    n, g, every = args.members, args.groups, f"every {args.interval:g} s"
    figs = [
        Figure("rebalance", "form_s", f"{n} members: group formed from nothing, s"),
        Figure("rebalance", "p50_ms", f"{n} members + 1 joins: all assigned, p50 ms"),
        Figure("rebalance", "p99_ms", f"{n} members + 1 joins: all assigned, p99 ms"),
        Figure("rebalance", "max_ms", f"{n} members + 1 joins: all assigned, max ms"),
        Figure("rebalance", "broker_cpu_s", "broker CPU over the rebalances, s"),
        Figure("rebalance", "broker_cpu_ms_per_rebalance", "broker CPU per rebalance, ms"),
        Figure("commit", "p50_ms", f"{g} groups committing {every}: commit p50 ms"),
        Figure("commit", "p99_ms", f"{g} groups committing {every}: commit p99 ms"),
        Figure("commit", "max_ms", f"{g} groups committing {every}: commit max ms"),
        Figure("commit", "commits_per_s", "commits answered per second"),
        Figure("commit", "client_late_p99_ms", "the client's own send lag p99 ms (its loop busy)"),
        Figure("commit", "broker_cpu_s", "broker CPU over the commits, s"),
        Figure("commit", "broker_cpu_us_per_commit", "broker CPU per commit, us"),
    ]
    gl = [
        f"members learn of a rebalance at their next heartbeat: the join figures include up to one heartbeat interval ({args.heartbeat_ms} ms)"
    ]
    rep.write("Consumer groups at scale (bench/group_scale_bench.py)", __doc__ or "", figs, gl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
