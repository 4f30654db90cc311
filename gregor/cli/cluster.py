"""`gregor cluster up --nodes 3 [--controllers C] [--base-dir D]`: a local KRaft cluster for
development.

Starts `gregor serve` processes on loopback (gregor.testing.cluster.LocalCluster): by default N
nodes, ids 1..N, each broker and controller, with a client and a controller listener on free
ports; with `--controllers C`, C dedicated controllers (ids 1..C, `process.roles=controller`)
and N broker-only nodes (ids C+1..C+N, `process.roles=broker`). Data in `<base dir>/node-<id>`
(a temp dir unless given; kept on exit when given). Once every node is ready and every broker
registered and unfenced (so that a topic of replication factor N can be made at once), prints
each node's ports and data dir and the bootstrap string, then waits; Ctrl-C, SIGTERM or SIGHUP
stops them all cleanly, even when stdout was closed under it; if `cluster up` itself is
SIGKILLed, each node gets SIGTERM from the kernel (its parent-death signal) and stops.
`--set key=value` goes to every node.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gregor.testing.cluster import LocalCluster

from gregor.cli import cluster_health, cluster_info


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cluster", help="a local multi-node cluster for development; any cluster's info and health"
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    up = verbs.add_parser(
        "up", help="start N nodes (broker and controller each); Ctrl-C stops them"
    )
    up.add_argument(
        "--nodes", type=int, default=3, help="brokers (each also a controller unless --controllers)"
    )
    up.add_argument(
        "--controllers",
        type=int,
        default=0,
        help="dedicated controllers; the N nodes are then broker-only",
    )
    up.add_argument(
        "--base-dir", metavar="DIR", help="where the nodes keep their data (default: a temp dir)"
    )
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], help="a config for every node"
    )
    up.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    up.set_defaults(func=cluster_up)
    cluster_info.register_verb(verbs)
    cluster_health.register_verb(verbs)


def cluster_up(args: argparse.Namespace) -> int:
    from gregor.broker.config import parse_overrides
    from gregor.broker.preflight import StartError, check_log_dirs
    from gregor.metadata.config_defs import ConfigError
    from gregor.testing.cluster import LocalCluster

    if args.nodes < 1 or args.controllers < 0:
        _err("gregor: --nodes must be at least 1, --controllers at least 0")
        return 2
    try:
        config = parse_overrides(args.set)
    except ConfigError as exc:
        _err(f"gregor: {exc}")
        return 2
    if args.base_dir:  # a file, or a dir this user cannot make: one line, as serve says it
        try:
            check_log_dirs([args.base_dir], "--base-dir")
        except StartError as exc:
            _err(f"gregor: {exc}")
            return 1
    cluster = LocalCluster(
        args.nodes,
        base_dir=args.base_dir,
        host=args.host,
        config=config,
        log_level=args.log_level,
        controllers=args.controllers,
        die_with_parent=True,  # a SIGKILLed `cluster up` leaves no node running
    )
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    out = _Out()
    try:
        return _run(cluster, args, out, lambda: stopping)
    finally:
        out.say("stopping...")
        if args.base_dir:
            cluster.stop()
        else:
            cluster.close()


def _run(
    cluster: LocalCluster, args: argparse.Namespace, out: _Out, stop: Callable[[], bool]
) -> int:
    """Start the nodes, wait until every broker is registered and unfenced, say where they are,
    then watch them until `stop()`."""
    from gregor.testing.broker import BrokerStartError

    for i in cluster.ids:
        if stop():
            return 0
        try:
            cluster.start_node(i)
        except BrokerStartError:
            node = cluster.nodes[i]
            _err(
                f"gregor: node {i} did not start: {_last_line(node.read_log())} (log: {node.log_path})"
            )
            return 1
    try:
        if not cluster.wait_for_brokers(stop=stop):
            return 0
    except TimeoutError as exc:
        _err(f"gregor: {exc} (logs: {cluster.base_dir}/node-*/broker.log)")
        return 1
    _describe(cluster, args, out)
    while not stop():
        time.sleep(0.2)
        for i in cluster.ids:
            proc = cluster.nodes[i].process
            if proc is not None and proc.poll() is not None:
                out.say(f"node {i} exited with {proc.returncode} (see {cluster.nodes[i].log_path})")
                cluster.nodes[i].process = None
    return 0


def _describe(cluster: LocalCluster, args: argparse.Namespace, out: _Out) -> None:
    if args.controllers:
        out.say(
            f"cluster {cluster.cluster_id}: {args.controllers} controller(s), {args.nodes} broker(s)"
        )
    else:
        out.say(f"cluster {cluster.cluster_id}: {args.nodes} node(s), broker and controller each")
    for i in cluster.ids:
        ports = [
            f"{role} {args.host}:{found[i]}"
            for role, found in (
                ("broker", cluster.broker_ports),
                ("controller", cluster.controller_ports),
            )
            if i in found
        ]
        out.say(
            f"  node {i}: {'  '.join(ports)}  data {cluster.data_dir(i)} (log {cluster.nodes[i].log_path})"
        )
    out.say(f"bootstrap.servers={cluster.bootstrap}")
    out.say("Ctrl-C stops them all.")


class _Out:
    """stdout that may be closed under us (`gregor cluster up | head -3`): once a write fails,
    stdout goes to /dev/null and the nodes are still stopped on the signal."""

    def __init__(self) -> None:
        self.closed = False

    def say(self, text: str) -> None:
        if self.closed:
            return
        try:
            print(text, flush=True)
        except (OSError, ValueError):
            self.closed = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def _err(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
