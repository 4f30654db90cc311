"""`gregor configs describe|alter|delete --entity-type topics|brokers|broker-defaults
[--entity-name X]`: topic configs and dynamic broker configs, as `kafka-configs.sh` does.

    gregor configs describe --entity-type topics --entity-name orders [--all]
    gregor configs alter --entity-type brokers --entity-name 1 --add-config log.retention.ms=3600000
    gregor configs delete --entity-type broker-defaults --delete-config log.retention.ms

Without --all, describe shows what was set on the entity itself (a topic's overrides, a broker's
dynamic configs, the dynamic cluster-wide broker defaults), as Kafka's tool does. Asked with our
own codec (DescribeConfigs, IncrementalAlterConfigs) because confluent-kafka cannot name the
broker defaults (the empty broker name); a broker's own configs are asked of that broker.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, error_text

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
# DescribeConfigs' config_source codes, by the names Kafka's tool prints.
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
# What describe shows without --all: what was set on the entity itself.
OWN_SOURCE = {"topics": 1, "brokers": 2, "broker-defaults": 3}
DESCRIBE_JSON = """[{"entity_type": "topics"|"brokers"|"broker-defaults", "entity_name": str,
  "configs": [{"name": str, "value": str|null, "source": str, "read_only": bool,
               "sensitive": bool}]}, ...]     (a sensitive value is null)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="describe and change topic and broker configs")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = add_verb(
        verbs,
        "describe",
        "an entity's configs (its own settings; --all: every)",
        describe,
        DESCRIBE_JSON,
    )
    _entity_args(v, name_required=False)
    v.add_argument("--all", action="store_true", help="every config, with where its value is from")
    v = add_verb(verbs, "alter", "set configs (and delete others) on an entity", alter)
    _entity_args(v, name_required=True)
    v.add_argument("--add-config", metavar="K=V,K2=[A,B],...", default="")
    v.add_argument("--delete-config", metavar="K,K2,...", default="")
    v = add_verb(verbs, "delete", "remove configs from an entity (back to the default)", alter)
    _entity_args(v, name_required=True)
    v.add_argument("--delete-config", metavar="K,K2,...", required=True)
    v.set_defaults(add_config="")


def _entity_args(v: argparse.ArgumentParser, *, name_required: bool) -> None:
    v.add_argument("--entity-type", required=True, choices=sorted(OWN_SOURCE))
    need = " (not for broker-defaults)" if name_required else " (brokers: every broker if omitted)"
    v.add_argument("--entity-name", metavar="NAME", help="topic name or broker id" + need)


def split_configs(text: str) -> list[str]:
    """'a=1,b=[x,y],c=2' -> ['a=1', 'b=x,y', 'c=2']: commas inside [...] belong to the value."""
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        current += ch
    items.append(current)
    out = []
    for item in (i.strip() for i in items):
        if item:
            key, sep, value = item.partition("=")
            if sep and value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out.append(f"{key}{sep}{value}")
    return out


def _targets(args: argparse.Namespace, conn_admin: Any) -> list[tuple[int, str, str]]:
    """(resource type, resource name, address to ask) for the entity named on the command line."""
    brokers = connect.brokers(conn_admin, args.timeout)
    any_address = next(iter(sorted(brokers.items())))[1] if brokers else args.bootstrap_server
    if args.entity_type == "broker-defaults":
        if args.entity_name:
            raise CliError("--entity-type broker-defaults takes no --entity-name")
        return [(BROKER, "", any_address)]
    if args.entity_type == "topics":
        if not args.entity_name:
            raise CliError("--entity-type topics needs --entity-name TOPIC")
        return [(TOPIC, args.entity_name, any_address)]
    if not args.entity_name:
        return [(BROKER, str(i), brokers[i]) for i in sorted(brokers)]
    try:
        node = int(args.entity_name)
    except ValueError:
        raise CliError(
            f"--entity-name for brokers is a broker id, e.g. 1; got {args.entity_name!r}"
        ) from None
    if node not in brokers:
        raise CliError(
            f"no broker {node} in the cluster (brokers: {', '.join(map(str, sorted(brokers)))})"
        )
    return [(BROKER, str(node), brokers[node])]


def _label(resource_type: int, name: str) -> str:
    if resource_type == TOPIC:
        return name
    return f"broker {name}" if name else "the broker defaults"


def _entries(configs: list[Any], own: int | None) -> list[dict[str, Any]]:
    """Every config (`own` None), or those set on the entity itself: a config or one of its
    synonyms whose source is `own` (describing the broker defaults, a broker's own dynamic
    setting of a config comes first, its default setting among the synonyms)."""
    out = []
    for c in sorted(configs, key=lambda c: c.name):
        value, source = c.value, c.config_source
        if own is not None and source != own:
            synonym = next((s for s in getattr(c, "synonyms", []) if s.source == own), None)
            if synonym is None:
                continue
            value, source = synonym.value, synonym.source
        out.append(
            {
                "name": c.name,
                "value": None if c.is_sensitive else value,
                "source": SOURCES.get(source, "UNKNOWN"),
                "read_only": bool(c.read_only),
                "sensitive": bool(c.is_sensitive),
            }
        )
    return out


def describe(args: argparse.Namespace) -> int:
    from gregor.protocol import api_keys, errors
    from gregor.protocol.messages import DescribeConfigsRequest

    targets = _targets(args, connect.admin(args))
    doc, blocks, status = [], [], 0
    for resource_type, name, address in targets:
        conn = connect.raw(address, args.timeout, settings=connect.raw_settings(args))
        try:
            request = DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=resource_type, resource_name=name, configuration_keys=None
                    )
                ],
                include_synonyms=True,
            )
            [result] = connect.call(conn, api_keys.DESCRIBE_CONFIGS, request, address).results
        finally:
            conn.close()
        if result.error_code != errors.NONE:
            why = error_text(result.error_code, result.error_message)
            print(
                f"error: cannot describe configs of {_label(resource_type, name)}: {why}",
                file=sys.stderr,
            )
            status = 1
            continue
        configs = _entries(result.configs, None if args.all else OWN_SOURCE[args.entity_type])
        doc.append({"entity_type": args.entity_type, "entity_name": name, "configs": configs})
        rows = [
            [c["name"], "(sensitive)" if c["sensitive"] else c["value"], c["source"]]
            for c in configs
        ]
        title = f"configs of {_label(resource_type, name)}" + ("" if rows else ": none set")
        blocks.append(output.Table(["name", "value", "source"], rows, title=title))
    output.emit(args, doc, blocks)
    return status


def alter(args: argparse.Namespace) -> int:
    from gregor.protocol import api_keys, errors
    from gregor.protocol.messages import IncrementalAlterConfigsRequest as Req

    ops: list[Any] = []
    for item in split_configs(args.add_config):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(
                f"--add-config expects KEY=VALUE[,KEY=VALUE], e.g. --add-config retention.ms=86400000; got {item!r}"
            )
        ops.append(Req.AlterableConfig(name=key, config_operation=SET, value=value))
    for key in split_configs(args.delete_config):
        ops.append(Req.AlterableConfig(name=key, config_operation=DELETE, value=None))
    if not ops:
        raise CliError("nothing to change: give --add-config K=V or --delete-config K")
    [(resource_type, name, address)] = _targets(args, connect.admin(args))
    request = Req(
        resources=[
            Req.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=ops)
        ],
        validate_only=False,
    )
    conn = connect.raw(address, args.timeout, settings=connect.raw_settings(args))
    try:
        [result] = connect.call(
            conn, api_keys.INCREMENTAL_ALTER_CONFIGS, request, address
        ).responses
    finally:
        conn.close()
    label = _label(resource_type, name)
    if result.error_code != errors.NONE:
        why = error_text(result.error_code, result.error_message)
        print(f"error: cannot alter configs of {label}: {why}", file=sys.stderr)
        return 1
    print(f"altered configs of {label}")
    return 0
