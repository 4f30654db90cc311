"""The sampling driver: every `sample_interval_s`, on the app's thread pool, the log end
offset of every partition and the committed offsets of up to MAX_GROUPS groups, reduced into
the History (history.py). A failed sample is logged and skipped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import OffsetSpec

from gregor.clock import SYSTEM_CLOCK
from gregor.console import groups, history
from gregor.console.cluster import Cluster
from gregor.console.errors import ConsoleError

log = logging.getLogger("gregor.console")


def take_sample(cluster: Cluster, now_ms: Callable[[], int]) -> history.Sample:
    md = cluster.metadata()
    keys = [(t.topic, p) for t in md.topics.values() for p in t.partitions]
    ends = cluster.offsets(keys, OffsetSpec.latest())
    committed = {}
    for g in groups.list_groups(cluster)[: groups.MAX_GROUPS]:
        committed[g.group_id] = groups.committed(cluster, g.group_id)
    return history.reduce(now_ms(), ends, committed)


async def run(
    cluster: Cluster,
    into: history.History,
    interval_s: float,
    in_thread: Callable[..., Any],
    now_ms: Callable[[], int] = SYSTEM_CLOCK.now_ms,
) -> None:
    """Sample until cancelled."""
    while True:
        try:
            into.add(await in_thread(take_sample, cluster, now_ms))
        except ConsoleError as exc:
            log.info("console sample skipped: %s", exc)
        except Exception:  # a bad sample must not end the sampling
            log.exception("console sample failed")
        await asyncio.sleep(interval_s)
