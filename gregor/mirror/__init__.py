"""`gregor mirror`: MirrorMaker 2's model of replication between Kafka-protocol clusters.

A client of two (or more) clusters, never imported by the broker. The sans-I/O cores: the
`mm2.properties` configuration (`config`), replication policies (`policy`), topic and group
filters (`filters`), MirrorMaker's record formats (`formats`), the source connector's
decisions (`source`), and offset syncs, checkpoints and offset translation (`offsets`). The
engine around them, with confluent-kafka clients: `engine` runs the tasks (`replicator`,
`exactly_once`, `topics`, `checkpoints`, `heartbeats`); `translate_offsets` reads checkpoints
for a failover.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def translate_offsets(
    target: str | Mapping[str, str], source_alias: str, group: str, **kwargs: Any
) -> dict[Any, int]:
    """`group`'s offsets on `target` translated from cluster `source_alias` (see
    `gregor.mirror.translate`)."""
    from gregor.mirror.translate import translate_offsets as translate

    return translate(target, source_alias, group, **kwargs)
