"""Automatic preferred leader election: which partitions to hand back to their preferred replica.

Kafka's `auto.leader.rebalance.enable` rule (the ZooKeeper controller's checkAndTriggerAutoLeader
Rebalance, which is where `leader.imbalance.per.broker.percentage` comes from): for each broker B,
of the partitions whose preferred replica (the first in `replicas`) is B, the imbalance ratio is
the share that another broker leads (or nobody). When it is above the percentage, every one of
those partitions whose preferred replica is in the ISR and active (registered, unfenced, not
shutting down) gets B as leader again; the others wait for a later check.

Worked example, percentage 10: broker 2 is preferred for 3 partitions and leads 2 of them; 1/3
= 33% > 10%, so the third is handed back if 2 is in its ISR. With 20 partitions and one lost
(5%), nothing moves. Percentage 0: any lost leadership moves back.

Pure: the image and a liveness predicate in, the elections out. `QuorumController.
balance_leaders` decides when (every `leader.imbalance.check.interval.seconds`) and writes one
PartitionChangeRecord per election.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gregor.metadata.image import MetadataImage


@dataclass(frozen=True)
class PreferredElection:
    topic: str
    topic_id: uuid.UUID
    partition: int
    leader: int  # the preferred replica


def imbalance(image: MetadataImage) -> dict[int, tuple[int, int]]:
    """Per broker: (partitions it is preferred for but does not lead, partitions it is preferred for)."""
    counts: dict[int, list[int]] = {}
    for topic in image.topics_by_id.values():
        for part in topic.partitions.values():
            if not part.replicas:
                continue
            c = counts.setdefault(part.replicas[0], [0, 0])
            c[1] += 1
            if part.leader != part.replicas[0]:
                c[0] += 1
    return {b: (lost, total) for b, (lost, total) in counts.items()}


def preferred_elections(
    image: MetadataImage, active: Callable[[int], bool], percentage: int
) -> list[PreferredElection]:
    """The elections to make now, by topic name and partition."""
    over = {b for b, (lost, total) in imbalance(image).items() if lost * 100 > percentage * total}
    out = []
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        for index, part in sorted(topic.partitions.items()):
            if not part.replicas:
                continue
            preferred = part.replicas[0]
            if (
                preferred in over
                and part.leader != preferred
                and preferred in part.isr
                and active(preferred)
            ):
                out.append(PreferredElection(topic.name, topic.topic_id, index, preferred))
    return out
