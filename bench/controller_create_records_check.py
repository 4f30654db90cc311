#!/usr/bin/env python
"""Whether two source trees write the same metadata records and give the same answers for the
same CreateTopics requests: a check to run beside controller_create_bench.py when the
creation path changes.

    python bench/controller_create_records_check.py --tree /tmp/old --tree $PWD

Each tree, in its own Python, drives Admin.create_topics on the active controller of a
one-voter quorum polled by hand (as controller_create_bench.py does) with deterministic topic
ids and placement: valid topics (counts, replication factors, configs, manual assignments,
several per request) and every refusal the rules know (an existing or colliding name, an
illegal or reserved one, bad counts, configs and assignments, a request over the partition
bound), each request once with validate_only and once without. It prints a digest of every
metadata log entry's bytes and one of the answers (error codes, messages, replicas, ids); the
trees agree when both digests match. Exits 1 when they differ.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import uuid
from typing import Any

_SPECS: list[list[tuple[Any, ...]]] = [
    [("a", 3, 2)],
    [("b", 6, 3, None, {"retention.ms": "1000", "cleanup.policy": "compact", "x.y": None})],
    [("c", -1, -1, {0: [3, 1], 1: [2, 3]})],
    [("d", 1, 4)],
    [("a", 1, 1)],
    [("e.f", 2, 1), ("e_f", 2, 1), ("g", 0, 1), ("h", 2, 0)],
    [("i", 1, 1, None, {"retention.ms": "nope"})],
    [("j", -1, -1, {0: [1, 9]})],
    [("k", -1, -1, {0: [1], 2: [2]})],
    [("__cluster_metadata", 1, 1)],
    [("bad/name", 1, 1)],
    [("l", 3, 1, None, {"no.such": "1"})],
    [("m", 20_000, 1)],
    [(f"n{i}", 1, 1) for i in range(5)],
    [("o", -1, -1, {0: [1, 1]})],
    [("p", 2, 1, {0: [1]})],
]


def _inner() -> None:
    """In the tree measured (its gregor first on sys.path): the digests."""
    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree checked"
    from gregor.controller.admin import Admin, TopicSpec
    from gregor.controller.local import LocalController
    from gregor.metadata.raft_store import RaftMetadataStore
    from gregor.node.active_controller import ActiveControllerCore
    from gregor.protocol import api_keys
    from gregor.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
    from gregor.raft.config import RaftConfig
    from gregor.raft.log import MemoryLog
    from gregor.raft.node import RaftNode
    from gregor.raft.store import MemoryQuorumStateStore

    cluster, now = "J8qXRwI-Qyi2G0guFTiuYw", 1_000
    log = MemoryLog()
    node = raft = RaftNode(
        1, [1], log, MemoryQuorumStateStore(), random.Random(0), now,
        RaftConfig(append_linger_ms=0), cluster,
    )  # fmt: skip
    store = RaftMetadataStore(None, cluster, clock=lambda: now)
    store.local_id = 1

    class Quorum:
        node = raft

        def append(self, records: Any) -> Any:
            return node.append(records, now)

    store.attach(Quorum())  # type: ignore[arg-type]

    def run() -> None:
        for _ in range(8):
            effects = node.poll(now)
            if effects.leader_change is not None:
                store.on_leader_change(effects.leader_change)
            store.on_committed(effects.committed)
            if not effects.committed and effects.leader_change is None:
                return

    ids = iter(range(1, 1 << 20))
    controller = LocalController(
        store, 1, {}, new_uuid=lambda: uuid.UUID(int=next(ids) << 64 | 0xABCDEF),
        rng=random.Random(7),
    )  # fmt: skip
    core = ActiveControllerCore(1, store, controller)
    run()
    core.poll(now)
    run()
    R = BrokerRegistrationRequest
    for b in (1, 2, 3):
        registration = R(
            broker_id=b, cluster_id=cluster, incarnation_id=uuid.UUID(int=b),
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
    admin = Admin(store, controller, [1, 2, 3], {}, 1)
    answers = []
    for request in _SPECS:
        specs = [TopicSpec(*spec) for spec in request]
        for validate_only in (True, False):
            for o in admin.create_topics(specs, validate_only=validate_only):
                answers.append(
                    (type(o).__name__, getattr(o, "code", None), getattr(o, "message", None))
                    + (getattr(o, "replicas", None), str(getattr(o, "topic_id", "")))
                )
            run()
    entries = hashlib.sha256()
    count = 0
    for batch in log.batches:
        for record in batch.records:
            entries.update(bytes(record))
            count += 1
    answered = hashlib.sha256(repr(answers).encode()).hexdigest()[:16]
    print(f"{count} entries {entries.hexdigest()[:16]} answers {answered}")


def main() -> None:
    if sys.argv[1:] == ["--inner"]:
        _inner()
        return
    trees = [os.path.abspath(t) for t in sys.argv[2::2] if t] if "--tree" in sys.argv else []
    if len(trees) < 2:
        raise SystemExit("usage: controller_create_records_check.py --tree OLD --tree NEW")
    lines = []
    for tree in trees:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--inner"],
            cwd=tree, env={**os.environ, "PYTHONPATH": tree},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise SystemExit(f"{tree}:\n{out.stderr[-3000:]}")
        lines.append(out.stdout.strip().splitlines()[-1])
        print(f"{tree}: {lines[-1]}")
    same = len(set(lines)) == 1
    print("same records and answers" if same else "the trees DIFFER")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
