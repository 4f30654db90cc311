"""`gregor cluster up --nodes 3 [--controllers C] [--base-dir D]`: a local KRaft cluster for
development.

Starts `gregor serve` processes on loopback (gregor.testing.cluster.LocalCluster): by default N
nodes, ids 1..N, each broker and controller, with a client and a controller listener on free
ports; with `--controllers C`, C dedicated controllers (ids 1..C, `process.roles=controller`)
and N broker-only nodes (ids C+1..C+N, `process.roles=broker`). Data in `<base dir>/node-<id>`
(a temp dir unless given; kept on exit when given). Prints each node's ports and data dir and
the bootstrap string, then waits; Ctrl-C (or SIGTERM) stops them all cleanly. `--set key=value`
goes to every node.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from gregor.cli import cluster_info


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="run a local multi-node cluster for development")
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


def cluster_up(args: argparse.Namespace) -> int:
    from gregor.broker.config import parse_overrides
    from gregor.metadata.config_defs import ConfigError
    from gregor.testing.broker import BrokerStartError
    from gregor.testing.cluster import LocalCluster

    if args.nodes < 1 or args.controllers < 0:
        print(
            "gregor cluster up: --nodes must be at least 1, --controllers at least 0",
            file=sys.stderr,
        )
        return 2
    try:
        config = parse_overrides(args.set)
    except ConfigError as exc:
        print(f"gregor cluster up: {exc}", file=sys.stderr)
        return 2
    cluster = LocalCluster(
        args.nodes,
        base_dir=args.base_dir,
        host=args.host,
        config=config,
        log_level=args.log_level,
        controllers=args.controllers,
    )
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
    except BrokerStartError as exc:
        print(f"gregor cluster up: {exc}", file=sys.stderr)
        cluster.stop()
        return 1
    if args.controllers:
        print(
            f"cluster {cluster.cluster_id}: {args.controllers} controller(s), {args.nodes} broker(s)"
        )
    else:
        print(f"cluster {cluster.cluster_id}: {args.nodes} node(s), broker and controller each")
    for i in cluster.ids:
        ports = [
            f"{role} {args.host}:{found[i]}"
            for role, found in (
                ("broker", cluster.broker_ports),
                ("controller", cluster.controller_ports),
            )
            if i in found
        ]
        print(
            f"  node {i}: {'  '.join(ports)}  data {cluster.data_dir(i)} (log {cluster.nodes[i].log_path})"
        )
    print(f"bootstrap.servers={cluster.bootstrap}")
    print("Ctrl-C stops them all.", flush=True)
    try:
        while not stopping:
            time.sleep(0.2)
            for i in cluster.ids:
                proc = cluster.nodes[i].process
                if proc is not None and proc.poll() is not None:
                    print(
                        f"node {i} exited with {proc.returncode} (see {cluster.nodes[i].log_path})",
                        flush=True,
                    )
                    cluster.nodes[i].process = None
    finally:
        print("stopping...", flush=True)
        if args.base_dir:
            cluster.stop()
        else:
            cluster.close()
    return 0
