"""The faults of the data-plane simulation, injected every `fault_interval_ms` on average
(the scenario's list): isolate a partition leader or any node, split the cluster, crash a
broker or a controller, pause a node, slow a broker's disk, jump a node's clock.

A broker crash is a process crash (every write kept: the page cache survives it; back within
3 s) or a power loss (only what was flushed, or a torn prefix of the rest, files.py; back once
the controller has fenced it). acks=all promises copies on min.insync.replicas brokers, not on
their disks, so a power loss comes only while nothing else fails (every ISR full, no cut, no
pause, no slow disk) and no other fault comes until that broker is back in its ISRs: losing
the page cache of the last ISR member loses acknowledged writes in Kafka too (without KIP-966's
eligible leader replicas). At most one broker is down at a time.
"""

from __future__ import annotations

import random
from typing import Any

from gregor.sim.broker_host import BrokerHost
from gregor.sim.data_invariants import DataChecker
from gregor.sim.network import Network
from gregor.sim.rpc import SimHost
from gregor.sim.scenarios import TOPIC, ReplicationConfig, Scenario


class Faults:
    """The fault half of `Simulation` (replication.py), which provides these attributes."""

    config: ReplicationConfig
    scenario: Scenario
    fault_rng: random.Random
    checker: DataChecker
    network: Network
    hosts: dict[int, SimHost]
    broker_ids: list[int]
    controller_ids: list[int]
    paused_until: dict[int, int]
    power_lost: int | None
    flush_interval_ms: int
    last_broker_trouble: int
    last_clock_jump: int
    now: int
    events: int

    def push(self, at: int, kind: str, *payload: Any) -> None:
        raise NotImplementedError

    def record(self, *event: Any) -> None:
        raise NotImplementedError

    def count(self, name: str, n: int = 1) -> None:
        raise NotImplementedError

    def _boot(self, host: SimHost) -> None:
        raise NotImplementedError

    def _fault_delay(self) -> int:
        mean = self.config.fault_interval_ms
        return self.fault_rng.randint(mean // 2, mean + mean // 2)

    def _leaders(self) -> list[int]:
        image = self.checker.image
        topic = image.topic(TOPIC)
        if topic is None:
            return []
        return sorted({p.leader for p in topic.partitions.values() if p.leader >= 0})

    def _recovering(self) -> int | None:
        """A broker that lost power and is not yet back in every ISR it belongs in."""
        lost = self.power_lost
        if lost is None:
            return None
        host = self.hosts[lost]
        assert isinstance(host, BrokerHost)
        image = self.checker.image
        reg = image.brokers.get(lost)
        topic = image.topic(TOPIC)
        if host.up and reg is not None and reg.incarnation_id == host.incarnation_id:
            parts = [] if topic is None else topic.partitions.values()
            if all(lost in p.isr for p in parts if lost in p.replicas):
                self.power_lost = None
                return None
        return lost

    def _inject_fault(self) -> None:
        rng = self.fault_rng
        fault = rng.choice(self.scenario.faults)
        if self.config.one_failure_at_a_time and self._recovering() is not None:
            self.record("no fault while", self.power_lost, "recovers from a power loss")
            return
        servers = self.broker_ids + self.controller_ids
        done = False
        if fault == "isolate_leader":
            leaders = self._leaders()
            if leaders:
                done = self._isolate(rng.choice(leaders), "leader")
        elif fault == "isolate_node":
            done = self._isolate(rng.choice(servers), "node")
        elif fault == "split":
            ids = list(servers)
            rng.shuffle(ids)
            k = rng.randint(1, len(ids) - 1)
            part = self.network.cut(
                [ids[:k], ids[k:]], f"split {sorted(ids[:k])} | {sorted(ids[k:])}"
            )
            self.push(self.now + rng.randint(1000, 6000), "heal", part.partition_id)
            self.record("fault", part.description)
            done = True
        elif fault in ("crash_broker", "crash_leader"):
            done = self._crash_broker(fault)
        elif fault == "crash_controller":
            if all(self.hosts[c].up for c in self.controller_ids):
                done = self._crash(self.hosts[rng.choice(self.controller_ids)], fault)
        elif fault == "pause":
            done = self._pause(rng.choice(servers))
        elif fault == "slow_disk":
            host = self.hosts[rng.choice(self.broker_ids)]
            assert isinstance(host, BrokerHost)
            token = self.events
            host.slow_disk = token  # type: ignore[assignment]
            self.push(self.now + rng.randint(1000, 5000), "unslow", host.node_id, token)
            self.record("fault", f"slow disk {host.node_id}")
            done = True
        elif fault == "clock_jump":
            host = self.hosts[rng.choice(servers)]
            jump = rng.choice((-5000, -1000, 1000, 5000, 20_000))
            host.clock_offset_ms += jump
            self.last_clock_jump = self.now
            self.record("fault", f"clock of {host.node_id} jumps {jump} ms")
            done = True
        if done:
            self.count(fault)

    def _isolate(self, node_id: int, what: str) -> bool:
        others = [i for i in self.broker_ids + self.controller_ids if i != node_id]
        part = self.network.cut([[node_id], others], f"isolate {what} {node_id}")
        self.push(self.now + self.fault_rng.randint(1000, 6000), "heal", part.partition_id)
        self.record("fault", part.description)
        return True

    def _crash_broker(self, fault: str) -> bool:
        quiet_since = self.now - self.last_broker_trouble
        if not all(self.hosts[b].up for b in self.broker_ids):
            return False
        if quiet_since < 2 * self.flush_interval_ms + 1000:
            return False
        candidates = self._leaders() if fault == "crash_leader" else self.broker_ids
        if not candidates:
            return False
        host = self.hosts[self.fault_rng.choice(candidates)]
        # A power loss only while every partition has its full ISR (one failure at a time).
        power_loss = self.fault_rng.random() < 0.5 and self._full_isrs()
        return self._crash(host, fault + (" (power loss)" if power_loss else ""), power_loss)

    def _full_isrs(self) -> bool:
        """Nothing else is failing: every partition has its full ISR, no link is cut, no
        node paused, no disk slow, and no clock jumped within two session timeouts (a
        controller's jump fences every broker a while later: found at seed 6638)."""
        if not self.config.one_failure_at_a_time:
            return True
        topic = self.checker.image.topic(TOPIC)
        troubles = (
            self.now - self.last_clock_jump < 2 * self.config.session_timeout_ms
            or self.network.partitions
            or any(until > self.now for until in self.paused_until.values())
            or any(isinstance(h, BrokerHost) and h.slow_disk for h in self.hosts.values())
        )
        return (
            not troubles
            and topic is not None
            and all(len(p.isr) == len(p.replicas) for p in topic.partitions.values())
        )

    def _crash(self, host: SimHost, reason: str, power_loss: bool = True) -> bool:
        """Stop `host`. A process crash keeps every write (the page cache survives it) and
        restarts soon; a power loss keeps only what the disk had (files.py, disk.py) and comes
        back after the controller has had the time to notice (the broker session timeout):
        Kafka's durability rests on that, as it acknowledges before any fsync."""
        torn = self.scenario.torn_rate
        lost = host.crash(self.fault_rng, torn, power_loss)  # type: ignore[attr-defined]
        if lost:
            self.count(
                "lost_unflushed_bytes" if isinstance(host, BrokerHost) else "lost_raft_batches",
                lost,
            )
        self.record("crash", host.node_id, reason, f"lost {lost}")
        host.up = False
        host.stop()
        host.incarnation += 1
        delay = self.fault_rng.randint(200, 3000)
        if power_loss and isinstance(host, BrokerHost):
            if self.config.restart_after_fencing:
                delay += self.config.session_timeout_ms
            self.count("power_loss")
            self.power_lost = host.node_id
        restart = self.now + delay
        if isinstance(host, BrokerHost):
            self.last_broker_trouble = restart
        self.push(restart, "restart", host.node_id, host.incarnation, power_loss)
        return True

    def _restart(self, node_id: int, incarnation: int, power_loss: bool) -> None:
        host = self.hosts[node_id]
        if host.up or host.incarnation != incarnation:
            return
        if power_loss and isinstance(host, BrokerHost) and self.config.restart_after_fencing:
            reg = self.checker.image.brokers.get(node_id)
            if reg is not None and not reg.fenced and reg.incarnation_id == host.incarnation_id:
                # The cluster has not noticed yet (no active controller, or it is cut off).
                self.record("restart postponed", node_id)
                self.push(self.now + 500, "restart", node_id, incarnation, power_loss)
                return
        self._boot(host)

    def _pause(self, node_id: int) -> bool:
        host = self.hosts[node_id]
        if not host.up or node_id in self.paused_until and self.paused_until[node_id] > self.now:
            return False
        until = self.now + self.fault_rng.randint(1000, 6000)
        self.paused_until[node_id] = until
        self.record("fault", f"pause {node_id} until {until}")
        return True
