"""`gregor mirror --config mm2.properties`: replicate between clusters as MirrorMaker 2 does,
every enabled flow, until SIGTERM or SIGINT (then flush, commit and exit 0).

With `--check`, read and validate the configuration and print what it would do instead: the
clusters, each enabled flow with its topic and group filters, how it names remote topics, and
its internal topics; with `--topic NAME`, whether each flow would mirror that topic and under
which name. Nothing is contacted.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gregor.cli.errors import CliError

if TYPE_CHECKING:
    from gregor.mirror.config import Flow, MirrorMakerConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mirror",
        help="replicate between clusters as MirrorMaker 2 does",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gregor.mirror.config import ConfigError, load

    try:
        config = load(args.config)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if args.check:
        for line in describe(config, args.topic):
            print(line)
        return 0
    return _run(config)


def _run(config: MirrorMakerConfig) -> int:
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
    engine.run(config, stop)
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
