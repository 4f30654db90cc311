"""`gregor cluster health`: is the cluster healthy, and if not why, as `rpk cluster health`.

The I/O around health.decide: Metadata (every partition's leader, replicas and ISR) through
confluent-kafka, and with our own codec DescribeCluster v2 (fenced brokers too, when the server
speaks it) and DescribeQuorum (each voter's and observer's fetch position and times). Exit
status 0 when healthy, 1 when not, 1 with one line on stderr when the cluster cannot be reached.
`--watch` checks again every `--interval` until interrupted, or with `--exit-when-healthy`
until healthy; a round that cannot reach the cluster says so on stderr and the watch goes on.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from gregor.cli import connect, output, quorum
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError
from gregor.cli.health import Broker, Facts, Health, Partition, Quorum, QuorumReplica, decide
from gregor.cli.specs import positive_seconds

CLIENT_ID = "gregor-health"
DEFAULT_VOTER_FETCH_TIMEOUT_S = 5.0
DEFAULT_INTERVAL_S = 2.0

HEALTH_JSON = """{"is_healthy": bool, "unhealthy_reasons": [str],
 "not_checked": [str],          (what this server would not tell: the check is partial)
 "controller_id": int|null,     (the metadata quorum's leader)
 "all_nodes": [int], "nodes_down": [int],
 "nodes": [{"id": int, "host": str|null, "port": int|null,
            "roles": ["broker"|"voter"|"observer"], "fenced": bool|null,
            "down": bool, "why": str|null}],
 "leaderless_count": int,
 "leaderless_partitions": [{"topic": str, "partition": int, "replicas": [int], "isr": [int]}],
 "under_replicated_count": int,
 "under_replicated_partitions": [{"topic": str, "partition": int, "leader": int,
                                  "replicas": [int], "isr": [int]}],
 "quorum": {"leader_id": int, "leader_epoch": int, "high_watermark": int,
            "replicas": [{"node": int, "role": "Leader"|"Follower"|"Observer",
                          "log_end_offset": int, "lag": int|null,
                          "last_fetch_timestamp": int|null,
                          "last_caught_up_timestamp": int|null}]}|null
}   (timestamps: ms since the epoch, the quorum leader's clock; with --watch, one
     document per line, once per round)"""

WHAT_COUNTS = """Healthy: no node down, every partition led with its whole replica set in the ISR, and a
metadata quorum leader that every voter fetches from and has caught up with within the voter
fetch timeout. A node is down when it is a registered broker that is fenced (DescribeCluster
v2, Kafka 4), a partition's replica that is not a live registered broker, or a voter that has
not fetched from the quorum's leader within the voter fetch timeout (or since the leader was
elected). DescribeCluster and DescribeQuorum are asked with gregor's own codec, secured as
--command-config says; what a server will not answer is listed under "not_checked". Exit status: 0 healthy, 1 unhealthy or unreachable (--watch: 0 once healthy with
--exit-when-healthy, 130 on Ctrl-C; an unreachable round is one line on stderr)."""


def register_verb(verbs: argparse._SubParsersAction) -> None:
    v = add_verb(
        verbs,
        "health",
        "healthy or not, and why: nodes down, leaderless and under-replicated partitions, "
        "quorum lag",
        health,
        HEALTH_JSON,
    )
    v.description = WHAT_COUNTS
    v.add_argument(
        "--watch",
        "-w",
        action="store_true",
        help="check again every --interval until interrupted",
    )
    v.add_argument(
        "--exit-when-healthy",
        "-e",
        action="store_true",
        help="watch until the cluster is healthy, then exit 0 (implies --watch)",
    )
    v.add_argument(
        "--interval",
        type=positive_seconds,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"time between checks with --watch (default {DEFAULT_INTERVAL_S:g})",
    )
    v.add_argument(
        "--voter-fetch-timeout",
        type=positive_seconds,
        default=DEFAULT_VOTER_FETCH_TIMEOUT_S,
        metavar="SECONDS",
        help="a voter that has not fetched from the quorum's leader (or not caught up with it) "
        f"for this long counts against health (default {DEFAULT_VOTER_FETCH_TIMEOUT_S:g})",
    )


def health(args: argparse.Namespace) -> int:
    if not (args.watch or args.exit_when_healthy):
        found = check(args)
        output.emit(args, to_json(found), blocks(found))
        return 0 if found.healthy else 1
    return _watch(args)


def _watch(args: argparse.Namespace) -> int:
    """Check every --interval; 0 once healthy with --exit-when-healthy, 130 on Ctrl-C. Ctrl-C
    only sets a flag, seen between rounds and while waiting: raised inside the client library's
    calls it would come out as a SystemError instead."""
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        while not interrupted:
            try:
                found = check(args)
            except CliError as exc:
                print(f"gregor: {exc}", file=sys.stderr, flush=True)
            else:
                _show_round(args, found)
                if found.healthy and args.exit_when_healthy:
                    return 0
            wake = time.monotonic() + args.interval
            while not interrupted and time.monotonic() < wake:
                time.sleep(min(0.1, max(0.0, wake - time.monotonic())))
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)


def _show_round(args: argparse.Namespace, found: Health) -> None:
    if output.chosen(args) == "json":
        output.print_json_line(to_json(found))
        sys.stdout.flush()
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    print(f"--- {stamp}", flush=True)
    output.emit(args, to_json(found), blocks(found))


def check(args: argparse.Namespace) -> Health:
    """Gather the facts (a CliError when the cluster cannot be reached) and decide."""
    admin = connect.admin(args)
    md = admin.list_topics(timeout=args.timeout)
    partitions = tuple(
        Partition(t.topic, p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
        for t in md.topics.values()
        for p in t.partitions.values()
    )
    timeout_ms = int(args.timeout * 1000)
    settings = connect.raw_settings(args)
    brokers = _brokers(args.bootstrap_server, timeout_ms, settings)
    if brokers is None:
        brokers = tuple(Broker(b.id, b.host, b.port, None) for b in md.brokers.values())
    facts = _with_quorum(
        Facts(brokers, partitions, None), args.bootstrap_server, timeout_ms, settings
    )
    return decide(facts, int(args.voter_fetch_timeout * 1000))


def _brokers(
    bootstrap: str, timeout_ms: int, settings: dict[str, str]
) -> tuple[Broker, ...] | None:
    """Every registered broker, fenced ones too when the server speaks DescribeCluster v2;
    None when DescribeCluster cannot be asked."""
    from gregor.protocol import api_keys, errors
    from gregor.protocol.messages import DescribeClusterRequest

    request = DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
    )
    try:
        conn = connect.first_raw(bootstrap, timeout_ms / 1000, CLIENT_ID, settings)
    except CliError:
        return None
    try:
        answer = connect.call(conn, api_keys.DESCRIBE_CLUSTER, request, bootstrap)
        version = conn.api_versions[api_keys.DESCRIBE_CLUSTER].max_version
    except (CliError, OSError, RuntimeError, ValueError):
        return None
    finally:
        conn.close()
    if answer.error_code != errors.NONE:
        return None
    fenced_known = min(version, api_keys.BY_KEY[api_keys.DESCRIBE_CLUSTER].max_version) >= 2
    return tuple(
        Broker(b.broker_id, b.host, b.port, bool(b.is_fenced) if fenced_known else None)
        for b in answer.brokers
    )


def _with_quorum(facts: Facts, bootstrap: str, timeout_ms: int, settings: dict[str, str]) -> Facts:
    from dataclasses import replace

    try:
        part = quorum.fetch_quorum(bootstrap, timeout_ms, settings)
    except quorum.QuorumNotServed as exc:
        return replace(facts, quorum_not_asked=str(exc))
    except CliError as exc:
        return replace(facts, quorum_error=f"not described ({exc})")
    return replace(facts, quorum=quorum_facts(part, int(time.time() * 1000)))


def quorum_facts(part: Any, local_now_ms: int) -> Quorum:
    """A DescribeQuorum partition as facts; the leader's own last fetch is its clock when it
    answered (Kafka's leader and ours report themselves fetching now), else `local_now_ms`."""

    def stamp(v: Any, name: str) -> int | None:
        found = getattr(v, name, -1)
        return found if found >= 0 else None

    replicas = tuple(
        QuorumReplica(
            v.replica_id,
            voter,
            v.log_end_offset,
            stamp(v, "last_fetch_timestamp"),
            stamp(v, "last_caught_up_timestamp"),
        )
        for group, voter in ((part.current_voters, True), (part.observers, False))
        for v in group
    )
    leader = next((r for r in replicas if r.voter and r.node == part.leader_id), None)
    now_ms = local_now_ms
    if leader is not None and leader.last_fetch_timestamp is not None:
        now_ms = leader.last_fetch_timestamp
    return Quorum(part.leader_id, part.leader_epoch, part.high_watermark, replicas, now_ms)


def to_json(h: Health) -> dict[str, Any]:
    def part(p: Partition, leader: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"topic": p.topic, "partition": p.partition}
        if leader:
            doc["leader"] = p.leader
        return {**doc, "replicas": list(p.replicas), "isr": list(p.isr)}

    q = h.quorum
    return {
        "is_healthy": h.healthy,
        "unhealthy_reasons": list(h.reasons),
        "not_checked": list(h.not_checked),
        "controller_id": h.controller_id,
        "all_nodes": [n.id for n in h.nodes],
        "nodes_down": h.nodes_down,
        "nodes": [
            {
                "id": n.id,
                "host": n.host,
                "port": n.port,
                "roles": list(n.roles),
                "fenced": n.fenced,
                "down": n.down,
                "why": n.why,
            }
            for n in h.nodes
        ],
        "leaderless_count": len(h.leaderless),
        "leaderless_partitions": [part(p, False) for p in h.leaderless],
        "under_replicated_count": len(h.under_replicated),
        "under_replicated_partitions": [part(p, True) for p in h.under_replicated],
        "quorum": None
        if q is None
        else {
            "leader_id": q.leader_id,
            "leader_epoch": q.leader_epoch,
            "high_watermark": q.high_watermark,
            "replicas": [vars(lag).copy() for lag in h.quorum_lag],
        },
    }


def blocks(h: Health) -> list[output.Block]:
    ids = ",".join(str(n.id) for n in h.nodes) or None
    down = ",".join(str(i) for i in h.nodes_down) or None
    out: list[output.Block] = [
        output.Fields(
            [
                ("healthy", h.healthy),
                ("controller", h.controller_id),
                ("all nodes", ids),
                ("nodes down", down),
                ("leaderless partitions", len(h.leaderless)),
                ("under-replicated partitions", len(h.under_replicated)),
            ]
        )
    ]
    if h.reasons:
        out.append(output.Table(["unhealthy reason"], [[r] for r in h.reasons]))
    if h.not_checked:
        out.append(output.Table(["not checked"], [[r] for r in h.not_checked]))
    out.append(
        output.Table(
            ["node", "host", "port", "roles", "fenced", "down", "why"],
            [[n.id, n.host, n.port, ",".join(n.roles), n.fenced, n.down, n.why] for n in h.nodes],
        )
    )
    for title, parts in (("leaderless", h.leaderless), ("under-replicated", h.under_replicated)):
        if parts:
            rows = [[p.topic, p.partition, p.leader, _ids(p.replicas), _ids(p.isr)] for p in parts]
            columns = ["topic", "partition", "leader", "replicas", "isr"]
            out.append(output.Table(columns, rows, title=f"{title} partitions"))
    if h.quorum is not None:
        doc = to_json(h)["quorum"]
        out += quorum.blocks(doc, h.quorum.now_ms)
    return out


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)
