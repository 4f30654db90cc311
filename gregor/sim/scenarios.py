"""What a data-plane run is made of: the scenarios (the faults each injects, the network) and
the run's configuration (cluster size, clients, durations, the fault model's knobs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gregor.sim.network import NetworkConfig

TOPIC = "t"

FAULTS = (
    "isolate_leader",
    "isolate_node",
    "split",
    "crash_broker",
    "crash_leader",
    "crash_controller",
    "pause",
    "slow_disk",
    "clock_jump",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[str, ...]
    network: NetworkConfig = field(default_factory=NetworkConfig)
    torn_rate: float = 0.5


SCENARIOS: dict[str, Scenario] = {
    "replication-quiet": Scenario("replication-quiet", ()),
    "replication": Scenario(
        "replication", FAULTS, NetworkConfig(drop_rate=0.01, duplicate_rate=0.02)
    ),
}


@dataclass(frozen=True)
class ReplicationConfig:
    brokers: int = 3
    controllers: int = 3
    partitions: int = 2
    producers: int = 4
    transactional_producers: int = 1
    consumers: int = 1
    read_committed_consumers: int = 1
    steps: int = 6000  # events in the fault phase
    settle_ms: int = 12_000
    client_stop_ms: int = 3_000
    produce_interval_ms: int = 40
    consume_interval_ms: int = 200
    fault_interval_ms: int = 1500
    replica_lag_time_max_ms: int = 2000
    session_timeout_ms: int = 3000
    scenario: str = "replication"
    max_events: int = 400_000
    # No other fault while a broker that lost power is down or not yet back in its ISRs:
    # without it a second failure can leave that broker the last one in an ISR, elected
    # again with what it lost (Kafka without eligible leader replicas, KIP-966, does that).
    one_failure_at_a_time: bool = True
    # A broker that lost power restarts only once the controller has fenced its old
    # incarnation (False: at once; the gate below keeps that safe too).
    restart_after_fencing: bool = True
    # Brokers take up partitions only once registered and caught up to their registration, as
    # Kafka's broker and gregor's (replication/hosting.py) do. False: as soon as their metadata
    # caught up, what gregor's broker did until the simulation found acknowledged writes lost
    # that way (broker_host.py; tests/sim/test_replication_sim.py).
    apply_after_registration: bool = True
    # The brokers host the group and transaction coordinators (sim/coordinator_host.py) over
    # replicated __consumer_offsets and __transaction_state; group consumers commit offsets and
    # the transactional producers go through the transaction coordinator. False: the
    # transactional producer writes its own markers (sim/clients.py), no group consumers.
    coordinators: bool = True
    group_consumers: int = 1
