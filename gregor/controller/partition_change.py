"""Leader election and ISR changes for one partition, as a PartitionChangeRecord (or none).

Rules (Kafka's PartitionChangeBuilder without eligible leader replicas):

- The ISR is never left empty: removing its last member keeps that member in it, leaderless,
  so the partition comes back when that broker does.
- A leader is kept while it is active (registered, unfenced, not shutting down) and in the ISR.
  Otherwise the new leader is the first replica, in replica order, that is in the ISR and
  active; if there is none, with unclean election allowed, the first active replica (the ISR
  becomes just it and the leader recovery state RECOVERING, 1); else no leader (-1).
- A record carries only what changed: ISR when it differs, Leader when it differs (the image
  then bumps the leader epoch). Nothing changed: no record.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.image import NO_LEADER, NO_LEADER_CHANGE, PartitionRegistration

RECOVERING = 1


def elect_leader(
    part: PartitionRegistration, isr: Sequence[int], active: Callable[[int], bool], unclean: bool
) -> tuple[int, tuple[int, ...], bool]:
    """(leader, isr, unclean) for a partition whose ISR is to become `isr`."""
    if part.leader in isr and active(part.leader):
        return part.leader, tuple(isr), False
    for b in part.replicas:
        if b in isr and active(b):
            return b, tuple(isr), False
    if unclean:
        for b in part.replicas:
            if active(b):
                return b, (b,), True
    return NO_LEADER, tuple(isr), False


def change_record(
    topic_id: uuid.UUID,
    index: int,
    part: PartitionRegistration,
    isr: Sequence[int],
    active: Callable[[int], bool],
    unclean: bool = False,
    leader: int | None = None,
) -> Any | None:
    """The PartitionChangeRecord moving `part` to `isr` (electing a leader by the rules above,
    unless `leader` is given), or None if nothing changes."""
    target = tuple(isr) if isr else part.isr
    if leader is None:
        new_leader, target, was_unclean = elect_leader(part, target, active, unclean)
    else:
        new_leader, was_unclean = leader, False
    if target == part.isr and new_leader == part.leader:
        return None
    return r.PartitionChangeRecord(
        partition_id=index,
        topic_id=topic_id,
        isr=None if target == part.isr else list(target),
        leader=NO_LEADER_CHANGE if new_leader == part.leader else new_leader,
        leader_recovery_state=RECOVERING if was_unclean else -1,
    )
