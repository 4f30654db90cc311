"""`/health/live` and `/health/ready`, decided from what the node knows (sans-I/O).

Live: the process answers (always 200 while the event loop runs). Ready: the node may serve
clients, as a load balancer or Kubernetes readiness probe should judge it:

    serving   started, not stopping
    registered  its broker registration is in the metadata (broker epoch >= 0)
    unfenced    the controller has unfenced it (it may lead partitions)
    caught up   it has replayed the metadata up to its registration (a quorum member holds
                client requests until then)

The first condition that fails is the reason given with a 503.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeHealth:
    started: bool
    stopping: bool
    broker_epoch: int  # of its registration in the metadata; -1 if none
    fenced: bool
    caught_up: bool


def readiness(h: NodeHealth) -> tuple[bool, str]:
    """(ready, the reason in a few words)."""
    if not h.started:
        return False, "starting"
    if h.stopping:
        return False, "shutting down"
    if h.broker_epoch < 0:
        return False, "not registered with the controller"
    if h.fenced:
        return False, "fenced by the controller"
    if not h.caught_up:
        return False, "not caught up with the metadata"
    return True, "ready"
