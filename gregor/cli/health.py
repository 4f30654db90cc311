"""Whether a cluster is healthy, decided from facts already gathered (`gregor cluster health`).

Pure: no I/O and no clock; `decide(facts, voter_fetch_timeout_ms)` returns a `Health`. The
command (cluster_health.py) gathers the facts from Metadata, DescribeCluster and DescribeQuorum.

A cluster is healthy when no node is down, every partition has a leader and a full ISR, and the
metadata quorum has a leader that every voter fetches from and keeps up with. A node is down when

  * it is a broker registered with the cluster but fenced (DescribeCluster v2, KIP-1073: it
    stopped heartbeating, or has not caught up with the metadata since it started);
  * it is named as a partition's replica but DescribeCluster does not list it (a server before
    v2 lists only unfenced brokers; from v2 on, such a node is not registered at all);
  * it is a voter of the metadata quorum, not its leader, that has not fetched from the leader
    within the voter fetch timeout, or not since the leader was elected.

Times of the quorum are the leader's (its own entry's last fetch is its clock when it answered),
so the clocks of this machine and the leader need not agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    fenced: bool | None  # None: the server lists unfenced brokers only (DescribeCluster v0-1)


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class QuorumReplica:
    node: int
    voter: bool  # False: an observer (a broker-only node replicating the metadata log)
    log_end_offset: int  # -1: unknown
    last_fetch_timestamp: int | None  # ms since the epoch, leader's clock; None: never
    last_caught_up_timestamp: int | None


@dataclass(frozen=True)
class Quorum:
    leader_id: int  # -1: none
    leader_epoch: int
    high_watermark: int
    replicas: tuple[QuorumReplica, ...]
    now_ms: int  # the leader's clock when it answered (else this machine's)


@dataclass(frozen=True)
class Facts:
    brokers: tuple[Broker, ...]
    partitions: tuple[Partition, ...]
    quorum: Quorum | None
    # Why the quorum is unknown: a fault (`quorum_error`, unhealthy) or a limit of what could be
    # asked (`quorum_not_asked`: not served, not authorized).
    quorum_error: str | None = None
    quorum_not_asked: str | None = None


@dataclass(frozen=True)
class Node:
    id: int
    host: str | None
    port: int | None
    roles: tuple[str, ...]  # of "broker", "voter", "observer"
    fenced: bool | None
    down: bool
    why: str | None


@dataclass(frozen=True)
class QuorumLag:
    node: int
    role: str  # Leader, Follower or Observer
    log_end_offset: int
    lag: int | None  # the leader's log end offset minus the replica's; None: unknown
    last_fetch_timestamp: int | None
    last_caught_up_timestamp: int | None


@dataclass(frozen=True)
class Health:
    healthy: bool
    reasons: tuple[str, ...]
    not_checked: tuple[str, ...]
    controller_id: int | None
    nodes: tuple[Node, ...]
    leaderless: tuple[Partition, ...]
    under_replicated: tuple[Partition, ...]
    quorum: Quorum | None
    quorum_lag: tuple[QuorumLag, ...] = field(default=())

    @property
    def nodes_down(self) -> list[int]:
        return [n.id for n in self.nodes if n.down]


def decide(facts: Facts, voter_fetch_timeout_ms: int) -> Health:
    """The health of the cluster the facts describe."""
    nodes = _nodes(facts, voter_fetch_timeout_ms)
    leaderless = tuple(p for p in _sorted(facts.partitions) if p.leader < 0)
    under = tuple(p for p in _sorted(facts.partitions) if len(p.isr) < len(p.replicas))
    reasons = [f"node {n.id} is down: {n.why}" for n in nodes if n.down]
    if leaderless:
        reasons.append(f"{_count(len(leaderless), 'partition')} without a leader")
    if under:
        reasons.append(f"{_count(len(under), 'partition')} under-replicated")
    reasons += _quorum_reasons(facts, voter_fetch_timeout_ms)
    not_checked = []
    if facts.quorum_not_asked:
        not_checked.append(f"the metadata quorum: {facts.quorum_not_asked}")
    if facts.brokers and any(b.fenced is None for b in facts.brokers):
        not_checked.append(
            "fenced brokers: DescribeCluster v2 not served or not asked; a fenced broker is "
            "seen only as a partition's replica missing from the broker list"
        )
    q = facts.quorum
    return Health(
        healthy=not reasons,
        reasons=tuple(reasons),
        not_checked=tuple(not_checked),
        controller_id=q.leader_id if q is not None and q.leader_id >= 0 else None,
        nodes=nodes,
        leaderless=leaderless,
        under_replicated=under,
        quorum=q,
        quorum_lag=quorum_lag(q) if q is not None else (),
    )


def _nodes(facts: Facts, timeout_ms: int) -> tuple[Node, ...]:
    brokers = {b.id: b for b in facts.brokers}
    q = facts.quorum
    in_quorum = {r.node: r for r in q.replicas} if q is not None else {}
    replicas = {r for p in facts.partitions for r in p.replicas}
    out = []
    for node_id in sorted(set(brokers) | set(in_quorum) | replicas):
        b = brokers.get(node_id)
        r = in_quorum.get(node_id)
        roles = tuple(
            role
            for role, has in (
                ("broker", b is not None or node_id in replicas),
                ("voter", r is not None and r.voter),
                ("observer", r is not None and not r.voter),
            )
            if has
        )
        why = _why_down(node_id, b, r, q, node_id in replicas, timeout_ms)
        out.append(
            Node(
                node_id,
                b.host if b else None,
                b.port if b else None,
                roles,
                b.fenced if b else None,
                why is not None,
                why,
            )
        )
    return tuple(out)


def _why_down(
    node_id: int,
    broker: Broker | None,
    replica: QuorumReplica | None,
    quorum: Quorum | None,
    hosts_replicas: bool,
    timeout_ms: int,
) -> str | None:
    """Every reason the node counts as down, joined; None when it does not."""
    why = []
    if broker is not None and broker.fenced:
        why.append("fenced (registered, but not heartbeating or not caught up with the metadata)")
    if broker is None and hosts_replicas:
        why.append("a partition's replica, but not a live registered broker")
    voter = replica is not None and replica.voter
    if voter and quorum is not None and quorum.leader_id >= 0 and node_id != quorum.leader_id:
        assert replica is not None
        if replica.last_fetch_timestamp is None:
            why.append("a voter that has not fetched from the quorum's leader in this epoch")
        elif quorum.now_ms - replica.last_fetch_timestamp > timeout_ms:
            age = quorum.now_ms - replica.last_fetch_timestamp
            why.append(f"a voter that has not fetched from the quorum's leader for {age} ms")
    return "; ".join(why) or None


def _quorum_reasons(facts: Facts, timeout_ms: int) -> list[str]:
    q = facts.quorum
    if q is None:
        return [f"the metadata quorum: {facts.quorum_error}"] if facts.quorum_error else []
    if q.leader_id < 0:
        return ["the metadata quorum has no leader"]
    reasons = []
    for r in sorted(q.replicas, key=lambda r: r.node):
        if not r.voter or r.node == q.leader_id or r.last_fetch_timestamp is None:
            continue
        if q.now_ms - r.last_fetch_timestamp > timeout_ms:
            continue  # down: said above
        caught_up = r.last_caught_up_timestamp
        behind = None if caught_up is None else q.now_ms - caught_up
        if behind is None or behind > timeout_ms:
            since = "since the leader was elected" if behind is None else f"for {behind} ms"
            reasons.append(f"voter {r.node} has not caught up with the quorum's leader {since}")
    return reasons


def quorum_lag(q: Quorum) -> tuple[QuorumLag, ...]:
    """Each voter (the leader first) and observer: how far behind the leader's log end."""
    leader = next((r for r in q.replicas if r.voter and r.node == q.leader_id), None)
    leader_end = leader.log_end_offset if leader is not None else q.high_watermark
    ordered = sorted(q.replicas, key=lambda r: (not r.voter, r.node != q.leader_id, r.node))
    return tuple(
        QuorumLag(
            node=r.node,
            role="Observer" if not r.voter else "Leader" if r.node == q.leader_id else "Follower",
            log_end_offset=r.log_end_offset,
            lag=leader_end - r.log_end_offset if r.log_end_offset >= 0 else None,
            last_fetch_timestamp=r.last_fetch_timestamp,
            last_caught_up_timestamp=r.last_caught_up_timestamp,
        )
        for r in ordered
    )


def _sorted(partitions: Sequence[Partition]) -> list[Partition]:
    return sorted(partitions, key=lambda p: (p.topic, p.partition))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
