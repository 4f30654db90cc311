"""`gregor mirror status -c mm2.properties`: where every enabled flow stands, read from the
clusters (no mirror process needs to run). One table of partitions (source end offset, the
mirror's committed position, lag, target end offset), one of flows (mode, age of the newest
heartbeat replicated to the target) and one of consumer groups (age of their newest
checkpoint). With `--metrics HOST:PORT,...` (where the running mirrors serve `--metrics`) the
partitions also get what those processes measured: replication latency, records/s and bytes/s.
A cluster or a metrics address that does not answer within --timeout is one line and exit
status 1.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from gregor.cli import connect, output
from gregor.cli.errors import CliError, describe

if TYPE_CHECKING:
    from gregor.mirror.config import MirrorMakerConfig
    from gregor.mirror.status import FlowStatus

STATUS_JSON = """{"flows": [{"flow": str, "exactly_once": bool, "heartbeat_age_ms": int|null,
  "partitions": [{"topic": str, "partition": int, "remote_topic": str, "source_end": int,
                  "position": int|null, "lag": int, "target_end": int|null,
                  "replication_latency_ms": float|null, "records_per_s": float|null,
                  "bytes_per_s": float|null}],
  "groups": [{"group": str, "partitions": int, "checkpoint_age_ms": int}]}]}"""


class _Clients:
    """One admin client and one assign-only consumer per cluster, built on first use once the
    cluster has answered."""

    def __init__(self, config: MirrorMakerConfig, timeout_s: float):
        self.config = config
        self.timeout_s = timeout_s
        self.built: dict[tuple[str, str], Any] = {}

    def get(self, alias: str, kind: str) -> Any:
        client = self.built.get((alias, kind))
        if client is not None:
            return client
        role = "admin" if kind == "admin" else "consumer"
        conf: dict[str, Any] = dict(self.config.cluster_client_config(alias, role))
        if kind == "consumer":
            conf.update(
                {
                    "group.id": "gregor-mirror-status",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        bootstrap = conf.get("bootstrap.servers", "")
        try:
            client = connect.build(kind, conf, bootstrap, self.timeout_s, source="")
        except CliError as e:
            raise CliError(f"cluster {alias}: {e}") from None
        self.built[(alias, kind)] = client
        return client

    def close(self) -> None:
        for (_, kind), client in self.built.items():
            if kind == "consumer":
                client.close()


def status(config: MirrorMakerConfig, args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from gregor.mirror.clients import MirrorError
    from gregor.mirror.status import read_flow

    flows = config.enabled_flows()
    if not flows:
        raise CliError("no flow is enabled (set A->B.enabled = true)")
    clients = _Clients(config, args.timeout)
    found: list[FlowStatus] = []
    try:
        for flow in flows:
            try:
                source_admin = clients.get(flow.source, "admin")
                source_consumer = clients.get(flow.source, "consumer")
                target_admin = clients.get(flow.target, "admin")
                target_consumer = clients.get(flow.target, "consumer")
                found.append(
                    read_flow(
                        flow,
                        source_admin,
                        source_consumer,
                        target_admin,
                        target_consumer,
                        int(time.time() * 1000),
                        args.timeout,
                    )
                )
            except (KafkaException, MirrorError) as e:
                raise CliError(f"{flow.name}: {describe(e)}") from None
    finally:
        clients.close()
    measured = bool(getattr(args, "metrics", None))
    if measured:
        from gregor.mirror.status import with_rates

        rates = running_mirrors_rates(args.metrics, args.timeout)
        for f, flow in zip(found, flows, strict=True):
            with_rates(f, flow.source, flow.target, rates)
    output.emit(args, {"flows": [_flow_doc(f) for f in found]}, _blocks(found, measured))
    return 0


def running_mirrors_rates(addresses: str, timeout_s: float) -> dict[Any, Any]:
    """The measurements of the mirrors serving metrics at `addresses` (HOST:PORT, comma
    separated), merged; CliError naming the address that cannot be read."""
    import urllib.error
    import urllib.request

    from gregor.mirror.status_metrics import merge, parse

    found = []
    for address in (a.strip() for a in addresses.split(",") if a.strip()):
        url = f"http://{address}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
                found.append(parse(response.read().decode()))
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
            raise CliError(f"--metrics {address}: cannot read {url}: {reason}") from None
    return merge(found)


def _flow_doc(f: FlowStatus) -> dict[str, Any]:
    return {
        "flow": f.flow,
        "exactly_once": f.exactly_once,
        "heartbeat_age_ms": f.heartbeat_age_ms,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "remote_topic": p.remote_topic,
                "source_end": p.source_end,
                "position": p.position,
                "lag": p.lag,
                "target_end": p.target_end,
                "replication_latency_ms": p.replication_latency_ms,
                "records_per_s": p.records_per_s,
                "bytes_per_s": p.bytes_per_s,
            }
            for p in f.partitions
        ],
        "groups": [
            {"group": g.group, "partitions": g.partitions, "checkpoint_age_ms": g.checkpoint_age_ms}
            for g in f.groups
        ],
    }


def _blocks(found: list[FlowStatus], measured: bool = False) -> list[output.Block]:
    headers = ["FLOW", "TOPIC", "PARTITION", "SOURCE-END", "POSITION", "LAG", "REMOTE-TOPIC"]
    headers.append("TARGET-END")
    rows: list[list[Any]] = [
        [
            f.flow,
            p.topic,
            p.partition,
            p.source_end,
            p.position,
            p.lag,
            p.remote_topic,
            p.target_end,
        ]
        for f in found
        for p in f.partitions
    ]
    if measured:  # what the running mirrors measured
        headers += ["LATENCY-MS", "RECORDS/S", "BYTES/S"]
        rows = [
            row + [_round(p.replication_latency_ms), _round(p.records_per_s), _round(p.bytes_per_s)]
            for row, p in zip(rows, (p for f in found for p in f.partitions), strict=True)
        ]
    partitions = output.Table(headers, rows)
    flows = output.Table(
        ["FLOW", "MODE", "HEARTBEAT-AGE-MS"],
        [
            [f.flow, "exactly once" if f.exactly_once else "at least once", f.heartbeat_age_ms]
            for f in found
        ],
    )
    groups = output.Table(
        ["FLOW", "GROUP", "PARTITIONS", "CHECKPOINT-AGE-MS"],
        [[f.flow, g.group, g.partitions, g.checkpoint_age_ms] for f in found for g in f.groups],
    )
    return [partitions, flows, groups]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
