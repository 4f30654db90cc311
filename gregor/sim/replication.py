"""A seeded, single-threaded simulation of the data plane: brokers (the real ReplicaManager,
Partition and Log over files in a temporary directory, and the broker's own cores for its
lifecycle, fetchers, ISR changes, hosting and purgatory: broker_host.py), the controller
(the real QuorumController on a quorum of RaftNodes), idempotent acks=all producers and
consumers, over the simulated network (network.py), with faults; the data invariants
(data_invariants.py) are checked after every event.

Events sit in one queue (scheduler.py), by time, then in the order they were pushed; all
randomness comes from one `random.Random(seed)`, so a seed replays the same run, event for
event (`trace_digest`).

A run: the controllers elect a leader, the brokers register, an admin creates the topic
(replication factor 3, min.insync.replicas 2), clients start. Then `steps` events with a fault
every `fault_interval_ms` on average (the scenario's): isolate a partition leader, isolate a
node, split the cluster, crash a broker (it loses what was not flushed, or keeps a torn prefix
of it, and restarts through the real log recovery), crash a controller, pause a node (as
SIGSTOP: it handles nothing, then wakes up believing what it believed), slow a broker's disk
(its requests are handled late and its writeback stops), jump a node's clock. Then everything
heals, the clients stop after `client_stop_ms`, and after `settle_ms` the liveness check runs:
every partition has a leader holding every committed batch, followed by every replica.

At most one broker is down at a time, and a broker crashes only when every broker has been up
for two flush intervals: acks=all promises that the data is on min.insync.replicas brokers,
not on their disks; losing the page cache of two of them at once loses it in Kafka too.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from gregor.controller.quorum_controller import ControllerConfig, TopicRequest, TopicResult
from gregor.protocol import errors
from gregor.raft.config import RaftConfig
from gregor.sim.broker_host import BrokerHost
from gregor.sim.clients import Consumer, Producer, TransactionalProducer
from gregor.sim.controller_host import ControllerHost
from gregor.sim.coordinator_host import INTERNAL_TOPICS
from gregor.sim.data_invariants import DataChecker
from gregor.sim.faults import Faults
from gregor.sim.group_clients import GroupConsumer, TxnProducer
from gregor.sim.invariants import InvariantViolation
from gregor.sim.network import Network
from gregor.sim.result import RunResult
from gregor.sim.rpc import CreateTopics, Request, Response, SimContext, SimHost
from gregor.sim.scenarios import SCENARIOS, TOPIC, ReplicationConfig
from gregor.sim.scheduler import Scheduler
from gregor.storage.config import LogConfig

WALL_BASE_MS = 1_700_000_000_000
LIVENESS_GRACE_MS = 5000


@dataclass(kw_only=True)
class Result(RunResult):
    acked: int
    read: int

    def counts(self) -> str:
        return f"{self.acked} acked, {self.read} read"


class Admin(SimHost):
    """Creates the topic once enough brokers are up (retrying until the controller agrees)."""

    def __init__(self, sim: SimContext, node_id: int, rng: random.Random) -> None:
        super().__init__(sim, node_id)
        self.rng = rng

    def boot(self) -> None:
        self.sim.timer(self, self.sim.now + 200, "create")

    def timer_create(self) -> None:
        sim = self.sim
        factor, min_isr = min(3, sim.config.brokers), str(min(2, sim.config.brokers))
        topics = [(TOPIC, sim.config.partitions)]
        if sim.config.coordinators:
            topics += INTERNAL_TOPICS
        requests = tuple(
            TopicRequest(
                name,
                num_partitions=n,
                replication_factor=factor,
                configs={"min.insync.replicas": min_isr},
            )
            for name, n in topics
        )
        target = self.rng.choice(sim.controller_ids)
        self.request(target, CreateTopics(requests), self._answered, 1000)

    def _answered(self, response: Any) -> None:
        done = (errors.NONE, errors.BY_NAME["TOPIC_ALREADY_EXISTS"].code)
        if isinstance(response, list) and all(
            isinstance(r, TopicResult) and r.error_code in done for r in response
        ):
            self.sim.record("topics created")
            return
        self.sim.timer(self, self.sim.now + 200, "create")


class Simulation(Scheduler, Faults):
    broker_class: type[BrokerHost] = BrokerHost

    def __init__(self, seed: int, config: ReplicationConfig | None = None) -> None:
        self.seed = seed
        self.config = config = config or ReplicationConfig()
        self.scenario = SCENARIOS[config.scenario]
        self.rng = random.Random(seed)
        self.network = Network(random.Random(self.rng.getrandbits(64)), self.scenario.network)
        self.fault_rng = random.Random(self.rng.getrandbits(64))
        self.rng_admin = random.Random(self.rng.getrandbits(64))
        Scheduler.__init__(self, recent=50)
        self.checker = DataChecker()
        self.clients_on = True
        self.settling = False
        self.flush_interval_ms = self.rng.choice((200, 500, 1000))
        self.segment_bytes = self.rng.choice((2048, 16384, 1 << 30))
        self.last_broker_trouble = 0
        self.last_clock_jump = -(10**9)
        self.paused_until: dict[int, int] = {}
        self.power_lost: int | None = None
        self.broker_ids = list(range(1, config.brokers + 1))
        self.controller_ids = list(range(3001, 3001 + config.controllers))
        self.partitions = [(TOPIC, i) for i in range(config.partitions)]
        internal = INTERNAL_TOPICS if config.coordinators else ()
        self.internal_partitions = [(name, i) for name, n in internal for i in range(n)]
        self.hosts: dict[int, SimHost] = {}
        self.directory = tempfile.mkdtemp(
            prefix=f"gregor-sim-{seed}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        )

    @property
    def wall_ms(self) -> int:
        return WALL_BASE_MS + self.now

    # -- building --------------------------------------------------------------------------

    def build(self) -> None:
        config = self.config
        controller_config = ControllerConfig(
            broker_session_timeout_ms=config.session_timeout_ms,
            static={"leader.imbalance.check.interval.seconds": "5"},
        )
        for cid in self.controller_ids:
            self.hosts[cid] = ControllerHost(
                self, cid, self.controller_ids, controller_config, RaftConfig()
            )
        log_config = LogConfig(segment_bytes=self.segment_bytes)
        for bid in self.broker_ids:
            root = os.path.join(self.directory, f"broker-{bid}")
            self.hosts[bid] = self.broker_class(
                self, bid, root, log_config, config.replica_lag_time_max_ms
            )
        for i in range(config.producers):
            rng = random.Random(self.rng.getrandbits(64))
            self.hosts[500 + i] = Producer(self, 500 + i, rng, 7000 + i, config.produce_interval_ms)
        for i in range(config.transactional_producers):
            rng = random.Random(self.rng.getrandbits(64))
            self.hosts[700 + i] = (
                TxnProducer(self, 700 + i, rng, config.produce_interval_ms)
                if config.coordinators
                else TransactionalProducer(self, 700 + i, rng, 9000 + i, config.produce_interval_ms)
            )
        for i in range(config.group_consumers if config.coordinators else 0):
            rng = random.Random(self.rng.getrandbits(64))
            self.hosts[800 + i] = GroupConsumer(self, 800 + i, rng, config.consume_interval_ms)
        for i in range(config.consumers):
            rng = random.Random(self.rng.getrandbits(64))
            self.hosts[600 + i] = Consumer(self, 600 + i, rng, config.consume_interval_ms)
        for i in range(config.read_committed_consumers):
            rng = random.Random(self.rng.getrandbits(64))
            self.hosts[650 + i] = Consumer(
                self, 650 + i, rng, config.consume_interval_ms, read_committed=True
            )
        self.hosts[900] = Admin(self, 900, self.rng_admin)
        for host in self.hosts.values():
            self._boot(host)

    def _boot(self, host: SimHost) -> None:
        host.incarnation += 1
        host.up = True
        self.record("boot", host.node_id, host.incarnation)
        host.boot()  # type: ignore[attr-defined]

    # -- the event loop --------------------------------------------------------------------

    def timer(self, host: SimHost, at: int, name: str, *args: Any) -> None:
        self.push(at, "timer", host.node_id, host.incarnation, name, args)

    def send(self, host: SimHost, dst: int, message: Any) -> None:
        target = self.hosts.get(dst)
        if target is None:
            return
        for delay in self.network.delays(host.node_id, dst):
            self.push(
                self.now + delay, "deliver", host.node_id, host.incarnation, dst,
                target.incarnation, message, False,
            )  # fmt: skip

    def run(self) -> Result:
        quiet = logging.getLogger("gregor")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # the cores log every fault they see
        try:
            try:
                self.build()
                if self.scenario.faults:
                    self.push(2500 + self._fault_delay(), "fault")
                while self.pending() and self.events < self.config.steps:
                    self.step()
                self.settle()
            finally:
                quiet.setLevel(level)
                for host in self.hosts.values():
                    if isinstance(host, BrokerHost):
                        host.close_files()
                shutil.rmtree(self.directory, ignore_errors=True)
        except InvariantViolation as exc:
            return self.result(exc.invariant, exc.detail)
        except Exception as exc:  # a crash of a core is a finding too: report it with the seed
            return self.result("unexpected " + type(exc).__name__, repr(exc))
        return self.result(None, None)

    def step(self) -> None:
        at, kind, payload = self.pop()
        if kind == "timer" and not self._live_timer(payload):
            return  # an answered request's timeout, a superseded poll: not an event
        target = _target(kind, payload)
        if target is not None and self.paused_until:
            until = self.paused_until.get(target)
            if until is not None and at < until:
                self.push(until, kind, *payload)
                return
        self.advance(at, self.config.max_events)
        self._handle(kind, payload)
        # An event changes the host it happens on; what all brokers are checked against (the
        # committed metadata, the committed histories) moves with events elsewhere: then the
        # replicas of what moved on every broker.
        checker = self.checker
        metadata_moved, moved = checker.take_changed()
        everywhere = metadata_moved or target is None
        for bid in self.broker_ids:
            if everywhere or target == bid or moved:
                host = self.hosts[bid]
                if host.up:
                    only = None if everywhere or target == bid else moved
                    checker.check_broker(host, only)  # type: ignore[arg-type]

    def _live_timer(self, payload: tuple[Any, ...]) -> bool:
        node_id, incarnation, name, args = payload
        host = self.hosts[node_id]
        if not host.up or host.incarnation != incarnation:
            return False
        if name == "timeout":
            return host.waiting_for(args[0])
        if name == "poll" and isinstance(host, ControllerHost):
            return bool(args[0] == host.poll_token)
        return host.live_timer(name, args)

    def _handle(self, kind: str, payload: tuple[Any, ...]) -> None:
        if kind == "deliver":
            self._deliver(*payload)
        elif kind == "timer":
            node_id, incarnation, name, args = payload
            host = self.hosts[node_id]
            if host.up and host.incarnation == incarnation:
                host.on_timer(name, args)
        elif kind == "fault":
            if not self.settling:
                self._inject_fault()
                self.push(self.now + self._fault_delay(), "fault")
        elif kind == "heal":
            self.record("heal", payload[0])
            self.network.heal(payload[0])
        elif kind == "restart":
            self._restart(*payload)
        elif kind == "unslow":
            host = self.hosts[payload[0]]
            if isinstance(host, BrokerHost) and host.slow_disk == payload[1]:
                self.record("unslow", host.node_id)
                host.slow_disk = False
        elif kind == "clients_off":
            self.record("clients off")
            self.clients_on = False

    def _deliver(
        self, src: int, src_inc: int, dst: int, dst_inc: int, message: Any, delayed: bool
    ) -> None:
        source, target = self.hosts[src], self.hosts[dst]
        if source.incarnation != src_inc or target.incarnation != dst_inc or not target.up:
            return
        if self.network.blocked(src, dst):
            self.record("drop", src, dst, _describe(message))
            return
        if isinstance(target, BrokerHost) and target.slow_disk and not delayed:
            at = self.now + self.fault_rng.randint(5, 200)
            self.push(at, "deliver", src, src_inc, dst, dst_inc, message, True)
            return
        self.record("deliver", src, dst, _describe(message))
        target.receive(src, message)

    # -- the end ---------------------------------------------------------------------------

    def settle(self) -> None:
        self.settling = True
        self.record("settle")
        self.network.calm()
        self.paused_until = {k: v for k, v in self.paused_until.items() if v > self.now}
        for host in self.hosts.values():
            if isinstance(host, BrokerHost):
                host.slow_disk = False
        self.push(self.now + self.config.client_stop_ms, "clients_off")
        self.run_until(self.now + self.config.settle_ms)
        # Liveness is "eventually": a change still under way at the end (a leader balancing
        # just committed, a broker not yet back in the ISR) gets a little more time.
        deadline = self.now + LIVENESS_GRACE_MS
        while True:
            try:
                self.check_liveness()
                return
            except InvariantViolation:
                if self.now >= deadline:
                    raise
            self.run_until(self.now + 100)

    def check_liveness(self) -> None:
        image = self.checker.image
        for tp in self.partitions + self.internal_partitions:
            part = image.partition(*tp)
            history = self.checker.history(tp)
            if part is None or part.leader < 0:
                raise InvariantViolation("liveness: every partition has a leader", f"{tp}: {part}")
            leader = self.hosts[part.leader]
            assert isinstance(leader, BrokerHost)
            p = leader.replicas.get(*tp) if leader.replicas is not None else None
            if p is None or not p.is_leader or p.log.high_watermark < history.end:
                raise InvariantViolation(
                    "liveness: the leader serves every committed batch",
                    f"{tp}: leader {part.leader}: {p and (p.leader_epoch, p.log.high_watermark)}, committed end {history.end}",
                )
            if sorted(part.isr) != sorted(part.replicas):
                raise InvariantViolation(
                    "liveness: every replica is back in the ISR", f"{tp}: {part}"
                )
        for host in self.hosts.values():
            if isinstance(host, Producer) and not host.stopped and host.batch is not None:
                raise InvariantViolation(
                    "liveness: producers get their batches acknowledged",
                    f"producer {host.node_id} still sends {host.batch[0]}",
                )
        if self.config.read_committed_consumers:
            self.checker.txns.check_visible()
        self.checker.offsets.check_visible()

    def result(self, invariant: str | None, detail: str | None) -> Result:
        return Result(
            seed=self.seed,
            scenario=self.scenario.name,
            acked=self.checker.acked,
            read=self.checker.read,
            **self.outcome(invariant, detail),
        )


def _target(kind: str, payload: tuple[Any, ...]) -> int | None:
    """The host an event happens on (held while that host is paused)."""
    if kind == "deliver":
        return payload[2]
    if kind == "timer":
        return payload[0]
    return None


def _describe(message: Any) -> str:
    """A message as the trace names it (kept per type: every message is traced)."""
    body = message.body if isinstance(message, Request | Response) else message
    key = (type(message), type(body))
    described = _DESCRIBED.get(key)
    if described is None:
        kind = {Request: "req", Response: "resp"}.get(type(message), "")
        described = _DESCRIBED[key] = f"{kind} {type(body).__name__}"
    return described


_DESCRIBED: dict[tuple[type, type], str] = {}


def run_seed(
    seed: int, config: ReplicationConfig | None = None, simulation: type[Simulation] = Simulation
) -> Result:
    return simulation(seed, config).run()
