"""`gregor mirror --config mm2.properties`: replicate between clusters as MirrorMaker 2 does,
every enabled flow, until SIGTERM or SIGINT (then flush, commit and exit 0).

With `--check`, read and validate the configuration and print what it would do instead: the
clusters, each enabled flow with its topic and group filters, how it names remote topics, and
its internal topics; with `--topic NAME`, whether each flow would mirror that topic and under
which name. Nothing is contacted.

With `--metrics HOST:PORT` (port 0: any free port; the bound address is logged), the process
serves its metrics at `/metrics` in Prometheus' text format, with MirrorMaker 2's names as the
JMX exporter renders them (`kafka_connect_mirror_mirrorsourceconnector_record_count`, ...).

`gregor mirror status -c mm2.properties` prints where every enabled flow stands, read from the
clusters: per partition the source end offset, the mirror's committed position, the lag and
the target end offset; per flow the age of the newest replicated heartbeat; per group the age
of its newest checkpoint. With `--metrics HOST:PORT,...`, the addresses where the mirrors serve
their metrics, each partition's replication latency, records/s and bytes/s as they measure them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gregor.cli import output
from gregor.cli.connect import DEFAULT_TIMEOUT_S
from gregor.cli.errors import CliError
from gregor.cli.specs import positive_seconds

if TYPE_CHECKING:
    from gregor.mirror.config import Flow, MirrorMakerConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mirror",
        help="replicate between clusters as MirrorMaker 2 does",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["status"],
        help="status: print where every enabled flow stands (lag, heartbeat and checkpoint age)",
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="an mm2.properties")
    p.add_argument("--check", action="store_true", help="validate the config and print the flows")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME",
        help="say whether and as what each flow would mirror this source topic (repeatable)",
    )
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port); "
        "status: read the running mirrors' metrics there (HOST:PORT,...) for latency and rates",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"status: how long a cluster may take to answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    from gregor.cli.mirror_status import STATUS_JSON

    output.add_output_arg(p, "(status) " + STATUS_JSON)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gregor.mirror.config import ConfigError, load

    try:
        config = load(args.config)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if args.action == "status":
        from gregor.cli.mirror_status import status

        return status(config, args)
    if args.check:
        for line in describe(config, args.topic):
            print(line)
        return 0
    metrics = _metrics_address(args.metrics) if args.metrics else None
    return _run(config, metrics)


def _metrics_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--metrics: not a HOST:PORT address: {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - the user's choice


def _run(config: MirrorMakerConfig, metrics_at: tuple[str, int] | None) -> int:
    """The mirror in this process until SIGTERM or SIGINT."""
    import logging
    import signal
    import sys
    import threading

    from gregor.mirror import engine

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s gregor mirror: %(message)s"))
    logger = logging.getLogger("gregor.mirror")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = None
    if metrics_at is not None:
        from gregor.clock import SYSTEM_CLOCK
        from gregor.mirror.exporter import serve
        from gregor.mirror.metrics import MirrorMetrics

        metrics = MirrorMetrics()
        try:
            _server, bound = serve(metrics, *metrics_at, SYSTEM_CLOCK.now_ms)
        except OSError as e:
            raise CliError(
                f"--metrics {metrics_at[0]}:{metrics_at[1]}: {e.strerror or e}"
            ) from None
        logger.info("metrics at http://%s/metrics", bound)
    engine.run(config, stop, metrics=metrics)
    return 0


def _list(patterns: tuple[str, ...]) -> str:
    return ", ".join(patterns) if patterns else "(none)"


def describe(config: MirrorMakerConfig, topics: list[str]) -> list[str]:
    """The lines `--check` prints."""
    lines = [f"clusters: {', '.join(config.clusters)}"]
    for alias in config.clusters:
        servers = config.cluster_client_config(alias, "admin").get("bootstrap.servers", "")
        lines.append(f"  {alias}: {servers}")
    flows = config.enabled_flows()
    if not flows:
        lines.append("no flow is enabled (set A->B.enabled = true)")
    for flow in flows:
        lines += _flow_lines(flow, topics)
    beats = [f.name for f in config.flows.values() if f.emits_heartbeats]
    lines.append(f"heartbeats: {', '.join(beats) if beats else '(none)'}")
    return lines


def _every(flow: Flow, what: str) -> str:
    if not flow.get(f"{what}.enabled"):
        return "off"
    return f"every {flow.get(f'{what}.interval.seconds')} s"


def _flow_lines(flow: Flow, topics: list[str]) -> list[str]:
    from gregor.mirror.filters import why_not_replicated

    g = flow.get
    syncs_on = flow.source if g("offset-syncs.topic.location") == "source" else flow.target
    lines = [
        f"{flow.name}:",
        f"  topics: {_list(g('topics'))}  excluding: {_list(g('topics.exclude'))}",
        f"  groups: {_list(g('groups'))}  excluding: {_list(g('groups.exclude'))}",
        f"  remote topics: {flow.remote_topic('<topic>')} ({type(flow.policy).__name__})",
        f"  offset syncs: {flow.offset_syncs_topic} on {syncs_on}, "
        f"at least every {g('offset.lag.max')} records",
        f"  checkpoints: {flow.checkpoints_topic} on {flow.target}, {_every(flow, 'emit.checkpoints')}",
        f"  group offsets synced to {flow.target}: {_every(flow, 'sync.group.offsets')}",
        f"  topic configs synced: {_every(flow, 'sync.topic.configs')}",
        f"  tasks.max: {g('tasks.max')}  exactly once: {'yes' if flow.exactly_once else 'no'}",
    ]
    for topic in topics:
        reason = why_not_replicated(
            topic, flow.topic_filter, flow.policy, flow.target, g("heartbeats.replication.enabled")
        )
        verdict = f"-> {flow.remote_topic(topic)}" if reason is None else f"not mirrored: {reason}"
        lines.append(f"  {topic} {verdict}")
    return lines
