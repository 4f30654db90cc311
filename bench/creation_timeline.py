#!/usr/bin/env python
"""Where the wall-clock time of one topic creation goes on a 3-node cluster: the hops of the
chain (client, active controller, the first follower to acknowledge, back), each a median
over the creations traced, read off the system calls `perf trace` records in all four
processes.

    python bench/creation_timeline.py                       # this checkout, 40 creations
    python bench/creation_timeline.py --tree /tmp/old --tree . --creations 60

Each tree in turn starts a `LocalCluster` of three nodes (every node broker and controller),
creates 50 topics to warm up, then traces `--creations` creations, one per request, each
awaited, made by confluent-kafka's AdminClient at the active controller (RF 1, one
partition: cluster_metadata_bench.py's "one per request"), with a 20 ms pause between them.
The bench writes a marker to /dev/null before and after each creation (the window), and
tells the file descriptors apart from /proc: the controller's client connections (its broker
listener's port) and its connections from the other voters (its controller listener's port),
each follower's connection to the controller, and each node's metadata log segment. In a
window, the hops are:

    client -> controller     the client's call until the controller reads the request
    request -> log write     the controller's CreateTopics handling up to its metadata log write
    log write -> Fetch out   until its first Fetch answer to a follower is written
    Fetch out -> follower write   the first follower to acknowledge: the answer on the wire,
                             read, decoded and written to its log
    follower: write -> fsync submitted
    follower: fsync          submitted until its completion is read
    follower: fsync -> Fetch its acknowledging Fetch written
    Fetch -> controller      until the controller reads it
    ack -> answer            the controller's commit until the CreateTopics answer is written
    answer -> client done    until the client's call returns
    controller fsync         its own, submitted until read (off the chain unless it is last)

`perf trace` slows every system call (tens of microseconds each), so the whole is slower than
an untraced run; the shares and the differences between trees are what it shows. Needs
`perf` (linux-tools) and root. Figures only.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from cluster_metadata_bench import admin_of, create
from confluent_kafka.admin import NewTopic
from scale_common import LocalCluster, Tree, broker_pid, start_cluster

EVENTS = "sendmsg,sendto,recvfrom,recvmsg,write,writev,read,io_submit,io_getevents"
_LINE = re.compile(r"\s*([\d.]+) \(\s*[\d.]*\s*(?:ms)?\): (\S+)/(\d+)\s+(\w+)\((?:fd: (\d+))?")
_COUNT = re.compile(r"count: (\d+)\)")
HOPS = (
    "client -> controller",
    "request -> log write",
    "log write -> Fetch out",
    "Fetch out -> follower write",
    "follower: write -> fsync submitted",
    "follower: fsync",
    "follower: fsync -> Fetch",
    "Fetch -> controller",
    "ack -> answer",
    "answer -> client done",
    "whole creation",
    "controller fsync",
)
READS = ("read", "recvfrom", "recvmsg")
WRITES = ("write", "writev", "sendmsg", "sendto")
BEFORE, AFTER = 1000, 3000  # marker sizes: BEFORE + i, AFTER + i


def _sockets_by_inode() -> dict[int, tuple[int, int]]:
    """inode -> (local port, remote port) of every TCP socket on 127.0.0.1."""
    found = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            local, remote, inode = cols[1], cols[2], int(cols[9])
            found[inode] = (int(local.split(":")[1], 16), int(remote.split(":")[1], 16))
    return found


def _fds(pid: int) -> dict[int, str]:
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
    return out


class Roles:
    """Which file descriptor of which process is what (see the module's docstring)."""

    def __init__(self, cluster: LocalCluster, ctrl: int) -> None:
        socks = _sockets_by_inode()
        self.pids = {i: broker_pid(cluster.nodes[i]) for i in cluster.ids}
        self.ctrl = self.pids[ctrl]
        client_port, raft_port = cluster.broker_ports[ctrl], cluster.controller_ports[ctrl]
        self.client_fds: set[int] = set()
        self.voter_fds: set[int] = set()
        self.to_leader: dict[int, set[int]] = {}  # follower pid -> fds to the controller
        self.log_fd: dict[int, set[int]] = {}
        for node, pid in self.pids.items():
            for fd, target in _fds(pid).items():
                if "__cluster_metadata-0" in target and target.endswith(".log"):
                    self.log_fd.setdefault(pid, set()).add(fd)
                m = re.match(r"socket:\[(\d+)\]", target)
                if not m or int(m.group(1)) not in socks:
                    continue
                local, remote = socks[int(m.group(1))]
                if node == ctrl and local == client_port:
                    self.client_fds.add(fd)
                elif node == ctrl and local == raft_port and remote != 0:
                    self.voter_fds.add(fd)
                elif node != ctrl and remote == raft_port:
                    self.to_leader.setdefault(pid, set()).add(fd)


def _parse(path: str) -> list[tuple[float, int, str, int | None, int | None]]:
    """(ms, tid, syscall, fd, write count) of each completed call, in time order."""
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            m = _LINE.match(line)
            if not m or "..." in line.split(")", 2)[-1][:8]:
                continue
            count = _COUNT.search(line)
            fd = int(m.group(5)) if m.group(5) else None
            rows.append(
                (
                    float(m.group(1)),
                    int(m.group(3)),
                    m.group(4),
                    fd,
                    int(count.group(1)) if count else None,
                )
            )
    rows.sort()
    return rows


def _first(
    rows: list[Any], start: float, pid: int, calls: tuple[str, ...], fds: set[int] | None
) -> float | None:
    for t, tid, call, fd, _count in rows:
        if t >= start and tid == pid and call in calls and (fds is None or fd in fds):
            return t
    return None


def _hops(rows: list[Any], roles: Roles) -> dict[str, float] | None:
    """The hops of one creation's window (rows between its markers), or None if one is missing."""
    c = roles.ctrl
    t0, t_end = rows[0][0], rows[-1][0]
    req = _first(rows, t0, c, READS, roles.client_fds)
    logw = req and _first(rows, req, c, ("write",), roles.log_fd.get(c, set()))
    out = logw and _first(rows, logw, c, WRITES, roles.voter_fds)
    csub = logw and _first(rows, logw, c, ("io_submit",), None)
    cdone = csub and _first(rows, csub, c, ("io_getevents",), None)
    ack = out and _first(rows, out, c, READS, roles.voter_fds)
    answer = ack and _first(rows, ack, c, WRITES, roles.client_fds)
    if not (req and logw and out and ack and answer and csub and cdone):
        return None
    best = None
    for pid, fds in roles.to_leader.items():
        f_in = _first(rows, out, pid, READS, fds)
        f_w = f_in and _first(rows, f_in, pid, ("write",), roles.log_fd.get(pid, set()))
        f_sub = f_w and _first(rows, f_w, pid, ("io_submit",), None)
        f_done = f_sub and _first(rows, f_sub, pid, ("io_getevents",), None)
        f_ack = f_done and _first(rows, f_done, pid, WRITES, fds)
        if f_in and f_w and f_sub and f_done and f_ack and (best is None or f_ack < best[-1]):
            best = (f_in, f_w, f_sub, f_done, f_ack)
    if best is None:
        return None
    _f_in, f_w, f_sub, f_done, f_ack = best
    points = [t0, req, logw, out, f_w, f_sub, f_done, f_ack, ack, answer, t_end]
    chain = HOPS[: len(points) - 1]
    hops = {h: b - a for h, a, b in zip(chain, points[:-1], points[1:], strict=True)}
    hops["whole creation"] = t_end - t0
    hops["controller fsync"] = cdone - csub
    return hops


def trace_tree(tree: Tree, creations: int, pause_s: float) -> list[dict[str, float]]:
    devnull = os.open(os.devnull, os.O_WRONLY)
    with tempfile.TemporaryDirectory(prefix="timeline-") as tmp:
        cluster = start_cluster(tree, 3, tmp)
        try:
            ctrl = cluster.active_controller()
            admin = admin_of(cluster.bootstrap_of(ctrl))
            for i in range(50):
                create(admin, [NewTopic(f"warm-{i}", 1, 1)])
            roles = Roles(cluster, ctrl)
            me = os.getpid()
            out = os.path.join(tmp, "trace.txt")
            pids = ",".join(str(p) for p in [me, *roles.pids.values()])
            perf = subprocess.Popen(
                ["perf", "trace", "-T", "-o", out, "-e", EVENTS, "-p", pids],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(2.0)
            for i in range(creations):
                time.sleep(pause_s)
                os.write(devnull, b"x" * (BEFORE + i))
                create(admin, [NewTopic(f"traced-{i}", 1, 1)])
                os.write(devnull, b"y" * (AFTER + i))
            time.sleep(0.3)
            perf.send_signal(signal.SIGINT)
            perf.wait(30)
            rows = _parse(out)
            del admin  # closed before the cluster stops
        finally:
            cluster.stop()
            os.close(devnull)
    return _windows(rows, me, roles, creations)


def _windows(rows: list[Any], me: int, roles: Roles, creations: int) -> list[dict[str, float]]:
    marks: dict[int, dict[int, int]] = {}
    for k, (_t, tid, call, _fd, count) in enumerate(rows):
        if tid == me and call == "write" and count is not None and count >= BEFORE:
            marks.setdefault(count % 1000, {})[count // 1000] = k
    found = []
    for i in range(creations):
        m = marks.get(i, {})
        if BEFORE // 1000 in m and AFTER // 1000 in m:
            hops = _hops(rows[m[BEFORE // 1000] : m[AFTER // 1000] + 1], roles)
            if hops is not None:
                found.append(hops)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--tree", action="append", help="a source tree (repeat; default this checkout)")
    ap.add_argument("--creations", type=int, default=40)
    ap.add_argument("--pause-ms", type=float, default=20.0)
    args = ap.parse_args()
    if os.geteuid() != 0 or subprocess.run(["perf", "--version"], capture_output=True).returncode:
        print("needs perf (linux-tools) and root")
        return 2
    trees = [
        Tree(os.path.basename(os.path.abspath(p)) or p, os.path.abspath(p))
        for p in (args.tree or [here])
    ]
    medians: dict[str, dict[str, float]] = {}
    for tree in trees:
        windows = trace_tree(tree, args.creations, args.pause_ms / 1000)
        if not windows:
            print(f"{tree.label}: no complete window (is perf trace working?)")
            return 1
        medians[tree.label] = {h: statistics.median(w[h] for w in windows) for h in HOPS}
        print(f"{tree.label}: {len(windows)} of {args.creations} creations traced whole")
    labels = list(medians)
    print(f"\n{'hop (median ms)':36}" + "".join(f"{label:>14}" for label in labels))
    for h in HOPS:
        print(f"{h:36}" + "".join(f"{medians[label][h]:14.3f}" for label in labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
