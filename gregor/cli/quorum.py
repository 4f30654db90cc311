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
import sys
import time
from typing import Any

from gregor.cli.topics import add_bootstrap
from gregor.testing.raw_client import RawClient

METADATA_TOPIC = "__cluster_metadata"
CLIENT_ID = "gregor-quorum"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quorum", help="the KRaft metadata quorum: leader, epoch, voters and their lag"
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser(
        "describe",
        help="leader, epoch, high watermark; each voter's and observer's log end offset and lag",
    )
    add_bootstrap(v)
    v.add_argument("--timeout-ms", type=int, default=10_000)
    v.set_defaults(func=describe)


def fetch_quorum(bootstrap: str, timeout_ms: int = 10_000) -> Any:
    """The DescribeQuorum response partition for `__cluster_metadata-0` from the first of the
    comma-separated `bootstrap` addresses that gives one; the last error if none does."""
    error = RuntimeError(f"no address in {bootstrap!r}")
    for address in (a.strip() for a in bootstrap.split(",")):
        if not address:
            continue
        try:
            return _fetch_quorum_from(address, timeout_ms)
        except (OSError, RuntimeError) as exc:
            error = RuntimeError(f"{address}: {exc}")
    raise error


def _fetch_quorum_from(bootstrap: str, timeout_ms: int) -> Any:
    from gregor.protocol import api_keys, errors
    from gregor.protocol.messages import ApiVersionsRequest, DescribeQuorumRequest

    conn = RawClient(bootstrap, client_id=CLIENT_ID, timeout_s=timeout_ms / 1000)
    try:
        versions = conn.call(api_keys.API_VERSIONS, 0, ApiVersionsRequest())
        ours = api_keys.BY_KEY[api_keys.DESCRIBE_QUORUM]
        theirs = next((a for a in versions.api_keys if a.api_key == api_keys.DESCRIBE_QUORUM), None)
        if theirs is None or theirs.max_version < ours.min_version:
            raise RuntimeError(f"{bootstrap} does not serve DescribeQuorum")
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
        raise RuntimeError(f"DescribeQuorum: {errors.name_of(response.error_code)}")
    part = (
        response.topics[0].partitions[0]
        if response.topics and response.topics[0].partitions
        else None
    )
    if part is None:
        raise RuntimeError("DescribeQuorum: the answer names no partition")
    if part.error_code != errors.NONE:
        raise RuntimeError(f"DescribeQuorum: {errors.name_of(part.error_code)}")
    return part


def _ago(timestamp_ms: int, now_ms: int) -> str:
    if timestamp_ms < 0:
        return "never"
    return f"{max(0, now_ms - timestamp_ms)} ms ago"


def render(part: Any, now_ms: int) -> str:
    leader = next((v for v in part.current_voters if v.replica_id == part.leader_id), None)
    leader_end = leader.log_end_offset if leader is not None else part.high_watermark
    rows = [("NODE", "ROLE", "LOG END OFFSET", "LAG", "LAST FETCH", "LAST CAUGHT UP")]
    voters = sorted(
        part.current_voters, key=lambda v: (v.replica_id != part.leader_id, v.replica_id)
    )
    for replicas, role in ((voters, None), (part.observers, "Observer")):
        for v in replicas:
            rows.append(
                (
                    str(v.replica_id),
                    role or ("Leader" if v.replica_id == part.leader_id else "Follower"),
                    str(v.log_end_offset),
                    str(leader_end - v.log_end_offset) if v.log_end_offset >= 0 else "-",
                    _ago(getattr(v, "last_fetch_timestamp", -1), now_ms),
                    _ago(getattr(v, "last_caught_up_timestamp", -1), now_ms),
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    head = [
        f"Leader id:        {part.leader_id}",
        f"Leader epoch:     {part.leader_epoch}",
        f"High watermark:   {part.high_watermark}",
        "",
    ]
    return "\n".join(head + table) + "\n"


def describe(args: argparse.Namespace) -> int:
    try:
        part = fetch_quorum(args.bootstrap_server, args.timeout_ms)
    except (OSError, RuntimeError) as exc:
        print(f"gregor quorum describe: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render(part, int(time.time() * 1000)))
    return 0
