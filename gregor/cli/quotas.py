"""`gregor quotas describe|alter`: client quotas, as `kafka-configs.sh --entity-type users|clients`
manages them (KIP-546: DescribeClientQuotas and AlterClientQuotas).

    gregor quotas alter --entity-type users --entity-name alice \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    gregor quotas alter --entity-type clients --entity-default --add-config producer_byte_rate=1024
    gregor quotas alter --entity-type users --entity-name alice --entity-type clients \\
        --entity-name app --delete-config producer_byte_rate
    gregor quotas describe [--entity-type users [--entity-name alice | --entity-default]]

An entity is one `--entity-type` (users or clients), or one of each, each followed by its
`--entity-name` or `--entity-default` (`<default>`: every user or client id without a quota of
its own). `describe` with no entity lists every quota; with a type alone, every entity of that
type (with no other part); with names, those entities. Keys: producer_byte_rate and
consumer_byte_rate (bytes per second), request_percentage, controller_mutation_rate.

The requests go over gregor's own protocol client: PLAINTEXT listeners only.
"""

from __future__ import annotations

import argparse
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, error_text

ENTITY_TYPES = {"users": "user", "clients": "client-id"}
TOOL_NAMES = {v: k for k, v in ENTITY_TYPES.items()}
DEFAULT = "<default>"
DESCRIBE_JSON = """[{"entity": [{"type": "users"|"clients", "name": str|null}],
                    "quotas": {KEY: number}}, ...]  (name null: <default>)"""


class _EntityType(argparse.Action):
    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        ns.entities = [*(ns.entities or []), [ENTITY_TYPES[value], False, None]]


class _EntityName(argparse.Action):
    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        last = _last_unnamed(parser, ns, str(opt))
        last[1], last[2] = True, value


class _EntityDefault(argparse.Action):
    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        last = _last_unnamed(parser, ns, str(opt))
        last[1], last[2] = True, None


def _last_unnamed(parser: Any, ns: argparse.Namespace, opt: str) -> list[Any]:
    entities = ns.entities or []
    if not entities or entities[-1][1]:
        parser.error(f"{opt} must follow an --entity-type")
    last: list[Any] = entities[-1]
    return last


def _entity_args(v: argparse.ArgumentParser) -> None:
    v.set_defaults(entities=None)
    v.add_argument(
        "--entity-type", choices=sorted(ENTITY_TYPES), action=_EntityType, help="users or clients"
    )
    v.add_argument("--entity-name", action=_EntityName, help="the user or client id")
    v.add_argument(
        "--entity-default", nargs=0, action=_EntityDefault, help="the default user or client id"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quotas", help="client quotas (byte rates per user and client id)")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(verbs, "describe", "the client quotas set", describe, DESCRIBE_JSON)
    _entity_args(v)
    v = add_verb(verbs, "alter", "set or remove quotas of one entity", alter)
    _entity_args(v)
    v.add_argument("--add-config", metavar="K=V[,K=V...]", help="quotas to set")
    v.add_argument("--delete-config", metavar="K[,K...]", help="quotas to remove")


def _raw(args: argparse.Namespace) -> Any:
    return connect.first_raw(
        args.bootstrap_server, args.timeout, settings=connect.raw_settings(args)
    )


def _entity(args: argparse.Namespace, required: bool) -> list[tuple[str, str | None]] | None:
    entities = args.entities or []
    if not entities:
        if required:
            raise CliError(
                "name the entity: --entity-type users|clients with --entity-name X or --entity-default"
            )
        return None
    types = [t for t, _, _ in entities]
    if len(set(types)) != len(types):
        raise CliError("each --entity-type may be given once")
    if required and not all(named for _, named, _ in entities):
        raise CliError("each --entity-type needs an --entity-name or --entity-default")
    return [(t, n) for t, _, n in entities]


def _parse_add(text: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise CliError(f"--add-config: {item!r} is not KEY=NUMBER") from None
    return out


def alter(args: argparse.Namespace) -> int:
    from gregor.protocol import api_keys
    from gregor.protocol.messages import AlterClientQuotasRequest as A

    entity = _entity(args, required=True)
    assert entity is not None
    added = _parse_add(args.add_config)
    deleted = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not added and not deleted:
        raise CliError("nothing to change: give --add-config and/or --delete-config")
    ops = [A.OpData(key=k, value=v, remove=False) for k, v in added.items()]
    ops += [A.OpData(key=k, value=0.0, remove=True) for k in deleted]
    request = A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity], ops=ops
            )
        ],
        validate_only=False,
    )
    conn = _raw(args)
    try:
        response = connect.call(conn, api_keys.ALTER_CLIENT_QUOTAS, request, args.bootstrap_server)
    finally:
        conn.close()
    [entry] = response.entries
    if entry.error_code:
        raise CliError(
            f"cannot alter the quotas of {_text(entity)}: {error_text(entry.error_code, entry.error_message)}"
        )
    print(f"altered the quotas of {_text(entity)}")
    return 0


def _text(entity: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"{TOOL_NAMES.get(t, t)} {DEFAULT if n is None else n}" for t, n in entity)


def describe(args: argparse.Namespace) -> int:
    from gregor.protocol import api_keys
    from gregor.protocol.messages import DescribeClientQuotasRequest as D

    entity = _entity(args, required=False) or []
    components = [
        D.ComponentData(entity_type=t, match_type=0, match=n)
        if named and n is not None
        else D.ComponentData(entity_type=t, match_type=1 if named else 2, match=None)
        for (t, named, n) in (args.entities or [])
    ]
    request = D(components=components, strict=bool(entity))
    conn = _raw(args)
    try:
        response = connect.call(
            conn, api_keys.DESCRIBE_CLIENT_QUOTAS, request, args.bootstrap_server
        )
    finally:
        conn.close()
    if response.error_code:
        raise CliError(
            f"cannot describe quotas: {error_text(response.error_code, response.error_message)}"
        )
    doc: list[dict[str, Any]] = [
        {
            "entity": [
                {"type": TOOL_NAMES.get(e.entity_type, e.entity_type), "name": e.entity_name}
                for e in sorted(entry.entity, key=lambda e: e.entity_type, reverse=True)
            ],
            "quotas": {v.key: _number(v.value) for v in entry.values},
        }
        for entry in response.entries or []
    ]
    rows = [
        [
            ", ".join(
                f"{p['type']} {DEFAULT if p['name'] is None else p['name']}" for p in d["entity"]
            ),
            key,
            value,
        ]
        for d in doc
        for key, value in sorted(d["quotas"].items())
    ]
    title = None if rows else "no client quotas"
    output.emit(args, doc, [output.Table(["entity", "quota", "value"], rows, title=title)])
    return 0


def _number(value: float) -> float | int:
    return int(value) if value == int(value) else value
