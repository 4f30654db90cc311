"""The heartbeat task of a pair of clusters A->B (MirrorHeartbeatConnector): a record
Heartbeat(A, B, now) in B's `heartbeats` topic every `emit.heartbeats.interval.seconds`. Flow
B->C mirrors B's `heartbeats` onwards like data (as `B.heartbeats` on C), so a reader of C sees
that replication from B is alive and how far behind it is. Runs for every pair, flow enabled
or not, unless `emit.heartbeats.enabled` is false.
"""

from __future__ import annotations

from gregor.clock import Clock
from gregor.mirror import clients
from gregor.mirror.config import Flow
from gregor.mirror.formats import Heartbeat


class HeartbeatTask:
    def __init__(self, flow: Flow, clock: Clock):
        self.flow = flow
        self.clock = clock
        self.topic = flow.policy.heartbeats_topic()
        self.admin = clients.admin(flow.client_config("target", "admin"))
        self.producer = clients.producer(flow.client_config("target", "producer"))
        self.interval_ms = max(1, flow.get("emit.heartbeats.interval.seconds")) * 1000
        self.next_ms = 0

    def start(self) -> None:
        bootstrap = self.flow.client_config("target", "admin").get("bootstrap.servers", "")
        clients.reach(self.admin, self.flow.target, bootstrap, clients.reach_timeout_s(self.flow))
        clients.ensure_internal_topic(
            self.admin,
            self.topic,
            self.flow.get("heartbeats.topic.replication.factor"),
            self.flow.target,
        )

    def step(self) -> None:
        now = self.clock.now_ms()
        if now >= self.next_ms:
            beat = Heartbeat(self.flow.source, self.flow.target, now)
            self.producer.produce(
                self.topic, beat.record_value(), beat.record_key(), partition=0, timestamp=now
            )
            self.next_ms = now + self.interval_ms
        self.producer.poll(0.1)

    def close(self, clean: bool) -> None:
        self.producer.flush(5 if clean else 0)
