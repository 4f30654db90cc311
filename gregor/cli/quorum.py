"""`gregor quorum describe -b HOST:PORT`: the KRaft metadata quorum, as `kafka-metadata-quorum.sh
describe --status --replication` shows it.

    Leader id:        1
    Leader epoch:     4
    High watermark:   311

    NODE  ROLE      LOG END OFFSET  LAG  LAST FETCH  LAST CAUGHT UP
    1     Leader    311             0    3 ms ago    3 ms ago

Lag is the leader's log end offset minus the replica's; the times are the replica's last fetch
and the last time it had caught up with the leader (Kafka's columns). Observers (broker-only
nodes, which replicate the metadata log without voting) are listed after the voters with the
role Observer. confluent-kafka has no DescribeQuorum, so this asks with our own codec over one
socket: ApiVersions, then DescribeQuorum at the newest version both sides speak.

Only the leader describes the quorum. Any broker will do (a broker-only node asks the active
controller for it), and so will controller listeners given as a comma list (`-b c1:9093,c2:9093`,
as `--bootstrap-controller` in Kafka's tool): each is asked in turn until one answers.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gregor.cli import connect, output
from gregor.cli.connect import add_verb
from gregor.cli.errors import CliError, error_text

METADATA_TOPIC = "__cluster_metadata"
CLIENT_ID = "gregor-quorum"
DESCRIBE_JSON = """{"leader_id": int, "leader_epoch": int, "high_watermark": int,
 "replicas": [{"node": int, "role": "Leader"|"Follower"|"Observer", "log_end_offset": int,
               "lag": int|null, "last_fetch_timestamp": int|null,
               "last_caught_up_timestamp": int|null}]}     (timestamps: ms since the epoch)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quorum", help="the KRaft metadata quorum: leader, epoch, voters and their lag"
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    add_verb(
        verbs,
        "describe",
        "leader, epoch, high watermark; each voter's and observer's log end offset and lag",
        describe,
        DESCRIBE_JSON,
    )


class QuorumNotServed(CliError):
    """The server does not describe its quorum to us: it has no DescribeQuorum, or this
    principal may not (CLUSTER_AUTHORIZATION_FAILED)."""


def fetch_quorum(
    bootstrap: str, timeout_ms: int = 10_000, settings: dict[str, str] | None = None
) -> Any:
    """The DescribeQuorum response partition for `__cluster_metadata-0` from the first of the
    comma-separated `bootstrap` addresses that gives one; a CliError naming the last failure if
    none does."""
    error = CliError(f"no address in {bootstrap!r}")
    for address in (a.strip() for a in bootstrap.split(",")):
        if not address:
            continue
        try:
            return _fetch_quorum_from(address, timeout_ms, settings)
        except CliError as exc:
            error = exc
        except (OSError, RuntimeError) as exc:
            error = CliError(f"{address}: {exc}")
    raise error


def _fetch_quorum_from(bootstrap: str, timeout_ms: int, settings: dict[str, str] | None) -> Any:
    from gregor.protocol import api_keys, errors
    from gregor.protocol.messages import ApiVersionsRequest, DescribeQuorumRequest

    conn = connect.raw(bootstrap, timeout_ms / 1000, CLIENT_ID, settings)
    try:
        versions = conn.call(api_keys.API_VERSIONS, 0, ApiVersionsRequest())
        ours = api_keys.BY_KEY[api_keys.DESCRIBE_QUORUM]
        theirs = next((a for a in versions.api_keys if a.api_key == api_keys.DESCRIBE_QUORUM), None)
        if theirs is None or theirs.max_version < ours.min_version:
            raise QuorumNotServed(f"{bootstrap} does not serve DescribeQuorum")
        version = min(theirs.max_version, ours.max_version)
        request = DescribeQuorumRequest(
            topics=[
                DescribeQuorumRequest.TopicData(
                    topic_name=METADATA_TOPIC,
                    partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
                )
            ]
        )
        response = conn.call(api_keys.DESCRIBE_QUORUM, version, request)
    finally:
        conn.close()
    if response.error_code != errors.NONE:
        failed = f"{bootstrap}: DescribeQuorum: {error_text(response.error_code)}"
        if response.error_code == errors.CLUSTER_AUTHORIZATION_FAILED:
            raise QuorumNotServed(failed)
        raise CliError(failed)
    part = (
        response.topics[0].partitions[0]
        if response.topics and response.topics[0].partitions
        else None
    )
    if part is None:
        raise CliError(f"{bootstrap}: DescribeQuorum: the answer names no partition")
    if part.error_code != errors.NONE:
        raise CliError(f"{bootstrap}: DescribeQuorum: {error_text(part.error_code)}")
    return part


def _ago(timestamp_ms: int, now_ms: int) -> str:
    if timestamp_ms < 0:
        return "never"
    return f"{max(0, now_ms - timestamp_ms)} ms ago"


def _or_never(timestamp_ms: int | None) -> int:
    return -1 if timestamp_ms is None else timestamp_ms


def _stamp(v: Any, name: str) -> int | None:
    found = getattr(v, name, -1)
    return found if found >= 0 else None


def to_json(part: Any) -> dict[str, Any]:
    leader = next((v for v in part.current_voters if v.replica_id == part.leader_id), None)
    leader_end = leader.log_end_offset if leader is not None else part.high_watermark
    voters = sorted(
        part.current_voters, key=lambda v: (v.replica_id != part.leader_id, v.replica_id)
    )
    replicas = []
    for group, role in ((voters, None), (part.observers, "Observer")):
        for v in group:
            replicas.append(
                {
                    "node": v.replica_id,
                    "role": role or ("Leader" if v.replica_id == part.leader_id else "Follower"),
                    "log_end_offset": v.log_end_offset,
                    "lag": leader_end - v.log_end_offset if v.log_end_offset >= 0 else None,
                    "last_fetch_timestamp": _stamp(v, "last_fetch_timestamp"),
                    "last_caught_up_timestamp": _stamp(v, "last_caught_up_timestamp"),
                }
            )
    return {
        "leader_id": part.leader_id,
        "leader_epoch": part.leader_epoch,
        "high_watermark": part.high_watermark,
        "replicas": replicas,
    }


def blocks(doc: dict[str, Any], now_ms: int) -> list[output.Block]:
    head = output.Fields(
        [
            ("Leader id", doc["leader_id"]),
            ("Leader epoch", doc["leader_epoch"]),
            ("High watermark", doc["high_watermark"]),
        ]
    )
    rows = [
        [
            r["node"],
            r["role"],
            r["log_end_offset"],
            r["lag"],
            _ago(_or_never(r["last_fetch_timestamp"]), now_ms),
            _ago(_or_never(r["last_caught_up_timestamp"]), now_ms),
        ]
        for r in doc["replicas"]
    ]
    columns = ["node", "role", "log end offset", "lag", "last fetch", "last caught up"]
    return [head, output.Table(columns, rows)]


def describe(args: argparse.Namespace) -> int:
    part = fetch_quorum(args.bootstrap_server, int(args.timeout * 1000), connect.raw_settings(args))
    doc = to_json(part)
    output.emit(args, doc, blocks(doc, int(time.time() * 1000)))
    return 0
