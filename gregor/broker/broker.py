"""The broker node as a server: the parts of a `BrokerNode` (broker_node.py, built in order,
nothing started) and the drivers that run them; it starts them and stops them in the reverse
order, and decides nothing itself.

    BrokerServer(config).run()       # until SIGTERM/SIGINT

Start: open the log dirs (recovering after a crash), host the partitions the metadata names,
listen (dispatch.py), join the quorum, start the timers (runtime/timers.py). Stop: hand
leaderships over while still serving (controlled shutdown), stop accepting, finish in-flight
requests, flush, write checkpoints and the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import logging

import gregor.handlers  # noqa: F401  (registers every handler)
from gregor.broker.broker_node import BrokerNode
from gregor.broker.config import BrokerConfig
from gregor.broker.console_driver import console_driver
from gregor.broker.dispatch import Dispatcher
from gregor.broker.node_metrics import NodeMetrics, image_fenced, node_metrics
from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.metadata import records as metadata_records
from gregor.metrics.collectors import BrokerSources
from gregor.metrics.health import NodeHealth
from gregor.protocol import codec
from gregor.runtime.cleaner_thread import CleanerThreads
from gregor.runtime.connection import write_deferred_now
from gregor.runtime.connection_quotas import connection_limits
from gregor.runtime.flush_thread import FlushThread
from gregor.runtime.gc_settings import freeze_after_start
from gregor.runtime.log_io import in_thread, maintenance
from gregor.runtime.process import serve_until_signalled, write_ready_file
from gregor.runtime.purgatory_driver import PurgatoryDriver
from gregor.runtime.server import Server
from gregor.runtime.slicing import run_in_slices
from gregor.runtime.stall_monitor import LoopStallMonitor, stall_monitor
from gregor.runtime.timers import drive, every

log = logging.getLogger("gregor.broker")


def _settle(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class BrokerServer(BrokerNode):
    def __init__(
        self, config: BrokerConfig, ready_file: str | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(config, clock)  # every part, nothing started: broker_node.py
        self.ready_file = ready_file
        self.purgatory_driver = PurgatoryDriver(self.purgatory, self.now_ms)
        self.cleaner = CleanerThreads(self.logs, self.config_view.cleaner_config(), self.now_ms)
        self.hosting.on_broker_config = self._reconfigure
        self.server: Server | None = None
        self.dispatch: Dispatcher | None = None
        self._timers: list[asyncio.Task[None]] = []
        self.stall_monitor: LoopStallMonitor | None = None
        self.log_maker: FlushThread | None = None  # makes new partitions' files (hosting.py)
        self.freeze_at_start = False  # a server process (`run`): gc_settings.py
        self.console = console_driver(config)  # console.listener: console_driver.py
        self.started = self.stopping = False
        self.metrics = self._build_metrics()

    def _build_metrics(self) -> NodeMetrics | None:
        """`metrics.listener`'s metrics and health checks (broker/node_metrics.py), or None."""
        store = self.store
        sources = BrokerSources(
            self.node_id, self.replicas, self.logs, self.services.groups,
            image=lambda: store.image, raft=lambda: store.raft_node,
            active_controller=store.is_active,
            connections=self.listeners.connections, socket_bytes=self.listeners.socket_bytes,
            connection_totals=self.listeners.connection_totals,
            connection_rates=self.listeners.connection_rates,
            accept_rate=self.listeners.accept_rates,
            ip_accept_rate=self.listeners.ip_accept_rates,
            broker_accept_rate=self.listeners.broker_accept_rate,
            accept_throttle=self.listeners.accept_throttle_ms,
            ip_accept_throttle=self.listeners.ip_accept_throttle_ms,
            acceptor_blocked=self.listeners.acceptor_blocked_ns,
            topic_stats=self.services.topic_stats,
            fetch_sessions=self.services.fetch_sessions,
        )  # fmt: skip
        metrics = node_metrics(self.config_value("metrics.listener"), sources, self._health)
        if metrics is not None:
            store.on_commit_latency = sources.commit_latency.record
        return metrics

    def _health(self) -> NodeHealth:
        held = self.dispatch is None or self.dispatch.waiting_for_catch_up()
        return NodeHealth(
            self.started, self.stopping, self._broker_epoch(),
            image_fenced(self.store.image, self.node_id), not held and self.store.caught_up,
        )  # fmt: skip

    def _reconfigure(self) -> None:
        """Dynamic broker configs may have changed: connection limits, the listener's TLS
        stores and the cleaner."""
        if self.server is not None:
            view = self.config_view
            limits = connection_limits(view.value, self.listeners.names(), view.raw)
            self.listeners.reconfigure(limits, self.store.dynamic(self.node_id))
        if self.member is not None:  # the controller listener of a combined node
            self.member.reconfigure_connections()
        asyncio.ensure_future(self.cleaner.reconfigure(self.config_view.cleaner_config()))

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        codec.compile_all()
        metadata_records.compile_all()
        if self.metrics is not None:  # first: live while the logs recover, ready once started
            await self.metrics.start(self.ready_file)
        self.stall_monitor = stall_monitor(self.config_value("gregor.loop.stall.log.ms"))
        if self.stall_monitor is not None:
            self.stall_monitor.start(asyncio.get_running_loop())
        self.purgatory_driver.start()
        self.logs.call_soon_on_owner = asyncio.get_running_loop().call_soon_threadsafe
        self.store.in_thread = in_thread  # metadata snapshots written off the loop
        self.logs.startup()
        self.hosting.apply()
        dispatch = self.dispatch = Dispatcher(self.services, self.forwarder)
        if self.member is not None:  # clients wait until this broker has caught up
            dispatch.held = asyncio.get_running_loop().create_future()
            self.hosting.on_caught_up = lambda: _settle(dispatch.held)
        wrap = self.metrics.wrap if self.metrics is not None else (lambda d: d)
        await self.listeners.start(dispatch, self.config_value, wrap, self.config_view.raw)
        if self.listeners.quotas is not None:  # the `ip` client quotas' connection rates
            store = self.store
            self.listeners.quotas.ip_quotas_of = lambda: store.image.client_quotas
        self.server = self.listeners.first.server
        loop = asyncio.get_running_loop()
        self.hosting.schedule = loop.call_soon
        self.log_maker = FlushThread(loop, f"broker-{self.node_id}-new-logs")
        self.hosting.in_thread = self.log_maker.run  # new partitions' files: off the loop
        if self.member is not None:
            # New partitions wait for the metadata log's fsync under way (raft_driver.py)
            self.hosting.schedule = self.member.driver.after_flush
            self.hosting.ready = True
            self.store.on_replayed = self.hosting.apply_soon
            self.store.on_answered = write_deferred_now  # before the replay: see the store
            await self.member.start()
            if self.isr_sender is not None:
                self.isr_sender.start()
            self.hosting.apply()
        self._start_timers()
        self.cleaner.start()  # log compaction: cleaner_thread.py
        where = ", ".join(self.logs.log_dirs)
        log.info(
            "gregor broker %d ready on %s:%d (cluster %s, data in %s)",
            self.node_id, self.cluster.host, self.cluster.port, self.store.cluster_id, where,
        )  # fmt: skip
        if self.freeze_at_start:
            log.info("froze %d objects made at start-up (gc_settings.py)", freeze_after_start())
        if self.console is not None:
            await self.console.start(*self.listeners.for_console())
        self.started = True
        if self.ready_file:
            shown = self.listeners.endpoints() if len(self.listeners.listeners) > 1 else []
            write_ready_file(self.ready_file, self.cluster.host, self.cluster.port, shown)

    def _start_timers(self) -> None:
        s, clock = self.services, self.clock
        tasks = maintenance(self.logs, self.config_value, clock)
        if self.member is not None:  # Kafka's isr-expiration task
            lag_s = self.config_value("replica.lag.time.max.ms") / 1000
            shrink = self.replicas.maybe_shrink_isr_steps
            tasks.append(every(lag_s / 2, lambda: run_in_slices(shrink(clock.now_ms()))))
        for core, what in ((s.groups, "group"), (s.transactions, "txn"), (self.store, "metadata")):
            tasks.append(drive(core, clock, what))
        self._timers = [asyncio.ensure_future(task) for task in tasks]

    async def stop(self) -> None:
        log.info("shutting down")
        if self.console is not None:
            await self.console.stop()
        self.stopping = True
        for t in self._timers:
            t.cancel()
        if self.member is not None:
            # Hand leaderships over while still serving (Kafka's order): followers finish
            # catching up, waiting acks=all produces are answered, clients move on.
            await self.member.leave()
        if self.server is not None:
            held = self.dispatch is not None and self.dispatch.waiting_for_catch_up()
            if held:  # they would wait for nothing: this node never caught up
                log.info("closing every client connection: not caught up with the metadata yet")
            await self.listeners.stop(grace_s=0.0 if held else 5.0)
        self.purgatory_driver.stop()
        await self.forwarder.close()
        if self.links is not None:
            await self.links.close()
        for part in (self.member, self.fetchers, self.isr_sender):
            if part is not None:
                await part.stop()
        await self.cleaner.stop()  # before the logs close: no swap may reach a closed log
        if self.log_maker is not None:
            self.log_maker.stop()  # a job under way finishes; its logs are found at the next start
        self.epoch_syncs.drain()
        self.logs.shutdown()
        self.epoch_syncs.drain()  # what closing the logs wrote
        self.store.close()
        if self.stall_monitor is not None:
            self.stall_monitor.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        log.info("shut down cleanly")

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly."""
        self.freeze_at_start = True  # not in a test's process: what it froze would stay
        await serve_until_signalled(self.start, self.stop)
