"""`gregor serve`: run a node. With no arguments: one node on 127.0.0.1:9092, data in
./gregor-data (an empty data dir is formatted on the way: meta.properties). `process.roles`
picks what runs: a broker (combined with its controller by default, or broker-only: BrokerServer)
or a controller-only node (ControllerServer). A bad value for a config exits 2; a node that
cannot run as configured (roles, voters, listeners: one line, see `BrokerConfig.membership`), a
data dir of another cluster or node.id, or a pre-KRaft store that cannot be migrated, exits 1.
So does what the user can fix before the start (broker/preflight.py): a --listen port out of
range, a data dir that is a file or cannot be written, a port already in use, a security setting
the node cannot honour (security_settings.py). Every error is one line, `gregor: ...`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from gregor.metadata.config_defs import ConfigError

if TYPE_CHECKING:
    from gregor.broker.config import BrokerConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run a node (broker, controller, or both)")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where the first client listener listens (default 127.0.0.1:9092; port 0 picks one)",
    )
    p.add_argument(
        "--data-dir", metavar="DIR", help="where the logs live (log.dirs; default ./gregor-data)"
    )
    p.add_argument("--config", metavar="FILE", help="a server.properties file")
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="any Kafka broker config (repeatable)",
    )
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve /metrics and /health/* over HTTP here (metrics.listener; port 0 picks one)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument(
        "--ready-file",
        metavar="FILE",
        help="write HOST:PORT here once listening (then NAME://HOST:PORT "
        "for each client listener, when there are several)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gregor.broker.broker import BrokerServer
    from gregor.broker.controller_server import ControllerServer
    from gregor.controller.local import MigrationError
    from gregor.metadata.meta_properties import MetaPropertiesError
    from gregor.metadata.raft_store import MetadataLogError
    from gregor.runtime.process import raise_open_files_limit
    from gregor.runtime.server import install_uvloop

    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    config = _load(args)
    if config is None:
        return 2
    if not _preflight(args, config):
        return 1
    install_uvloop()
    raise_open_files_limit()
    server: BrokerServer | ControllerServer
    try:
        if config.process_roles == {"controller"}:
            server = ControllerServer(config, ready_file=args.ready_file)
        else:
            server = BrokerServer(config, ready_file=args.ready_file)
    except (MetaPropertiesError, MigrationError, MetadataLogError, ConfigError, OSError) as exc:
        _fail(exc)
        return 1
    try:
        asyncio.run(server.run())
    except OSError as exc:
        _fail(exc)
        return 1
    return 0


def _fail(message: object) -> None:
    print(f"gregor: {message}", file=sys.stderr)


def _load(args: argparse.Namespace) -> BrokerConfig | None:
    """The config from --config, --set, --listen and --data-dir; None (after one line) if a
    value is bad."""
    from gregor.broker.config import (
        BrokerConfig,
        listener_name,
        parse_overrides,
        read_properties,
    )

    try:
        overrides = parse_overrides(args.set)
        if args.listen:
            # --listen sets the first client listener; the others and the controller listeners
            # (of --config or --set) stay
            given = {**(read_properties(args.config) if args.config else {}), **overrides}
            names = {
                n.strip().upper()
                for n in given.get("controller.listener.names", "CONTROLLER").split(",")
            }
            specs = [s.strip() for s in given.get("listeners", "").split(",") if s.strip()]
            client = [i for i, s in enumerate(specs) if listener_name(s) not in names]
            if client:  # ... and it keeps its name (its security protocol): SSL://, ...
                name, sep, _ = specs[client[0]].partition("://")
                specs[client[0]] = f"{name.strip() if sep else 'PLAINTEXT'}://{args.listen}"
            else:
                specs.insert(0, f"PLAINTEXT://{args.listen}")
            overrides["listeners"] = ",".join(specs)
        if args.data_dir:
            overrides["log.dirs"] = args.data_dir
        if args.metrics:
            overrides["metrics.listener"] = f"http://{args.metrics}"
        return BrokerConfig.load(args.config, overrides)
    except ConfigError as exc:
        _fail(exc)
    except OSError as exc:  # --config FILE
        _fail(f"--config {args.config}: {exc.strerror or exc}")
    except UnicodeDecodeError:
        _fail(f"--config {args.config}: not a text file")
    return None


def _preflight(args: argparse.Namespace, config: BrokerConfig) -> bool:
    """What the user can fix before anything starts (broker/preflight.py), in one line each."""
    from gregor.broker.preflight import (
        StartError,
        check_listen_address,
        check_log_dirs,
        check_ports_free,
    )

    try:
        if args.listen:
            check_listen_address(args.listen, "--listen")
        config.membership()  # roles, voters, listeners, security settings
        check_log_dirs(config.log_dirs, "--data-dir" if args.data_dir else "log.dirs")
        check_ports_free(config, "--listen HOST:PORT" if args.listen else "listeners")
    except (StartError, ConfigError) as exc:
        _fail(exc)
        return False
    return True
