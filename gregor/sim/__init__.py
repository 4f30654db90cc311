"""The deterministic simulators: a KRaft quorum (issue #7) and the data plane (issue #12).

    cluster.py          the Raft quorum: scheduler, nodes, clients and faults; `run_seed`
    network.py          delays, drops, duplicates, partitions, slow nodes
    disk.py             what a crash keeps of a node's Raft log; the quorum-state store
    invariants.py       the Raft checks after every event, and the liveness check at the end

    replication.py      the data plane: brokers, controllers, clients, faults; `run_seed`
    broker_host.py      a broker: the real ReplicaManager, fetchers and logs, thin drivers
    controller_host.py  a controller: a RaftNode and the QuorumController while active
    coordinator_host.py a broker's group and transaction coordinators and marker sender
    clients.py          idempotent acks=all producers, consumers of committed data
    group_clients.py    group consumers committing offsets, transactional producers
    coordinator_rpc.py  the clients' requests to the coordinators
    rpc.py              the requests between hosts, and the host base class
    files.py            what a crash keeps of a broker's real segment files
    data_invariants.py  the data-plane checks after every event
    coordinator_invariants.py  committed offsets, and transactions as consumers see them
    broken.py           deliberately broken brokers the checks must catch

`python -m gregor.sim --seed 7` replays one run; `--seeds 1-500` runs many;
`--scenario replication` the data plane.
"""

from gregor.sim.cluster import SCENARIOS, Result, SimConfig, Simulation, run_seed
from gregor.sim.invariants import InvariantViolation

__all__ = ["SCENARIOS", "InvariantViolation", "Result", "SimConfig", "Simulation", "run_seed"]
