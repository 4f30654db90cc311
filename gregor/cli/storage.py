"""`gregor storage format|random-uuid`, as `kafka-storage.sh`.

    gregor storage random-uuid                                   # a new cluster id
    gregor storage format --data-dir D [--cluster-id ID] [--node-id N] [--ignore-formatted]
    gregor storage format --config server.properties [--cluster-id ID]  # its log.dirs, node.id

`format` writes meta.properties (version 1: cluster.id, node.id, a new directory.id) in each
dir of D (comma-separated, as log.dirs); without --cluster-id it makes a new one. A dir that
already has one is an error unless --ignore-formatted. `gregor serve` does the same implicitly on
an empty data dir, and refuses a dir formatted for another cluster or node.id. The metadata log's
first records (metadata.version) are written by the first `gregor serve`.
"""

from __future__ import annotations

import argparse
import os
import sys

from gregor.metadata import meta_properties


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("storage", help="format data dirs (meta.properties), make cluster ids")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser("format", help="write meta.properties in each data dir")
    v.add_argument("--data-dir", metavar="DIR[,DIR...]", help="the log dirs (log.dirs)")
    v.add_argument(
        "--config",
        "-c",
        metavar="FILE",
        help="a server.properties: its log.dirs and node.id, unless given here",
    )
    v.add_argument("--cluster-id", "-t", help="the cluster id (default: a new random one)")
    v.add_argument("--node-id", type=int, help="this node's node.id (default 1)")
    v.add_argument(
        "--ignore-formatted", "-g", action="store_true", help="skip dirs already formatted"
    )
    v.set_defaults(func=format_storage)
    v = verbs.add_parser("random-uuid", help="print a new cluster id")
    v.set_defaults(func=random_uuid)


def random_uuid(args: argparse.Namespace) -> int:
    print(meta_properties.random_id())
    return 0


def _from_config(args: argparse.Namespace) -> None:
    """--data-dir and --node-id from --config's log.dirs and node.id, where not given."""
    from gregor.broker.config import BrokerConfig

    config = BrokerConfig.load(args.config)
    if args.data_dir is None:
        args.data_dir = ",".join(config.log_dirs)
    if args.node_id is None:
        args.node_id = config.node_id


def format_storage(args: argparse.Namespace) -> int:
    from gregor.metadata.config_defs import ConfigError

    if args.config:
        try:
            _from_config(args)
        except (ConfigError, OSError) as exc:
            print(f"gregor storage format: --config {args.config}: {exc}", file=sys.stderr)
            return 2
    if args.node_id is None:
        args.node_id = 1
    dirs = [os.path.abspath(d.strip()) for d in (args.data_dir or "").split(",") if d.strip()]
    if not dirs:
        print("gregor storage format: name the data dirs: --data-dir or --config", file=sys.stderr)
        return 2
    if args.node_id < 0:
        print(f"gregor storage format: --node-id {args.node_id} is negative", file=sys.stderr)
        return 2
    cluster_id = args.cluster_id or meta_properties.random_id()
    try:
        written = meta_properties.format_dirs(dirs, cluster_id, args.node_id, args.ignore_formatted)
    except ValueError as exc:
        print(f"gregor storage format: --cluster-id: {exc}", file=sys.stderr)
        return 2
    except (meta_properties.MetaPropertiesError, OSError) as exc:
        print(f"gregor storage format: {exc}", file=sys.stderr)
        return 1
    for d in written:
        print(f"Formatted {d}: cluster.id={cluster_id} node.id={args.node_id}")
    for d in dirs:
        if d not in written:
            print(f"Skipped {d}: already formatted")
    return 0
