"""The node's metrics and health checks (`metrics.listener`), wired from the parts they read:
the collectors of gregor/metrics/ over a registry of their own (plus prometheus_client's
process collector), the request measuring dispatcher, and the HTTP listener driver. Off (None)
unless `metrics.listener` is set.

    metrics = node_metrics(...)           # before the client listener is made
    dispatch = metrics.wrap(dispatch)     # counts and times every request
    await metrics.start(ready_file)       # logs `metrics.listener http://HOST:PORT`
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from prometheus_client import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from gregor.metrics.collectors import BrokerSources, collectors
from gregor.metrics.health import NodeHealth, readiness
from gregor.runtime.connection import Dispatcher
from gregor.runtime.metrics_listener import MetricsListener, parse_listener
from gregor.runtime.request_metrics import MeasuredDispatcher

log = logging.getLogger("gregor.metrics")


class NodeMetrics:
    def __init__(
        self,
        host: str,
        port: int,
        sources: BrokerSources,
        health: Callable[[], NodeHealth],
        broker: bool = True,
    ):
        self.sources = sources
        self.health = health
        registry = CollectorRegistry(auto_describe=False)
        for collector in collectors(sources, broker):
            registry.register(collector)
        ProcessCollector(registry=registry)
        self.listener = MetricsListener(
            host, port, registry, lambda: readiness(self.health()), sources.loop_lag
        )

    def wrap(self, dispatch: Dispatcher) -> Dispatcher:
        return MeasuredDispatcher(dispatch, self.sources.requests)

    async def start(self, ready_file: str | None) -> None:
        try:
            url = await self.listener.start()
        except OSError as exc:  # one line naming the key (cli/serve.py prints it)
            raise OSError(f"metrics.listener {self.listener.url}: {exc.strerror or exc}") from None
        log.info("metrics.listener %s (/metrics, /health/live, /health/ready)", url)
        if ready_file:  # beside the ready file, for whoever started the node (gregor.Broker)
            tmp = ready_file + ".metrics.tmp"
            with open(tmp, "w") as f:
                f.write(url + "\n")
            os.replace(tmp, ready_file + ".metrics")

    async def stop(self) -> None:
        await self.listener.stop()


def node_metrics(
    value: str | None,
    sources: BrokerSources,
    health: Callable[[], NodeHealth],
    broker: bool = True,
) -> NodeMetrics | None:
    """The node's metrics if `metrics.listener` (`value`) is set, else None; `broker` False
    for a controller-only node."""
    if not value:
        return None
    host, port = parse_listener(value)
    return NodeMetrics(host, port, sources, health, broker)


def image_fenced(image: Any, node_id: int) -> bool:
    reg = image.brokers.get(node_id)
    return reg is None or reg.fenced
