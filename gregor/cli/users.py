"""`gregor users scram set|describe|delete`: users' SCRAM credentials, as `kafka-configs.sh
--entity-type users` manages them (KIP-554), through confluent-kafka's AdminClient.

    gregor users scram set alice --mechanism SCRAM-SHA-256 --password alice-secret [--iterations 8192]
    gregor users scram describe [alice ...]
    gregor users scram delete alice --mechanism SCRAM-SHA-512

`set` adds or replaces the user's credential for one mechanism: the client salts the password
(a random salt, PBKDF2 with `--iterations`, 4096 by default as Kafka's tool) and sends only the
salted password, from which the controller keeps the stored and server keys. Without
`--password` the password is read from the first line of stdin, so it need not appear in the
process list. `describe` shows each user's mechanisms and iteration counts, never a secret.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, describe

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default
DESCRIBE_JSON = """[{"user": str, "credentials": [{"mechanism": "SCRAM-SHA-256"|"SCRAM-SHA-512",
                    "iterations": int}]}, ...]"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="users' SCRAM credentials (SASL/SCRAM logins)")
    kinds = p.add_subparsers(dest="kind", required=True)
    scram = kinds.add_parser("scram", help="set, describe and delete SCRAM credentials")
    verbs = scram.add_subparsers(dest="verb", required=True)
    v = add_verb(verbs, "set", "add or replace a user's credential for one mechanism", set_)
    v.add_argument("user")
    v.add_argument("--mechanism", required=True, choices=MECHANISMS)
    v.add_argument("--password", help="the password (default: the first line of stdin)")
    v.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, 4096-16384 (default {DEFAULT_ITERATIONS})",
    )
    v = add_verb(verbs, "describe", "users' mechanisms and iterations", describe_, DESCRIBE_JSON)
    v.add_argument("users", nargs="*", metavar="USER", help="(default: every user)")
    v = add_verb(verbs, "delete", "remove a user's credential for one mechanism", delete)
    v.add_argument("user")
    v.add_argument("--mechanism", required=True, choices=MECHANISMS)


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def _name(mechanism: Any) -> str:
    return str(mechanism.name).replace("_", "-")


def _why(exc: Exception) -> str:
    """The error's text, without the stray control byte librdkafka leaves at the end of some
    SCRAM error messages."""
    return "".join(ch for ch in describe(exc) if ch.isprintable())


def _alter(args: argparse.Namespace, alteration: Any, done: str) -> int:
    admin = connect.admin(args)
    [future] = admin.alter_user_scram_credentials(
        [alteration], request_timeout=args.timeout
    ).values()
    try:
        future.result()
    except Exception as exc:
        print(
            f"error: cannot {args.verb} the credential of user {args.user}: {_why(exc)}",
            file=sys.stderr,
        )
        return 1
    print(done)
    return 0


def set_(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    password = args.password
    if password is None:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("an empty password: give --password P or the password on stdin")
    if not args.user:
        raise CliError("the user name must not be empty")
    info = ScramCredentialInfo(_mechanism(args.mechanism), args.iterations)
    upsertion = UserScramCredentialUpsertion(args.user, info, password.encode())
    return _alter(args, upsertion, f"set the {args.mechanism} credential of user {args.user}")


def delete(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import UserScramCredentialDeletion

    deletion = UserScramCredentialDeletion(args.user, _mechanism(args.mechanism))
    return _alter(args, deletion, f"deleted the {args.mechanism} credential of user {args.user}")


def describe_(args: argparse.Namespace) -> int:
    admin = connect.admin(args)
    status = 0
    found: dict[str, Any] = {}
    if args.users:
        futures = admin.describe_user_scram_credentials(args.users, request_timeout=args.timeout)
        for user, future in futures.items():
            try:
                found[user] = future.result()
            except Exception as exc:
                print(f"error: user {user}: {_why(exc)}", file=sys.stderr)
                status = 1
    else:
        found = admin.describe_user_scram_credentials(request_timeout=args.timeout).result()
    doc: list[dict[str, Any]] = [
        {
            "user": user,
            "credentials": [
                {"mechanism": _name(i.mechanism), "iterations": i.iterations}
                for i in sorted(
                    found[user].scram_credential_infos, key=lambda i: _name(i.mechanism)
                )
            ],
        }
        for user in sorted(found)
    ]
    rows = [[d["user"], c["mechanism"], c["iterations"]] for d in doc for c in d["credentials"]]
    title = None if rows else "no SCRAM credentials"
    output.emit(args, doc, [output.Table(["user", "mechanism", "iterations"], rows, title=title)])
    return status
