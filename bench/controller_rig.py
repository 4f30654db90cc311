"""The active controller of a one-voter KRaft quorum polled by hand, three brokers registered
and unfenced through its own request handling, and an `Admin` over it: what
controller_create_bench.py counts and controller_create_records_check.py compares (the drive
of tests/node/test_active_controller.py). Imported by their inner runs, which put the measured
tree's gregor first on sys.path."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"


def admin_over_one_voter(**controller_args: Any) -> tuple[Any, Any, Any, Callable[[], None]]:
    """(the Admin, the metadata store, the Raft log, `run`: polls the node until what it
    committed is replayed). `controller_args` go to LocalController (`rng`, `new_uuid`)."""
    from gregor.controller.admin import Admin
    from gregor.controller.local import LocalController
    from gregor.node.active_controller import ActiveControllerCore

    now = 1_000
    node, log, store = one_voter_store(now)

    def run() -> None:
        for _ in range(8):
            effects = node.poll(now)
            if effects.leader_change is not None:
                store.on_leader_change(effects.leader_change)
            store.on_committed(effects.committed)
            if not effects.committed and effects.leader_change is None:
                return

    controller = LocalController(store, 1, {}, **{"rng": random.Random(0), **controller_args})
    core = ActiveControllerCore(1, store, controller)
    run()
    core.poll(now)
    run()
    register_brokers(core, store, run, now)
    return Admin(store, controller, [1, 2, 3], {}, 1), store, log, run


def one_voter_store(now: int) -> tuple[Any, Any, Any]:
    """(node 1's RaftNode, the only voter, its MemoryLog, a metadata store attached to it)."""
    from gregor.metadata.raft_store import RaftMetadataStore
    from gregor.raft.config import RaftConfig
    from gregor.raft.log import MemoryLog
    from gregor.raft.node import RaftNode
    from gregor.raft.store import MemoryQuorumStateStore

    log = MemoryLog()
    node = raft = RaftNode(
        1, [1], log, MemoryQuorumStateStore(), random.Random(0), now,
        RaftConfig(append_linger_ms=0), CLUSTER,
    )  # fmt: skip
    store = RaftMetadataStore(None, CLUSTER, clock=lambda: now)
    store.local_id = 1

    class Quorum:
        node = raft

        def append(self, records: Any) -> Any:
            return node.append(records, now)

    store.attach(Quorum())  # type: ignore[arg-type]
    return node, log, store


def register_brokers(core: Any, store: Any, run: Callable[[], None], now: int) -> None:
    """Brokers 1, 2 and 3 registered and unfenced through `core`'s request handling, `run`
    after each request."""
    from gregor.protocol import api_keys
    from gregor.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest

    R = BrokerRegistrationRequest
    for b in (1, 2, 3):
        registration = R(
            broker_id=b, cluster_id=CLUSTER, incarnation_id=uuid.UUID(int=b),
            listeners=[R.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
            features=[], rack=None, log_dirs=[uuid.UUID(int=9)],
        )  # fmt: skip
        answer = core.handle(api_keys.BROKER_REGISTRATION, 3, registration, now)
        run()
        beat = BrokerHeartbeatRequest(
            broker_id=b, broker_epoch=answer.value.broker_epoch,
            current_metadata_offset=store.applied, want_fence=False, want_shut_down=False,
            offline_log_dirs=[],
        )  # fmt: skip
        core.handle(api_keys.BROKER_HEARTBEAT, 1, beat, now)
        run()
