"""The `gregor` command: builds the parser from each command module, runs the chosen command,
and turns failures into one line on stderr and an exit status: 1 for an error (a CliError from
any command; any exception of a client command, whose traceback --verbose shows), 2 for a usage
mistake, 130 for Ctrl-C, 0 when a reader such as `head` closed stdout early."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import NoReturn

from gregor.cli import (
    clients,
    cluster,
    completion,
    configs,
    dump_log,
    groups,
    hlc,
    leader_election,
    log_dirs,
    mirror,
    offsets,
    perf,
    quorum,
    quotas,
    records,
    serve,
    storage,
    topics,
    users,
)
from gregor.cli.errors import CliError, describe


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("gregor")
    except metadata.PackageNotFoundError:
        from gregor import __version__

        return __version__


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line naming the command and where its help is (exit status 2);
    every sub-command's parser is of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gregor", description="Apache Kafka, rebuilt in Python.")
    parser.add_argument("--version", action="version", version=f"gregor {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve.register(sub)
    topics.register(sub)
    clients.register(sub)
    groups.register(sub)
    dump_log.register(sub)
    storage.register(sub)
    quorum.register(sub)
    cluster.register(sub)
    configs.register(sub)
    offsets.register(sub)
    records.register(sub)
    log_dirs.register(sub)
    leader_election.register(sub)
    perf.register(sub)
    hlc.register(sub)
    mirror.register(sub)
    users.register(sub)
    quotas.register(sub)
    completion.register(sub, parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = None
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except BrokenPipeError:
        _stdout_to_devnull()
        return 0
    except KeyboardInterrupt:
        return 130
    except CliError as exc:
        return _fail(f"gregor: {exc}")
    except Exception as exc:
        if not hasattr(args, "verbose"):
            raise  # not a client command (serve, dump-log, ...): its own failures, its traceback
        if getattr(args, "verbose", False):
            traceback.print_exc()
        name = type(exc).__name__
        if name == "KafkaException":
            return _fail(f"gregor: {describe(exc)}")
        return _fail(f"gregor: {name}: {describe(exc)} (--verbose shows where)")


def _fail(line: str) -> int:
    try:
        print(line, file=sys.stderr)
    except OSError:
        pass
    return 1


def _stdout_to_devnull() -> None:
    """The reader is gone: what is still buffered for stdout goes nowhere, quietly (else Python
    reports another broken pipe when it flushes stdout at exit)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
