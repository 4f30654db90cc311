"""The deterministic simulator of a KRaft quorum (issue #7).

    cluster.py     the scheduler, the nodes, clients and faults; `run_seed(seed, SimConfig(...))`
    network.py     delays, drops, duplicates, partitions, slow nodes
    disk.py        what a crash keeps of a node's log; the quorum-state store
    invariants.py  the checks after every event, and the liveness check at the end

`python -m gregor.sim --seed 7` replays one run; `--seeds 1-500` runs many.
"""

from gregor.sim.cluster import SCENARIOS, Result, SimConfig, Simulation, run_seed
from gregor.sim.invariants import InvariantViolation

__all__ = ["SCENARIOS", "InvariantViolation", "Result", "SimConfig", "Simulation", "run_seed"]
