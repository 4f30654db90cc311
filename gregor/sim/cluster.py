"""A seeded, single-threaded simulation of a KRaft quorum: N RaftNodes, a clock, a network and
disks, all simulated, with faults; the invariants (invariants.py) are checked after every event.

Events sit in one queue (scheduler.py), by time, then in the order they were pushed; all
randomness comes from one `random.Random(seed)` (each node's own generator is seeded from it),
so a seed replays the same run, event for event: `trace_digest` hashes every event handled.

A run has two phases:
  1. faults (`steps` events): client appends to whoever is leader, and, every
     `fault_interval_ms` on average, one fault of the scenario: isolate the leader, isolate a
     node, split the cluster, crash a node (it restarts later with what its disk kept), make a
     node slow, have the leader resign, or snapshot a node's state machine;
  2. settle (`settle_ms` of simulated time): everything is healed and restarted, the network is
     clean; clients write for a while, then stop. At the end the liveness check runs.

A node's effects are applied at once: its messages enter the network, its committed entries
and snapshots go to its state machine (through the checker), and a poll is scheduled at its
next deadline (an older scheduled poll is then void). Nodes flush asynchronously, as the real
driver runs them: a flush the node asks for is done by its disk `disk_delay_ms` later (drawn
from the seed's own disk generator; more on a slow node), then reported with `flushed`. A crash
before then loses what that flush would have made durable.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.leader import NEVER
from gregor.raft.node import Effects, NotLeader, RaftError, RaftNode
from gregor.raft.quorum_state import FOLLOWER, LEADER, IllegalTransition
from gregor.sim.disk import SimLog, SimStore
from gregor.sim.invariants import Checker, InvariantViolation, encode_state
from gregor.sim.network import Network, NetworkConfig
from gregor.sim.result import RunResult
from gregor.sim.scheduler import Scheduler

NodeFactory = Callable[..., RaftNode]

FAULTS = (
    "isolate_leader",
    "isolate_node",
    "split",
    "crash",
    "crash_leader",
    "slow",
    "resign",
    "snapshot",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[str, ...]
    network: NetworkConfig = field(default_factory=NetworkConfig)
    torn_rate: float = 0.5  # chance a crash keeps a random prefix of the unflushed writes


SCENARIOS: dict[str, Scenario] = {
    "quiet": Scenario("quiet", ()),
    "mixed": Scenario("mixed", FAULTS, NetworkConfig(drop_rate=0.01, duplicate_rate=0.02)),
    "isolate-leader": Scenario(
        "isolate-leader", ("isolate_leader", "snapshot"), NetworkConfig(duplicate_rate=0.02)
    ),
    "crash": Scenario(
        "crash", ("crash", "crash_leader", "snapshot"), NetworkConfig(drop_rate=0.01), torn_rate=0.7
    ),
    "slow": Scenario(
        "slow",
        ("slow", "isolate_node", "snapshot"),
        NetworkConfig(drop_rate=0.05, duplicate_rate=0.05),
    ),
    "partition": Scenario(
        "partition", ("split", "isolate_node", "isolate_leader"), NetworkConfig(drop_rate=0.02)
    ),
}


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 3
    observers: int = 0
    steps: int = 3000  # events in the fault phase
    settle_ms: int = 15_000
    client_stop_ms: int = 4_000  # clients write for this long into the settle phase
    append_interval_ms: int = 100
    fault_interval_ms: int = 1500
    scenario: str = "mixed"
    raft: RaftConfig = field(default_factory=RaftConfig)
    disk_delay_ms: tuple[int, int] = (0, 4)  # an asynchronous flush takes this long (min, max)
    max_events: int = 200_000  # a bound on the whole run, in case something loops


@dataclass(kw_only=True)
class Result(RunResult):
    max_epoch: int
    committed: int

    def counts(self) -> str:
        return f"max epoch {self.max_epoch}, {self.committed} committed"


@dataclass
class Host:
    """One node id: its disk, and the RaftNode running on it (None while crashed)."""

    node_id: int
    disk: SimLog = field(default_factory=SimLog)
    store: SimStore = field(default_factory=SimStore)
    node: RaftNode | None = None
    incarnation: int = 0
    poll_at: int = NEVER
    poll_token: int = 0


class Simulation(Scheduler):
    def __init__(
        self, seed: int, config: SimConfig | None = None, node_factory: NodeFactory = RaftNode
    ) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        self.scenario = SCENARIOS[self.config.scenario]
        self.node_factory = node_factory
        self.rng = random.Random(seed)
        self.network = Network(random.Random(self.rng.getrandbits(64)), self.scenario.network)
        self.fault_rng = random.Random(self.rng.getrandbits(64))
        self.client_rng = random.Random(self.rng.getrandbits(64))
        self.disk_rng = random.Random(f"disk-{seed}")  # its own stream: the others are unchanged
        Scheduler.__init__(self, recent=40)
        self.voters = list(range(1, self.config.nodes + 1))
        ids = self.voters + list(range(100, 100 + self.config.observers))
        self.hosts = {i: Host(i) for i in ids}
        self.checker = Checker()
        self.settling = False
        self.clients_on = True
        self._appends = 0

    # -- the event loop -----------------------------------------------------------------------

    def run(self) -> Result:
        """The whole run: faults for `steps` events, then settle, then the liveness check."""
        try:
            self.start()
            while self.pending() and self.events < self.config.steps:
                self.step()
            self.settle()
        except InvariantViolation as exc:
            return self.result(exc.invariant, exc.detail)
        except (RaftError, IllegalTransition) as exc:
            return self.result("node raised " + type(exc).__name__, str(exc))
        except Exception as exc:  # a crash of the core is a finding too: report it with the seed
            return self.result("unexpected " + type(exc).__name__, repr(exc))
        return self.result(None, None)

    def start(self) -> None:
        for host in self.hosts.values():
            self._boot(host)
        self.push(self.client_rng.randint(0, self.config.append_interval_ms), "append")
        if self.scenario.faults:
            self.push(self._next_fault_delay(), "fault")

    def step(self) -> None:
        """Handle the next event, then check the invariants."""
        at, kind, payload = self.pop()
        if kind == "poll" and payload[1] != self.hosts[payload[0]].poll_token:
            return  # superseded by a later schedule
        self.advance(at, self.config.max_events)
        self._handle(kind, payload)
        for host in self.hosts.values():
            if host.node is not None:
                self.checker.check_node(host.node_id, host.node)

    def settle(self) -> None:
        """Heal and restart everything, let clients write a while, run on, check liveness."""
        self._begin_settle()
        self.push(self.now + self.config.client_stop_ms, "clients_off")
        self.run_until(self.now + self.config.settle_ms)
        self.check_liveness()

    def _handle(self, kind: str, payload: tuple[Any, ...]) -> None:
        if kind == "deliver":
            self._deliver(*payload)
        elif kind == "poll":
            host = self.hosts[payload[0]]
            self.record("poll", host.node_id)
            host.poll_at = NEVER  # the timer is spent: the next deadline, even the same, re-arms
            if host.node is not None:
                self._apply(host, host.node.poll(self.now))
        elif kind == "flushed":
            self._flushed(*payload)
        elif kind == "append":
            self._client_append()
        elif kind == "fault":
            if not self.settling:
                self._inject_fault()
                self.push(self.now + self._next_fault_delay(), "fault")
        elif kind == "heal":
            self.record("heal", payload[0])
            self.network.heal(payload[0])
        elif kind == "restart":
            host = self.hosts[payload[0]]
            if host.node is None and host.incarnation == payload[1]:
                self._boot(host)
        elif kind == "unslow":
            if self.network.slow.get(payload[0]) == payload[1]:
                self.record("unslow", payload[0])
                del self.network.slow[payload[0]]
        elif kind == "clients_off":
            self.record("clients off")
            self.clients_on = False

    # -- nodes --------------------------------------------------------------------------------

    def _boot(self, host: Host) -> None:
        host.incarnation += 1
        self.checker.on_restart(host.node_id)
        rng = random.Random(self.rng.getrandbits(64))
        host.node = self.node_factory(
            host.node_id,
            self.voters,
            host.disk,
            host.store,
            rng,
            self.now,
            self.config.raft,
            "sim",
            async_flush=True,
        )
        self.record("boot", host.node_id, f"incarnation {host.incarnation}", repr(host.node.quorum))
        self._apply(host, host.node.poll(self.now))

    def _crash(self, host: Host, reason: str) -> None:
        if host.node is None:
            return
        lost = host.disk.crash(self.fault_rng, self.scenario.torn_rate)
        if lost:
            self.count("lost_unflushed_batches", lost)
        self.record("crash", host.node_id, reason, f"lost {lost} unflushed batches")
        host.node = None
        host.incarnation += 1  # its connections die with it
        host.poll_token += 1
        host.poll_at = NEVER
        if not self.settling:
            self.push(
                self.now + self.fault_rng.randint(200, 3000),
                "restart",
                host.node_id,
                host.incarnation,
            )

    def _apply(self, host: Host, effects: Effects) -> None:
        node_id = host.node_id
        for send in effects.outbound:
            self._send(host, send.destination, send.message)
        if effects.snapshot is not None:
            self.checker.on_snapshot(node_id, effects.snapshot.snapshot_id, effects.snapshot.data)
        for entry in effects.committed:
            self.checker.on_committed(node_id, entry)
        if effects.flush is not None:
            low, high = self.config.disk_delay_ms
            delay = self.disk_rng.randint(low, high)
            if node_id in self.network.slow:
                delay += self.disk_rng.randint(0, 50)
            self.push(self.now + delay, "flushed", node_id, host.incarnation, effects.flush)
        deadline = effects.next_deadline_ms
        if deadline != host.poll_at:
            host.poll_at = deadline
            host.poll_token += 1
            if deadline < NEVER:
                at = max(deadline, self.now)
                if host.node_id in self.network.slow:
                    at += self.fault_rng.randint(0, 50)
                self.push(at, "poll", node_id, host.poll_token)

    def _flushed(self, node_id: int, incarnation: int, offset: int) -> None:
        """The disk wrote what a flush asked for (unless the node crashed since)."""
        host = self.hosts[node_id]
        if host.incarnation != incarnation or host.node is None:
            return
        self.record("flushed", node_id, offset)
        host.disk.flush(offset)
        self._apply(host, host.node.flushed(self.now, offset))

    # -- network ------------------------------------------------------------------------------

    def _send(self, host: Host, dst: int, message: m.Message) -> None:
        target = self.hosts.get(dst)
        if target is None:
            return
        for delay in self.network.delays(host.node_id, dst):
            self.push(
                self.now + delay,
                "deliver",
                host.node_id,
                host.incarnation,
                dst,
                target.incarnation,
                message,
            )

    def _deliver(self, src: int, src_inc: int, dst: int, dst_inc: int, message: m.Message) -> None:
        source, target = self.hosts[src], self.hosts[dst]
        alive = (
            source.incarnation == src_inc
            and target.incarnation == dst_inc
            and target.node is not None
        )
        if not alive or self.network.blocked(src, dst):
            self.record("drop", f"{src}->{dst}", describe(message))
            return
        self.record("deliver", f"{src}->{dst}", describe(message))
        assert target.node is not None
        self._apply(target, target.node.receive(self.now, src, message))

    # -- clients ------------------------------------------------------------------------------

    def _client_append(self) -> None:
        if not self.clients_on:
            return
        interval = self.config.append_interval_ms
        self.push(self.now + self.client_rng.randint(1, 2 * interval), "append")
        leaders = [h for h in self.hosts.values() if h.node is not None and h.node.state is LEADER]
        if not leaders:
            return
        host = self.client_rng.choice(leaders)
        assert host.node is not None
        count = self.client_rng.choice((1, 1, 1, 2, 3))
        records = []
        for _ in range(count):
            self._appends += 1
            records.append(b"v%d" % self._appends)
        result = host.node.append(records, self.now)
        self.record(
            "append",
            f"{len(records)} records to {host.node_id}:",
            result if isinstance(result, int) else "not leader",
        )
        if not isinstance(result, NotLeader):
            self._apply(host, host.node.poll(self.now))

    # -- faults -------------------------------------------------------------------------------

    def _next_fault_delay(self) -> int:
        mean = self.config.fault_interval_ms
        return self.fault_rng.randint(mean // 2, mean + mean // 2)

    def leader(self) -> Host | None:
        leaders = [h for h in self.hosts.values() if h.node is not None and h.node.state is LEADER]
        return max(leaders, key=lambda h: h.node.epoch if h.node else -1) if leaders else None

    def _inject_fault(self) -> None:
        rng = self.fault_rng
        fault = rng.choice(self.scenario.faults)
        up = [h for h in self.hosts.values() if h.node is not None]
        leader = self.leader()
        done = False
        if fault == "isolate_leader" and leader is not None:
            done = self._isolate(leader.node_id, "leader")
        elif fault == "isolate_node":
            done = self._isolate(rng.choice(sorted(self.hosts)), "node")
        elif fault == "split":
            ids = sorted(self.hosts)
            rng.shuffle(ids)
            k = rng.randint(1, len(ids) - 1)
            part = self.network.cut([ids[:k], ids[k:]], f"split {ids[:k]} | {ids[k:]}")
            self.push(self.now + rng.randint(1000, 6000), "heal", part.partition_id)
            self.record("fault", part.description)
            done = True
        elif fault in ("crash", "crash_leader"):
            target = leader if fault == "crash_leader" else (rng.choice(up) if up else None)
            down = sum(1 for h in self.hosts.values() if h.node is None)
            if target is not None and down < len(self.voters) // 2 + 1:
                self._crash(target, fault)
                done = True
        elif fault == "slow":
            host = rng.choice(sorted(self.hosts))
            token = self.events
            self.network.slow[host] = token
            self.push(self.now + rng.randint(2000, 8000), "unslow", host, token)
            self.record("fault", f"slow {host}")
            done = True
        elif fault == "resign" and leader is not None and leader.node is not None:
            leader.node.resign(self.now)
            self.record("fault", f"resign {leader.node_id}")
            self._apply(leader, leader.node.poll(self.now))
            done = True
        elif fault == "snapshot" and up:
            done = self._snapshot(rng.choice(up))
        if done:
            self.count(fault)

    def _isolate(self, node_id: int, what: str) -> bool:
        others = [i for i in self.hosts if i != node_id]
        part = self.network.cut([[node_id], others], f"isolate {what} {node_id}")
        self.push(self.now + self.fault_rng.randint(1000, 6000), "heal", part.partition_id)
        self.record("fault", part.description)
        return True

    def _snapshot(self, host: Host) -> bool:
        node = host.node
        if node is None:
            return False
        state = self.checker.view(host.node_id).state
        end = len(state)
        if end <= node.log.start_offset or end != node.applied_offset:
            return False
        sid = node.create_snapshot(end, encode_state(state))
        self.record("snapshot", host.node_id, sid)
        return True

    # -- the end ------------------------------------------------------------------------------

    def _begin_settle(self) -> None:
        self.settling = True
        self.record("settle")
        self.network.calm()
        for host in self.hosts.values():
            if host.node is None:
                self._boot(host)

    def check_liveness(self) -> None:
        nodes = {i: h.node for i, h in self.hosts.items() if h.node is not None}
        leaders = [(n.epoch, i) for i, n in nodes.items() if n.state is LEADER]
        if not leaders:
            states = {i: repr(n.quorum) for i, n in nodes.items()}
            raise InvariantViolation(
                "liveness: a leader is elected", f"no leader after settling: {states}"
            )
        epoch, leader_id = max(leaders)
        leader = nodes[leader_id]
        end = leader.log.end_offset
        for i, n in nodes.items():
            if i != leader_id and (
                n.state is not FOLLOWER or n.epoch != epoch or n.leader_id != leader_id
            ):
                raise InvariantViolation(
                    "liveness: all follow one leader",
                    f"node {i} is {n.quorum!r}; leader {leader_id} epoch {epoch}",
                )
            state_end = len(self.checker.view(i).state)
            if n.log.end_offset != end or n.high_watermark != end or state_end != end:
                raise InvariantViolation(
                    "liveness: the logs converge",
                    f"node {i}: log end {n.log.end_offset}, hw {n.high_watermark}, applied {state_end}; leader end {end}",
                )

    def result(self, invariant: str | None, detail: str | None) -> Result:
        max_epoch = max((self.checker.view(i).max_epoch for i in self.hosts), default=0)
        return Result(
            seed=self.seed,
            scenario=self.scenario.name,
            max_epoch=max_epoch,
            committed=len(self.checker.history),
            **self.outcome(invariant, detail),
        )


def describe(message: m.Message) -> str:
    """A short line for the event trace."""
    err = getattr(message, "error_code", 0)
    error = f" {errors.name_of(err)}" if err else ""
    if isinstance(message, m.VoteRequest):
        kind = "PreVote" if message.pre_vote else "Vote"
        return f"{kind}(epoch {message.replica_epoch}, log {message.last_offset_epoch}/{message.last_offset})"
    if isinstance(message, m.VoteResponse):
        verdict = "granted" if message.vote_granted else "rejected"
        return f"VoteResponse({verdict}, epoch {message.leader_epoch}, leader {message.leader_id}{error})"
    if isinstance(message, m.FetchRequest):
        return f"Fetch(epoch {message.current_leader_epoch}, at {message.fetch_offset}/{message.last_fetched_epoch})"
    if isinstance(message, m.FetchResponse):
        parts = [f"epoch {message.leader_epoch}", f"hw {message.high_watermark}"]
        if message.batches:
            parts.append(f"[{message.batches[0].base_offset}, {message.batches[-1].next_offset})")
        if message.diverging_epoch is not None:
            parts.append(
                f"diverging {message.diverging_epoch.epoch}/{message.diverging_epoch.end_offset}"
            )
        if message.snapshot_id is not None:
            parts.append(f"snapshot {message.snapshot_id.end_offset}/{message.snapshot_id.epoch}")
        return f"FetchResponse({', '.join(parts)}{error})"
    if isinstance(message, m.BeginQuorumEpochRequest | m.EndQuorumEpochRequest):
        return f"{type(message).__name__[:-7]}(leader {message.leader_id}, epoch {message.leader_epoch})"
    return f"{type(message).__name__}({error.strip()})"


def run_seed(
    seed: int, config: SimConfig | None = None, node_factory: NodeFactory = RaftNode
) -> Result:
    return Simulation(seed, config, node_factory).run()
