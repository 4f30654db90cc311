#!/usr/bin/env python
"""The machine's floor for a topic creation a 3-node quorum commits, one CreateTopics per request,
beside gregor's own figure in the same run.

    python bench/null_quorum.py                        # this tree, 3 runs of 800 each
    python bench/null_quorum.py --tree /tmp/old --tree . --runs 3 --creations 800

The null quorum is three Python processes that do only what a metadata commit cannot skip: the
leader (bench/null_broker.py answering ApiVersions and Metadata) takes a CreateTopics, writes a
165-byte record (the size of gregor's record batch for a one-partition topic) to its log file,
starts its own fsync, sends the record to two followers over TCP, and answers once its fsync and
one follower's acknowledgement are in (a majority of three). A follower writes the record to its
own log file, fsyncs it, and acknowledges. The fsyncs are Linux AIO as gregor's metadata log
does them (gregor/runtime/aio_fsync.py; a thread where the kernel offers none). No decoding
beyond the request, no metadata image, no Raft state: every process on the same two cores and
the same disk, with the same client (confluent-kafka's AdminClient, one creation at a time).

gregor's figure is bench/cluster_metadata_bench.py's one-per-request case on a fresh 3-node
`LocalCluster` of each `--tree`, the AdminClient bootstrapped at the active controller. The
runs alternate: null quorum, then each tree. Prints creations/s, p50 and p99 ms, and the CPU
each process spent per creation (/proc); figures only, written to
bench/results/null-quorum-<date>.md and .json (or `--results DIR`).

Every run's directory is removed only once all runs are done. On ext4 without a journal (this
machine's disk) a new inode is allocated past every inode freed in the last seconds to minutes,
and a creation makes one to three: a run that followed the removal of the previous run's
thousand partition directories paid 30-50% more CPU per creation on its nodes than the same tree
run first, so the tree run second lost in every pair whichever it was. For the same reason,
start it a minute after anything removed many files (a test run, another bench).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

RECORD = bytes(165)
ACK = struct.Struct(">q")


class Syncer:
    """fsyncs of one file, reported on the loop: Linux AIO, or a thread without it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        from gregor.runtime.aio_fsync import AioFsync

        self.loop, self.fd = loop, fd
        self.aio = AioFsync.open(loop)

    def sync(self) -> asyncio.Future[None]:
        done: asyncio.Future[None] = self.loop.create_future()

        def finished(exc: BaseException | None) -> None:
            if not done.done():
                done.set_result(None) if exc is None else done.set_exception(exc)

        if self.aio is None or not self.aio.submit([os.dup(self.fd)], finished):
            return asyncio.ensure_future(self.loop.run_in_executor(None, os.fsync, self.fd))
        return done


async def follower(log_path: str) -> None:
    """Append each record received, fsync it, acknowledge it (its sequence number)."""
    loop = asyncio.get_running_loop()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    syncer = Syncer(loop, fd)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(12)
                size, seq = struct.unpack(">iq", head)
                os.write(fd, await reader.readexactly(size))
                await syncer.sync()
                writer.write(ACK.pack(seq))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(f"listening 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


async def leader(log_path: str, followers: list[tuple[str, int]]) -> None:
    """bench/null_broker.py's server, its CreateTopics committed by a majority first."""
    from null_broker import NullBroker

    loop = asyncio.get_running_loop()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    syncer = Syncer(loop, fd)
    links = [await asyncio.open_connection(host, port) for host, port in followers]
    acks: dict[int, asyncio.Future[None]] = {}
    seq = 0

    async def read_acks(reader: asyncio.StreamReader) -> None:
        while True:
            (got,) = ACK.unpack(await reader.readexactly(ACK.size))
            waiting = acks.pop(got, None)  # None: the other follower's, after a majority
            if waiting is not None:
                waiting.set_result(None)

    readers = [loop.create_task(read_acks(reader)) for reader, _ in links]

    class QuorumBroker(NullBroker):
        async def create_topics(self, req: Any, version: int) -> Any:
            nonlocal seq
            seq += 1
            majority = acks[seq] = loop.create_future()
            os.write(fd, RECORD)
            own = syncer.sync()
            for _, writer in links:
                writer.write(struct.pack(">iq", len(RECORD), seq) + RECORD)
            await own
            await majority  # the first follower's acknowledgement
            return NullBroker.create_topics(self, req, version)

    broker = QuorumBroker("127.0.0.1", 0, 1)
    server = await asyncio.start_server(broker.serve_connection, "127.0.0.1", 0)
    broker.port = server.sockets[0].getsockname()[1]
    print(f"listening 127.0.0.1:{broker.port}", flush=True)
    try:
        await server.serve_forever()
    finally:  # the readers stay referenced while the server runs (the loop holds tasks weakly)
        for task in readers:
            task.cancel()


def spawn(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening "):
        proc.kill()
        raise SystemExit(f"null quorum process did not start: {line!r}")
    return proc, line.split()[-1]


def measured(bootstrap: str, pids: dict[str, int], prefix: str, n: int) -> dict[str, Any]:
    """One-per-request creations (cluster_metadata_bench.py's case) with each process's CPU."""
    from cluster_metadata_bench import cpu_s, one_per_request

    one_per_request(bootstrap, f"{prefix}w", 50, 1)
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    out = one_per_request(bootstrap, prefix, n, 1)
    for name, pid in pids.items():
        out[f"cpu_ms_{name}"] = (cpu_s(pid) - before[name]) / n * 1e3
    return out


def null_run(tmp: str, n: int) -> dict[str, Any]:
    procs: list[subprocess.Popen[str]] = []
    try:
        addrs = []
        for i in (2, 3):
            proc, addr = spawn(["--follower", os.path.join(tmp, f"f{i}.log")])
            procs.append(proc)
            addrs.append(addr)
        proc, bootstrap = spawn(["--leader", os.path.join(tmp, "l.log"), *addrs])
        procs.append(proc)
        pids = {"leader": proc.pid, "f0": procs[0].pid, "f1": procs[1].pid}
        return summed(measured(bootstrap, pids, "n", n))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def gregor_run(tree: Any, tmp: str, n: int) -> dict[str, Any]:
    from scale_common import broker_pid, start_cluster

    cluster = start_cluster(tree, 3, tmp)
    try:
        ctrl = cluster.active_controller()
        others = [broker_pid(cluster.nodes[i]) for i in cluster.ids if i != ctrl]
        pids = {"leader": broker_pid(cluster.nodes[ctrl]), "f0": others[0], "f1": others[1]}
        return summed(measured(cluster.bootstrap_of(ctrl), pids, "g", n))
    finally:
        cluster.stop()


def summed(out: dict[str, Any]) -> dict[str, Any]:
    """The two followers' CPU per creation together, as cluster_metadata_bench.py gives it."""
    out["cpu_ms_followers"] = out.pop("cpu_ms_f0") + out.pop("cpu_ms_f1")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--follower", metavar="LOG", help=argparse.SUPPRESS)
    ap.add_argument("--leader", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    from scale_common import Figure, Report, Tree, add_common_args, runs_of, say, trees_of

    add_common_args(ap)
    ap.add_argument("--creations", type=int, help="one-per-request creations per run (800)")
    args = ap.parse_args()
    if args.follower or args.leader:
        serve(args)
        return
    n = args.creations or (100 if args.quick else 800)
    trees = trees_of(args)
    null = Tree("null quorum", "bench/null_quorum.py")
    report = Report("null-quorum", args, trees, extra=[null])
    made: list[str] = []  # every run's directory, removed once all have run (see the docstring)
    try:
        for run in range(runs_of(args)):
            for tree in [null, *trees]:
                say(f"run {run + 1}: {tree.label}")
                made.append(tempfile.mkdtemp(prefix="gregor-nullq-", dir=args.dir))
                out = null_run(made[-1], n) if tree is null else gregor_run(tree, made[-1], n)
                say(f"  {out}")
                report.add("one per request", tree, out)
    finally:
        for tmp in made:
            shutil.rmtree(tmp, ignore_errors=True)
    case = "one per request"
    report.write(
        "Topic creations on 3 nodes against the machine's floor (bench/null_quorum.py)",
        "\n\n".join(__doc__.split("\n\n")[2:4]) if __doc__ else "",
        [
            Figure(case, "topics_per_s", "creations/s, one per request"),
            Figure(case, "p50_ms", "p50 ms"),
            Figure(case, "p99_ms", "p99 ms"),
            Figure(case, "cpu_ms_leader", "CPU ms per creation: the leader"),
            Figure(case, "cpu_ms_followers", "CPU ms per creation: the two followers together"),
        ],
        [
            f"gregor at >= 500/s one per request [{t.label}]: "
            f"{report.median(case, t, 'topics_per_s') or 0:.0f}/s; the floor "
            f"{report.median(case, null, 'topics_per_s') or 0:.0f}/s"
            for t in trees
        ],
    )


def serve(args: argparse.Namespace) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.follower:
        asyncio.run(follower(args.follower))
    else:
        log_path, *addrs = args.leader
        followers = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in addrs]
        asyncio.run(leader(log_path, followers))


if __name__ == "__main__":
    main()
