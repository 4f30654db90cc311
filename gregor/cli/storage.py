"""`gregor storage format|random-uuid`, as `kafka-storage.sh`.

    gregor storage random-uuid                                   # a new cluster id
    gregor storage format --data-dir D [--cluster-id ID] [--node-id N] [--ignore-formatted]
    gregor storage format --config server.properties [--cluster-id ID]  # its log.dirs, node.id
    gregor storage format --data-dir D --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]'

`format` writes meta.properties (version 1: cluster.id, node.id, a new directory.id) in each
dir of D (comma-separated, as log.dirs); without --cluster-id it makes a new one. A dir that
already has one is an error unless --ignore-formatted. `gregor serve` does the same implicitly on
an empty data dir, and refuses a dir formatted for another cluster or node.id. The metadata log's
first records (metadata.version) are written by the first `gregor serve`.

`--add-scram MECHANISM=[name=USER,password=P[,iterations=N][,salt=BASE64]]` (repeatable, as
Kafka's) gives the new cluster SCRAM users before its first start, for listeners that take only
SCRAM: their credentials go into `bootstrap.checkpoint` in the first data dir (the metadata
log's), and the first controller commits them with metadata.version.
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
    v.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="MECH=[name=U,password=P,...]",
        help="a SCRAM user of the new cluster, e.g. 'SCRAM-SHA-256=[name=admin,password=secret]'",
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
    from gregor.broker.preflight import StartError, check_log_dirs
    from gregor.metadata.config_defs import ConfigError

    args.data_dir_given = args.data_dir is not None
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
    try:  # a file named as a dir, or a dir this user cannot make: one line naming the option
        check_log_dirs(dirs, "--data-dir" if args.data_dir_given else "log.dirs")
    except StartError as exc:
        print(f"gregor storage format: {exc}", file=sys.stderr)
        return 1
    cluster_id = args.cluster_id or meta_properties.random_id()
    try:
        users = [scram_record(spec) for spec in args.add_scram]
    except ValueError as exc:
        print(f"gregor storage format: --add-scram: {exc}", file=sys.stderr)
        return 2
    try:
        written = meta_properties.format_dirs(dirs, cluster_id, args.node_id, args.ignore_formatted)
    except ValueError as exc:
        print(f"gregor storage format: --cluster-id: {exc}", file=sys.stderr)
        return 2
    except (meta_properties.MetaPropertiesError, OSError) as exc:
        print(f"gregor storage format: {exc}", file=sys.stderr)
        return 1
    if users and dirs[0] in written:
        _write_bootstrap(dirs[0], users)
    for d in written:
        print(f"Formatted {d}: cluster.id={cluster_id} node.id={args.node_id}")
    for d in dirs:
        if d not in written:
            print(f"Skipped {d}: already formatted")
    return 0


def _write_bootstrap(log_dir: str, users: list[object]) -> None:
    from gregor.clock import SYSTEM_CLOCK
    from gregor.controller.quorum_controller import DEFAULT_METADATA_VERSION
    from gregor.metadata import bootstrap

    bootstrap.write(log_dir, users, DEFAULT_METADATA_VERSION, SYSTEM_CLOCK.now_ms())


def scram_record(spec: str) -> object:
    """'SCRAM-SHA-256=[name=alice,password=secret,iterations=8192]' -> its
    UserScramCredentialRecord (the password salted here, never stored); ValueError naming
    what is wrong."""
    import base64
    import binascii
    import secrets

    from gregor.controller.scram_credentials import Upsertion, alter
    from gregor.metadata.image import EMPTY_IMAGE
    from gregor.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, salted_password

    mechanism, eq, rest = spec.partition("=")
    mech = MECHANISMS.get(mechanism.strip().upper())
    if mech is None or not eq or not (rest.startswith("[") and rest.endswith("]")):
        raise ValueError(
            f"expected SCRAM-SHA-256=[name=USER,password=P] or SCRAM-SHA-512=[...], got {spec!r}"
        )
    fields = {}
    for item in rest[1:-1].split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected key=value in {spec!r}, got {item!r}")
        fields[key.strip().lower()] = value.strip().strip('"')
    unknown = set(fields) - {"name", "password", "iterations", "salt"}
    if unknown or not fields.get("name") or not fields.get("password"):
        raise ValueError(f"{spec!r}: give name and password (and optionally iterations, salt)")
    try:
        iterations = int(fields.get("iterations", "4096"))
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else None
    except (ValueError, binascii.Error):
        raise ValueError(f"{spec!r}: iterations is a number, salt base64") from None
    salt = salt or secrets.token_bytes(32)
    in_range = MIN_ITERATIONS <= iterations <= MAX_ITERATIONS  # else refused below, unsalted
    salted = salted_password(mech, fields["password"], salt, iterations) if in_range else b""
    records, [(_user, code, message)] = alter(
        EMPTY_IMAGE, [], [Upsertion(fields["name"], mech.type, iterations, salt, salted)]
    )
    if not records:
        raise ValueError(f"{spec!r}: {message} (error {code})")
    return records[0]
