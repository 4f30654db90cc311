"""`gregor acls list|add|remove`, on confluent-kafka's AdminClient, as `kafka-acls.sh` does.

    gregor acls add --allow-principal User:alice --operation Read --topic orders
    gregor acls add --deny-principal User:bob --deny-host 10.0.0.9 --operation All --group g
    gregor acls add --allow-principal User:app --producer --topic orders --transactional-id tx
    gregor acls add --allow-principal User:app --consumer --topic orders --group g
    gregor acls list [--topic T | --group G | --cluster | --transactional-id X] [--principal P]
    gregor acls remove --allow-principal User:alice --operation Read --topic orders

Resources: --topic, --group, --transactional-id (repeatable) and --cluster. Pattern type:
--resource-pattern-type literal (default) | prefixed, and for list and remove also match | any.
A principal is Type:name; hosts default to `*`; --operation (repeatable) to All. --producer
grants Write, Describe and Create on the topics (Write and Describe on transactional ids, and
IdempotentWrite on the cluster with --idempotent); --consumer Read and Describe on the topics
and Read on the groups. remove deletes the ACLs matching what it is given (every ACL of the
resources when no principal is given), as Kafka's tool with --force (there is no prompt).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, describe
from gregor.security.acls import OPERATION_NAMES, RESOURCE_TYPES, SUPPORTED_OPERATIONS

LIST_JSON = """[{"resource_type": str, "name": str, "pattern_type": str, "principal": str,
  "host": str, "operation": str, "permission": str}, ...]"""
CHANGE_JSON = LIST_JSON + "   (the ACLs added or removed)"
# A filter's "any name / principal / host" (None; confluent-kafka's stubs type them as str).
ANY_VALUE: Any = None
OPERATIONS = (
    "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS",
)  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="list, add and remove ACLs, as kafka-acls.sh")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(
        verbs, "list", "the ACLs of resources (every ACL by default)", list_acls, LIST_JSON
    )
    _resource_args(v, ("literal", "prefixed", "match", "any"))
    v.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME")
    for name, func, help in (
        ("add", add_acls, "add ACLs to resources"),
        ("remove", remove_acls, "remove the ACLs matching the flags"),
    ):
        choices = (
            ("literal", "prefixed") if name == "add" else ("literal", "prefixed", "match", "any")
        )
        v = add_verb(verbs, name, help, func, CHANGE_JSON)
        _resource_args(v, choices)
        _entry_args(v)
        if name == "remove":
            v.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh")


def _resource_args(v: argparse.ArgumentParser, patterns: tuple[str, ...]) -> None:
    v.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    v.add_argument("--group", action="append", default=[], metavar="GROUP")
    v.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    v.add_argument("--cluster", action="store_true", help="the cluster resource")
    v.add_argument(
        "--resource-pattern-type",
        type=str.lower,
        choices=patterns,
        default="literal",
        help="default literal",
    )


def _entry_args(v: argparse.ArgumentParser) -> None:
    v.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    v.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    v.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    v.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    v.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, All (repeatable; default All)",
    )
    v.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    v.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    v.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite")


def _operation(text: str) -> str:
    wanted = text.replace("_", "").replace("-", "").upper()
    for op in OPERATIONS:
        if op.replace("_", "") == wanted:
            return op
    raise CliError(f"unknown operation {text!r}: one of {', '.join(_camel(o) for o in OPERATIONS)}")


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise CliError(f"principal {text!r} is not of the form Type:name (e.g. User:alice)")
    return text


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(resource type name, resource name) of every resource the flags name."""
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("CLUSTER", "kafka-cluster"))
    return out


def _planned(args: argparse.Namespace) -> list[tuple[str, str, str, str, str, str]]:
    """(resource type, name, principal, host, operation, permission) for add and remove."""
    resources = _resources(args)
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries: list[tuple[str, str, str]] = []
    for perm, principals, hosts in (
        ("ALLOW", args.allow_principal, args.allow_host or ["*"]),
        ("DENY", args.deny_principal, args.deny_host or ["*"]),
    ):
        entries += [(_principal(p), h, perm) for p in principals for h in hosts]
    if args.producer or args.consumer:
        return _convenience(args, resources, entries)
    ops = [_operation(o) for o in args.operation] or ["ALL"]
    for rtype, _name in resources:
        supported = {OPERATION_NAMES[op] for op in SUPPORTED_OPERATIONS[RESOURCE_TYPES[rtype]]}
        for op in ops:
            if op != "ALL" and op not in supported:
                raise CliError(
                    f"{rtype} does not support operation {_camel(op)}: one of "
                    f"{', '.join(sorted(_camel(o) for o in supported))} or All"
                )
    return [(rt, n, p, h, op, perm) for rt, n in resources for p, h, perm in entries for op in ops]


def _convenience(
    args: argparse.Namespace, resources: list[tuple[str, str]], entries: list[tuple[str, str, str]]
) -> list[tuple[str, str, str, str, str, str]]:
    """--producer / --consumer: kafka-acls.sh's sets of operations per resource type."""
    by_type: dict[str, tuple[str, ...]] = {}
    if args.producer:
        by_type = {
            "TOPIC": ("WRITE", "DESCRIBE", "CREATE"),
            "TRANSACTIONAL_ID": ("WRITE", "DESCRIBE"),
        }
        if args.idempotent:
            resources = [*resources, ("CLUSTER", "kafka-cluster")]
            by_type["CLUSTER"] = ("IDEMPOTENT_WRITE",)
    if args.consumer:
        if not args.group:
            raise CliError("--consumer needs --group (the group the consumer reads with)")
        by_type.setdefault("TOPIC", ())
        by_type["TOPIC"] = tuple(dict.fromkeys((*by_type["TOPIC"], "READ", "DESCRIBE")))
        by_type["GROUP"] = ("READ",)
    return [
        (rt, n, p, h, op, perm)
        for rt, n in dict.fromkeys(resources)
        for p, h, perm in entries
        for op in by_type.get(rt, ())
    ]


def _rtype(name: str) -> Any:
    """confluent-kafka's ResourceType of a Kafka resource type name (its BROKER is CLUSTER, 4)."""
    from confluent_kafka.admin import ResourceType

    return ResourceType["BROKER" if name == "CLUSTER" else name]


def _doc(b: Any) -> dict[str, str]:
    return {
        "resource_type": "CLUSTER" if b.restype.name == "BROKER" else b.restype.name,
        "name": b.name,
        "pattern_type": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


def _emit(
    args: argparse.Namespace, bindings: list[Any], title: str | None = None, failed: bool = False
) -> None:
    doc = sorted((_doc(b) for b in bindings), key=lambda d: tuple(d.values()))
    columns = [
        "resource type",
        "name",
        "pattern type",
        "principal",
        "host",
        "operation",
        "permission",
    ]
    rows = [list(d.values()) for d in doc]
    table = output.Table(columns, rows, title)
    output.emit(args, doc, [table] if rows or not failed else [])  # no bare header after errors


def list_acls(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    admin = connect.admin(args)
    pattern = ResourcePatternType[args.resource_pattern_type.upper()]
    resources: list[tuple[str, Any]] = _resources(args) or [("ANY", ANY_VALUE)]
    if resources == [("ANY", None)]:
        pattern = ResourcePatternType.ANY
    principals: list[Any] = [_principal(p) for p in args.principal] or [ANY_VALUE]
    found: dict[str, Any] = {}
    for rtype, name in resources:
        for principal in principals:
            flt = AclBindingFilter(
                _rtype(rtype), name, pattern, principal, ANY_VALUE,
                AclOperation.ANY, AclPermissionType.ANY,
            )  # fmt: skip
            for b in admin.describe_acls(flt, request_timeout=args.timeout).result():
                found[str(b)] = b
    _emit(args, list(found.values()))
    return 0


def _binding(args: argparse.Namespace, planned: tuple[str, ...], filter: bool) -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    rtype, name, principal, host, op, perm = planned
    cls = AclBindingFilter if filter else AclBinding
    return cls(
        _rtype(rtype),
        name,
        ResourcePatternType[args.resource_pattern_type.upper()],
        principal,
        host,
        AclOperation[op],
        AclPermissionType[perm],
    )


def _words(b: Any) -> str:
    """An ACL binding (or filter) as a user reads it, in kafka-acls.sh's names: `TOPIC orders
    (LITERAL): principal=User:alice host=* operation=READ permission=ALLOW`; ANY where a filter
    matches any value."""

    def name(value: Any) -> str:
        return "ANY" if value is None else str(getattr(value, "name", value))

    return (
        f"{name(b.restype)} {name(b.name)} ({name(b.resource_pattern_type)}): "
        f"principal={name(b.principal)} host={name(b.host)} operation={name(b.operation)} "
        f"permission={name(b.permission_type)}"
    )


def add_acls(args: argparse.Namespace) -> int:
    planned = _planned(args)
    if not planned:
        raise CliError("name a principal: --allow-principal or --deny-principal")
    admin = connect.admin(args)
    bindings = [_binding(args, p, filter=False) for p in dict.fromkeys(planned)]
    status, added = 0, []
    for binding, fut in admin.create_acls(bindings, request_timeout=args.timeout).items():
        try:
            fut.result()
            added.append(binding)
        except Exception as exc:
            print(f"error: cannot add ACL {_words(binding)}: {describe(exc)}", file=sys.stderr)
            status = 1
    _emit(args, added, "ACLs added", failed=bool(status))
    return status


def remove_acls(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    admin = connect.admin(args)
    if args.allow_principal or args.deny_principal:
        filters = [_binding(args, p, filter=True) for p in dict.fromkeys(_planned(args))]
    else:  # every ACL of the resources
        pattern = ResourcePatternType[args.resource_pattern_type.upper()]
        filters = [
            AclBindingFilter(
                _rtype(rt),
                name,
                pattern,
                ANY_VALUE,
                ANY_VALUE,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
            for rt, name in _resources(args)
        ]
        if not filters:
            raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    status, removed = 0, []
    for flt, fut in admin.delete_acls(filters, request_timeout=args.timeout).items():
        try:
            removed += fut.result()
        except Exception as exc:
            print(
                f"error: cannot remove ACLs matching {_words(flt)}: {describe(exc)}",
                file=sys.stderr,
            )
            status = 1
    _emit(args, removed, "ACLs removed", failed=bool(status))
    return status
