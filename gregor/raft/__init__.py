"""KRaft's Raft core, without I/O: `RaftNode` takes the time and messages and returns effects.

Modules::

    node.py          the node: request and response handling, polling, effects
    quorum_state.py  the states and the one place that changes them (transition table)
    leader.py        a leader's view of its replicas: high watermark, check-quorum
    fetch.py         the leader's side of Fetch: divergence and snapshot checks, parked fetches
    connections.py   one request in flight per destination, timeouts, backoff
    messages.py      Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot, DescribeQuorum
    control.py       the LeaderChange control record a new leader writes
    log.py           the log interface and MemoryLog
    storage_log.py   the same over our segment files: __cluster_metadata-0
    store.py         the persisted election state (quorum-state)
    config.py        controller.quorum.* settings

The simulator that proves it is gregor/sim.
"""

from gregor.raft.config import RaftConfig
from gregor.raft.log import Batch, MemoryLog, RaftLog, SnapshotId
from gregor.raft.node import (
    Effects,
    Entry,
    LeaderAndEpoch,
    LoadSnapshot,
    NotLeader,
    RaftError,
    RaftNode,
    Send,
)
from gregor.raft.quorum_state import Kind
from gregor.raft.storage_log import StorageRaftLog
from gregor.raft.store import (
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    QuorumStateStore,
)

__all__ = [
    "Batch",
    "Effects",
    "ElectionState",
    "Entry",
    "FileQuorumStateStore",
    "Kind",
    "LeaderAndEpoch",
    "LoadSnapshot",
    "MemoryLog",
    "MemoryQuorumStateStore",
    "NotLeader",
    "QuorumStateStore",
    "RaftConfig",
    "RaftError",
    "RaftLog",
    "RaftNode",
    "Send",
    "SnapshotId",
    "StorageRaftLog",
]
