"""The running mirror: every task of an `mm2.properties`, each in its own thread, until told to
stop.

Tasks: per enabled flow A->B `tasks.max` source tasks (records, remote topics, offset syncs;
each a member of the flow's consumer group, which splits A's partitions between them and the
tasks of other processes) and, with `emit.checkpoints.enabled` or `sync.group.offsets.enabled`,
a checkpoint task; per pair of clusters a heartbeat task unless `emit.heartbeats.enabled` is
false. A task that fails (a
cluster unreachable, a delivery refused) is closed without committing and started again after
a backoff of 1 s doubling to 30 s; the failure is logged once, in one line, until the task
runs again (then that is logged too). A stop flushes, commits and closes every task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Protocol

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.mirror import clients
from gregor.mirror.config import MirrorMakerConfig
from gregor.mirror.metrics import MirrorMetrics

log = logging.getLogger("gregor.mirror")

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
STOP_TIMEOUT_S = 60.0


class Task(Protocol):
    def start(self) -> None: ...

    def step(self) -> None: ...

    def close(self, clean: bool) -> None: ...


def supervise(
    name: str, make: Callable[[], Task], stop: threading.Event, clock: Clock = SYSTEM_CLOCK
) -> None:
    """Run a task until `stop`, restarting it with backoff when it fails."""
    backoff = BACKOFF_MIN_S
    reported: str | None = None
    while not stop.is_set():
        task: Task | None = None
        try:
            task = make()
            task.start()
            if reported is not None:
                log.info("%s: running again", name)
                reported = None
            backoff = BACKOFF_MIN_S
            while not stop.is_set():
                task.step()
            task.close(clean=True)
            return
        except Exception as e:  # noqa: BLE001 - every failure is retried
            text = clients.describe(e)
            if text != reported:
                log.error("%s: %s; retrying with backoff", name, text)
                reported = text
            if task is not None:
                try:
                    task.close(clean=False)
                except Exception:  # noqa: BLE001, S110 - it failed already
                    pass
            stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)


def tasks(
    config: MirrorMakerConfig, clock: Clock, metrics: MirrorMetrics | None = None
) -> dict[str, Callable[[], Task]]:
    """The tasks of a config, by name, each as a factory; `metrics` collects what the source
    and checkpoint tasks measure."""
    from gregor.mirror.checkpoints import CheckpointTask
    from gregor.mirror.exactly_once import ExactlyOnceSourceTask
    from gregor.mirror.heartbeats import HeartbeatTask
    from gregor.mirror.replicator import SourceTask

    flush_ms = int(config.raw.get("offset.flush.interval.ms", "1000"))
    out: dict[str, Callable[[], Task]] = {}
    for flow in config.enabled_flows():
        source_task = ExactlyOnceSourceTask if flow.exactly_once else SourceTask
        count = flow.get("tasks.max")
        for i in range(count):  # members of the flow's group: it splits the partitions
            name = f"{flow.name} source" + (f" {i + 1}" if count > 1 else "")
            out[name] = partial(source_task, flow, clock, flush_ms, metrics)
        if flow.get("emit.checkpoints.enabled") or flow.get("sync.group.offsets.enabled"):
            out[f"{flow.name} checkpoints"] = partial(CheckpointTask, flow, clock, metrics)
    for flow in config.flows.values():
        if flow.emits_heartbeats:
            out[f"{flow.name} heartbeats"] = partial(HeartbeatTask, flow, clock)
    return out


def run(
    config: MirrorMakerConfig,
    stop: threading.Event,
    clock: Clock = SYSTEM_CLOCK,
    metrics: MirrorMetrics | None = None,
) -> None:
    """Run every task of `config` until `stop` is set, then stop them cleanly."""
    threads = [
        threading.Thread(target=supervise, args=(name, make, stop, clock), name=name, daemon=True)
        for name, make in tasks(config, clock, metrics).items()
    ]
    for t in threads:
        t.start()
    log.info(
        "running %s",
        ", ".join(f.name for f in config.enabled_flows()) or "heartbeats only (no flow enabled)",
    )
    while not stop.is_set():
        stop.wait(0.5)
    deadline = clock.monotonic_s() + STOP_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - clock.monotonic_s()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        log.warning("stopped without waiting for %s", ", ".join(stuck))
    else:
        log.info("stopped")
