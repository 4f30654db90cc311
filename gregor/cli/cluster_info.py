"""`gregor cluster info`: the cluster id, the active controller and every broker with its rack,
as `rpk cluster info` shows them.

The brokers and the cluster id come from DescribeCluster. Its controller id is, in a KRaft
cluster as in Kafka's, only a live broker for clients to send admin requests to, so the active
controller is asked of the metadata quorum (DescribeQuorum's leader) instead.
"""

from __future__ import annotations

import argparse

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError
from gregor.cli.quorum import fetch_quorum

INFO_JSON = """{"cluster_id": str, "controller_id": int|null,
 "brokers": [{"id": int, "host": str, "port": int, "rack": str|null}]}"""


def register_verb(verbs: argparse._SubParsersAction) -> None:
    add_verb(verbs, "info", "cluster id, controller, brokers and racks", info, INFO_JSON)


def info(args: argparse.Namespace) -> int:
    admin = connect.admin(args)
    d = admin.describe_cluster(request_timeout=args.timeout).result()
    try:
        controller: int | None = fetch_quorum(
            args.bootstrap_server, int(args.timeout * 1000), connect.raw_settings(args)
        ).leader_id
    except CliError:
        controller = d.controller.id if d.controller is not None else None
    brokers = [
        {"id": n.id, "host": n.host, "port": n.port, "rack": n.rack or None}
        for n in sorted(d.nodes, key=lambda n: n.id)
    ]
    doc = {"cluster_id": d.cluster_id, "controller_id": controller, "brokers": brokers}
    rows = [[b["id"], b["host"], b["port"], b["rack"], b["id"] == controller] for b in brokers]
    output.emit(
        args,
        doc,
        [
            output.Fields([("cluster id", d.cluster_id), ("controller", controller)]),
            output.Table(["id", "host", "port", "rack", "controller"], rows),
        ],
    )
    return 0
