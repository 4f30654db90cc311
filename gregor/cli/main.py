"""The `gregor` command."""

from __future__ import annotations

import argparse
import sys

from gregor.cli import clients, cluster, dump_log, groups, perf, quorum, serve, storage, topics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gregor", description="Apache Kafka, rebuilt in Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve.register(sub)
    topics.register(sub)
    clients.register(sub)
    groups.register(sub)
    dump_log.register(sub)
    storage.register(sub)
    quorum.register(sub)
    cluster.register(sub)
    perf.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
