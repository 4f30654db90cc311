"""`gregor console -b HOST:PORT [--listen 127.0.0.1:8080] [--allow-writes]`: the web console
(gregor/console) of any Kafka-protocol cluster, until Ctrl-C or SIGTERM.

The bootstrap is checked before the console listens (an unreachable cluster is one line, exit
status 1), and so is the listen address (port 0 picks a free one). Once listening it prints one
line, the console's URL, and serves. Read-only unless --allow-writes (produce records, edit
topic configs, reset an empty group's offsets); --command-config gives client settings, and
with --login each browser user signs in with SASL credentials of their own (console/login.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from gregor.cli import connect
from gregor.cli.errors import CliError
from gregor.cli.specs import positive_seconds

DEFAULT_LISTEN = "127.0.0.1:8080"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("console", help="a web console of any Kafka cluster (read-only by default)")
    connect.add_client_args(p)
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where the console listens (default {DEFAULT_LISTEN}; port 0 picks a free one)",
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="allow producing records, editing topic configs and resetting an empty group's "
        "offsets (as console.read.only=false in a node)",
    )
    p.add_argument(
        "--login",
        action="store_true",
        help="each browser user signs in with SASL credentials of their own (the rest of "
        "the client settings, e.g. security.protocol and TLS, from --command-config)",
    )
    p.add_argument(
        "--sample-interval",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how often rates and lag are sampled (default 5)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gregor.console.server import ConsoleServer, bind
    from gregor.console.settings import ConsoleSettings, parse_listen

    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        raise CliError(f"--listen {exc}") from None
    extra = connect.read_properties(args.command_config) if args.command_config else {}
    if not args.login:  # the cluster answers (else one line naming why)
        connect.admin(args)
    settings = ConsoleSettings(
        args.bootstrap_server,
        client_config=extra,
        read_only=not args.allow_writes,
        sample_interval_s=args.sample_interval,
        request_timeout_s=args.timeout,
        verbose=args.verbose,
        login=args.login,
    )
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise CliError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): change --listen"
        ) from None
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    server = ConsoleServer(settings, sock, own_signals=True)
    print(server.url, flush=True)
    asyncio.run(server.serve())
    return 0
