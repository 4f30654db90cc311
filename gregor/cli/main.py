"""The `gregor` command: builds the parser from each command module, runs the chosen command,
and turns failures into one line on stderr and an exit status: 1 for an error (a CliError from
any command; any exception of a client command, whose traceback --verbose shows), 2 for a usage
mistake, 130 for Ctrl-C, 0 when a reader such as `head` closed stdout early."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from typing import NoReturn

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


# The command modules, in the order of `gregor --help`.
COMMANDS = (
    "serve",
    "topics",
    "clients",
    "groups",
    "acls",
    "dump_log",
    "storage",
    "quorum",
    "cluster",
    "configs",
    "offsets",
    "records",
    "log_dirs",
    "leader_election",
    "perf",
    "hlc",
    "mirror",
    "users",
    "quotas",
    "console",
)
# Long-running commands whose start-up should not pay for importing every other command
# (the broker's storage and protocol modules, say): `gregor mirror ...` builds its own parser.
ALONE = frozenset({"mirror"})


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the one command `only`."""
    parser = _Parser(prog="gregor", description="Apache Kafka, rebuilt in Python.")
    parser.add_argument("--version", action="version", version=f"gregor {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"gregor.cli.{name}").register(sub)
    if only is None:
        from gregor.cli import completion

        completion.register(sub, parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = None
    _closed_std_fds_to_devnull()
    try:
        words = sys.argv[1:] if argv is None else argv
        only = words[0] if words and words[0] in ALONE else None
        args = (build_parser(only) if only else build_parser()).parse_args(argv)
        return int(args.func(args) or 0)
    except BrokenPipeError:
        _stdout_to_devnull()
        return 0
    except KeyboardInterrupt:
        return 130
    except CliError as exc:
        return _fail(f"gregor: {exc}")
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
            _stdout_to_devnull()  # (else the flush at exit fails once more)
            where = f" {exc.filename}" if exc.filename else ""
            return _fail(f"gregor: cannot write{where}: {(exc.strerror or str(exc)).lower()}")
        if not hasattr(args, "verbose"):
            raise  # not a client command (serve, dump-log, ...): its own failures, its traceback
        if getattr(args, "verbose", False):
            traceback.print_exc()
        name = type(exc).__name__
        if name == "KafkaException":
            return _fail(f"gregor: {describe(exc)}")
        return _fail(f"gregor: {name}: {describe(exc)} (--verbose shows where)")


# A write that failed for want of room or of a working device (`gregor ... > /dev/full`): said in
# one line by every command, with no traceback.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _fail(line: str) -> int:
    try:
        print(line, file=sys.stderr)
    except OSError:
        pass
    return 1


def _closed_std_fds_to_devnull() -> None:
    """Started with stdin, stdout or stderr closed (`gregor topics list >&-`): that descriptor
    becomes /dev/null, so what would be printed goes nowhere and exits 0 as with a closed pipe,
    and no socket of the client can take the descriptor number and receive the output."""
    modes = (
        (sys.stdin, "r", os.O_RDONLY),
        (sys.stdout, "w", os.O_WRONLY),
        (sys.stderr, "w", os.O_WRONLY),
    )
    for fd, (stream, mode, flags) in enumerate(modes):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        devnull = os.open(os.devnull, flags)
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)
        if stream is None:
            setattr(sys, ("stdin", "stdout", "stderr")[fd], open(fd, mode, closefd=False))


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
